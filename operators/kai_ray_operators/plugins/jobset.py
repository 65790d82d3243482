"""JobSet (jobset.x-k8s.io/v1alpha2): one PodGroup, a SubGroup per replicated job and per replica (§7).

The root needs `minSubGroup` replicated jobs: the JobSet's
`kai.scheduler/batch-min-member` (capped at their number), else 1 under
`startupPolicyOrder: InOrder` (the controller starts them one at a time),
else all of them. Replicated job `rj` is a parent needing all its replicas;
each replica `rj-replica-<k>` is a leaf needing the template's
`batch-min-member`, else the Job's `parallelism`, else 1.

PodGroups made by the earlier, flat JobSet grouper (no SubGroups, named
`pg-<js>-<uid>` or `pg-<js>-<uid>-<rj>`) keep their shape while any exists.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from kai_ray.api.constants import (
    PODGROUP_API_VERSION,
    TOPOLOGY_ANNOTATION,
    TOPOLOGY_PREFERRED_PLACEMENT_ANNOTATION,
    TOPOLOGY_REQUIRED_PLACEMENT_ANNOTATION,
)
from kai_ray_operators.context import GroupingContext
from kai_ray_operators.errors import InvalidWorkload
from kai_ray_operators.fields import (
    KubeObject,
    Step,
    describe,
    field,
    field_path,
    int_field,
    labels_of,
    list_field,
    name,
    namespace,
    str_field,
    uid,
)
from kai_ray_operators.metadata import PodGroupMetadata, SubGroupMetadata, TopologyConstraint
from kai_ray_operators.plugins.batch import min_member_override
from kai_ray_operators.plugins.default import default_metadata, pod_group_name

__all__ = ["group_jobset"]

REPLICATED_JOB_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"
JOB_INDEX_LABEL = "jobset.sigs.k8s.io/job-index"
IN_ORDER = "InOrder"


def _replica_count(jobset: KubeObject, path: tuple[Step, ...], key: str) -> int:
    value = int_field(jobset, *path, key)
    if value is not None and value < 0:
        raise InvalidWorkload(describe(jobset), "must not be negative", field_path((*path, key)))
    return 1 if value is None else value


def _leaf_topology(jobset: KubeObject, path: tuple[Step, ...]) -> TopologyConstraint | None:
    def annotation(key: str) -> str:
        return str_field(jobset, *path, "template", "metadata", "annotations", key) or ""

    topology = annotation(TOPOLOGY_ANNOTATION)
    required = annotation(TOPOLOGY_REQUIRED_PLACEMENT_ANNOTATION)
    preferred = annotation(TOPOLOGY_PREFERRED_PLACEMENT_ANNOTATION)
    if not topology or not (required or preferred):
        return None
    return TopologyConstraint(topology, required, preferred)


def _subgroups(jobset: KubeObject, count: int) -> list[SubGroupMetadata]:
    result: list[SubGroupMetadata] = []
    for index in range(count):
        path: tuple[Step, ...] = ("spec", "replicatedJobs", index)
        job_name = str_field(jobset, *path, "name")
        if not job_name:
            raise InvalidWorkload(describe(jobset), "a name is required", field_path((*path, "name")))
        replicas = _replica_count(jobset, path, "replicas")
        leaf_min = min_member_override(jobset, (*path, "template", "metadata", "annotations"), minimum=1)
        if leaf_min is None:
            leaf_min = _replica_count(jobset, (*path, "template", "spec"), "parallelism")
        topology = _leaf_topology(jobset, path)
        result.append(SubGroupMetadata(job_name, min_subgroup=replicas))
        result += [
            SubGroupMetadata(
                f"{job_name}-replica-{k}", min_available=leaf_min, parent=job_name, topology=topology
            )
            for k in range(replicas)
        ]
    return result


def _root_min_subgroup(jobset: KubeObject, count: int) -> int:
    override = min_member_override(jobset, minimum=1)
    if override is not None:
        return min(override, count)
    return 1 if str_field(jobset, "spec", "startupPolicy", "startupPolicyOrder") == IN_ORDER else count


def _pod_label(pod: KubeObject, key: str) -> str:
    value = labels_of(pod).get(key)
    if not value:
        raise InvalidWorkload(describe(pod), "label is required to place a JobSet pod in its replica", key)
    return value


def _legacy(context: GroupingContext, jobset: KubeObject) -> bool:
    """Whether the earlier grouper already made a flat PodGroup for this JobSet."""
    prefix = pod_group_name(jobset)
    return any(
        (name(existing) == prefix or name(existing).startswith(f"{prefix}-"))
        and not field(existing, "spec", "subGroups")
        for existing in context.reader.list(PODGROUP_API_VERSION, "PodGroup", namespace(jobset), {})
    )


def _legacy_metadata(metadata: PodGroupMetadata, jobset: KubeObject, pod: KubeObject) -> PodGroupMetadata:
    replicated_job = _pod_label(pod, REPLICATED_JOB_LABEL)
    in_order = str_field(jobset, "spec", "startupPolicy", "startupPolicyOrder") == IN_ORDER
    pod_group = f"{metadata.name}-{replicated_job}" if in_order else metadata.name
    gang = min_member_override(jobset)
    return dataclasses.replace(metadata, name=pod_group, min_available=1 if gang is None else gang)


def group_jobset(
    context: GroupingContext, top_owner: KubeObject, pod: KubeObject, all_owners: Sequence[KubeObject]
) -> PodGroupMetadata:
    """Plugin `jobset`."""
    if not name(top_owner) or not uid(top_owner):
        raise InvalidWorkload(describe(top_owner), "a JobSet needs a name and a uid to name its PodGroup")
    count = len(list_field(top_owner, "spec", "replicatedJobs") or [])
    if count == 0:
        raise InvalidWorkload(
            describe(top_owner), "at least one replicated job is required", "spec.replicatedJobs"
        )
    metadata = default_metadata(context, top_owner, pod)
    if _legacy(context, top_owner):
        return _legacy_metadata(metadata, top_owner, pod)
    root_min = _root_min_subgroup(top_owner, count)
    subgroups = _subgroups(top_owner, count)
    leaf = f"{_pod_label(pod, REPLICATED_JOB_LABEL)}-replica-{_pod_label(pod, JOB_INDEX_LABEL)}"
    if not any(group.name == leaf for group in subgroups):
        raise InvalidWorkload(describe(pod), f"its replica {leaf!r} is not in the JobSet", JOB_INDEX_LABEL)
    subgroups = [
        dataclasses.replace(group, pods=(name(pod),)) if group.name == leaf else group for group in subgroups
    ]
    return dataclasses.replace(metadata, min_available=0, min_subgroup=root_min, subgroups=tuple(subgroups))
