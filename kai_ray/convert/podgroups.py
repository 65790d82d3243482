"""PodGroup manifests → `JobSpec`s (without tasks): priority, preemptibility, gang tree, timers.

Priority and preemptibility are resolved exactly as KAI's scheduler does
(spec/scheduling.md §9): class value, else the globalDefault class, else 50;
explicit preemptibility, else priority below 100. The SubGroup tree is
checked for the structural rules of KAI's webhook, since a broken tree has
no sensible gang meaning.
"""

from __future__ import annotations

from dataclasses import dataclass

from kai_ray.api import Manifest, PodGroup, PodGroupSpec, PriorityClass, SubGroup
from kai_ray.api.constants import (
    BUILTIN_PRIORITY_CLASSES,
    DEFAULT_PODGROUP_PRIORITY,
    DEFAULT_SUBGROUP,
    LAST_EVICTION_TIMESTAMP_ANNOTATION,
    LAST_START_TIMESTAMP_ANNOTATION,
    NODE_POOL_LABEL,
    NON_PREEMPTIBLE_PRIORITY,
    PREEMPTIBLE,
    STALE_PODGROUP_TIMESTAMP_ANNOTATION,
)
from kai_ray.convert.common import Invalid, annotation_time, created, seconds
from kai_ray.convert.queues import QueueIndex
from kai_ray.convert.topologies import constraint_spec, job_constraint
from kai_ray.model.objects import JobSpec, PodSetSpec, SubGroupSetSpec, TopologyConstraintSpec


@dataclass(frozen=True)
class Priorities:
    """PriorityClass values by name; KAI's four built-in classes exist even when not written out."""

    values: dict[str, int]
    global_default: int | None = None

    @classmethod
    def from_manifests(cls, manifests: list[Manifest[PriorityClass]]) -> Priorities:
        values = dict(BUILTIN_PRIORITY_CLASSES)
        values.update({m.obj.metadata.name: m.obj.value for m in manifests})
        defaults = [m.obj.value for m in manifests if m.obj.global_default]
        return cls(values, max(defaults) if defaults else None)

    def knows(self, class_name: str) -> bool:
        return class_name in self.values

    def value_of(self, class_name: str) -> int:
        if class_name in self.values:
            return self.values[class_name]
        return DEFAULT_PODGROUP_PRIORITY if self.global_default is None else self.global_default


def is_preemptible(explicit: str | None, priority: int) -> bool:
    if explicit is not None:
        return explicit == PREEMPTIBLE
    return priority < NON_PREEMPTIBLE_PRIORITY


def job_from_podgroup(manifest: Manifest[PodGroup], queues: QueueIndex, priorities: Priorities) -> JobSpec:
    group = manifest.obj
    spec, annotations = group.spec, group.metadata.annotations
    missing = queues.why_missing(spec.queue) if spec.queue else "no queue given"
    if missing is not None:
        raise Invalid("spec.queue", missing)
    priority = priorities.value_of(spec.priority_class_name)
    return JobSpec(
        name=group.metadata.name,
        queue=spec.queue,
        namespace=group.metadata.namespace or "",
        priority=priority,
        preemptible=is_preemptible(spec.preemptibility, priority),
        created=created(manifest),
        last_start=annotation_time(annotations, LAST_START_TIMESTAMP_ANNOTATION),
        subgroups=subgroup_tree(spec, job_constraint(group)),
        preemption_delay=seconds(spec.preemption_delay),
        last_eviction=annotation_time(annotations, LAST_EVICTION_TIMESTAMP_ANNOTATION),
        stale_since=annotation_time(annotations, STALE_PODGROUP_TIMESTAMP_ANNOTATION),
        staleness_grace=seconds(spec.staleness_grace_period),
        deleting=group.metadata.deletion_timestamp is not None,
        node_pool=group.metadata.labels.get(NODE_POOL_LABEL, ""),
    )


def subgroup_tree(spec: PodGroupSpec, constraint: TopologyConstraintSpec | None = None) -> SubGroupSetSpec:
    """The gang tree: one `default` pod set for a flat PodGroup, else the SubGroups as declared.

    A SubGroup named as someone's parent is an inner set (`minSubGroup`, unset =
    all members); any other is a pod set (`minMember`, unset = 0, i.e. elastic).
    `constraint` is the job-level topology constraint, carried by the root.
    """
    if not spec.sub_groups:
        min_member = 1 if spec.min_member is None else spec.min_member
        return SubGroupSetSpec(pod_sets=(PodSetSpec(DEFAULT_SUBGROUP, min_member),), topology=constraint)
    _check_structure(spec.sub_groups)
    inner = {g.parent for g in spec.sub_groups if g.parent}
    return _subtree("", spec.min_sub_group, spec.sub_groups, inner, constraint)


def _subtree(
    name: str,
    min_subgroups: int | None,
    groups: list[SubGroup],
    inner: set[str],
    constraint: TopologyConstraintSpec | None,
) -> SubGroupSetSpec:
    children = [g for g in groups if (g.parent or "") == name]
    return SubGroupSetSpec(
        name=name,
        min_subgroups=min_subgroups,
        subgroup_sets=tuple(
            _subtree(g.name, g.min_sub_group, groups, inner, constraint_spec(g.topology_constraint))
            for g in children
            if g.name in inner
        ),
        pod_sets=tuple(
            PodSetSpec(g.name, g.min_member or 0, constraint_spec(g.topology_constraint))
            for g in children
            if g.name not in inner
        ),
        topology=constraint,
    )


def _check_structure(groups: list[SubGroup]) -> None:
    """Unique names, parents that exist, and every SubGroup reachable from the root (no cycles)."""
    names: set[str] = set()
    for index, group in enumerate(groups):
        if group.name in names:
            raise Invalid(f"spec.subGroups[{index}].name", f"duplicate SubGroup name {group.name!r}")
        names.add(group.name)
    for index, group in enumerate(groups):
        if group.parent is not None and group.parent not in names:
            raise Invalid(f"spec.subGroups[{index}].parent", f"SubGroup {group.parent!r} does not exist")
    stranded = names - _reachable(groups)
    if stranded:
        raise Invalid("spec.subGroups", f"parent links form a cycle among {', '.join(sorted(stranded))}")


def _reachable(groups: list[SubGroup]) -> set[str]:
    found: set[str] = set()
    frontier = {""}
    while frontier:
        frontier = {g.name for g in groups if (g.parent or "") in frontier} - found
        found |= frontier
    return found
