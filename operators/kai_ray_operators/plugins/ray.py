"""KubeRay RayCluster, RayJob and RayService: one gang with a SubGroup per node group (§2.1).

The PodGroup belongs to the top owner (a RayJob's or RayService's PodGroup to
it, not to the RayCluster it created) but its shape comes from the live
RayCluster: `headgroup` needs its one head, each worker group needs
`minReplicas` (or `replicas` when no minimum is set) times `numOfHosts`.
Worker groups with nothing to run are left out; a suspended group too
(KubeRay's field is `suspend`; KAI reads `suspended`; both are honoured).
Pods join the SubGroup named by their `ray.io/group` label.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from kai_ray.api.constants import (
    RAY_PRIORITY_CLASS_LABEL,
    TOPOLOGY_ANNOTATION,
    TOPOLOGY_PREFERRED_PLACEMENT_ANNOTATION,
    TOPOLOGY_REQUIRED_PLACEMENT_ANNOTATION,
)
from kai_ray_operators.context import Grouper, GroupingContext
from kai_ray_operators.errors import InvalidWorkload, ReadError
from kai_ray_operators.fields import (
    KubeObject,
    Step,
    bool_field,
    describe,
    field,
    field_path,
    has_field,
    int_field,
    labels_of,
    list_field,
    map_field,
    name,
    namespace,
    str_field,
)
from kai_ray_operators.metadata import PodGroupMetadata, SubGroupMetadata, TopologyConstraint
from kai_ray_operators.plugins.default import default_metadata

__all__ = ["group_ray_cluster", "group_ray_job", "group_ray_service"]

HEAD_GROUP = "headgroup"
NODE_GROUP_LABEL = "ray.io/group"


def _group_topology(cluster: KubeObject, group: tuple[Step, ...]) -> TopologyConstraint | None:
    """A node group's constraint from its pod template; levels without a topology name are an error."""

    def annotation(key: str) -> str:
        return str_field(cluster, *group, "template", "metadata", "annotations", key) or ""

    required = annotation(TOPOLOGY_REQUIRED_PLACEMENT_ANNOTATION)
    preferred = annotation(TOPOLOGY_PREFERRED_PLACEMENT_ANNOTATION)
    if not required and not preferred:
        return None
    topology = annotation(TOPOLOGY_ANNOTATION)
    if not topology:
        raise InvalidWorkload(
            describe(cluster),
            f"{TOPOLOGY_ANNOTATION} is required when a topology placement is set",
            field_path((*group, "template", "metadata", "annotations")),
        )
    return TopologyConstraint(topology, required, preferred)


def _worker_group(cluster: KubeObject, index: int) -> SubGroupMetadata | None:
    path: tuple[Step, ...] = ("spec", "workerGroupSpecs", index)
    if map_field(cluster, *path) is None:
        raise InvalidWorkload(describe(cluster), "expected an object", field_path(path))
    if bool_field(cluster, *path, "suspended") or bool_field(cluster, *path, "suspend"):
        return None
    desired = int_field(cluster, *path, "replicas") or 0
    minimum = int_field(cluster, *path, "minReplicas") or 0
    if minimum > desired or minimum < 0:
        raise InvalidWorkload(
            describe(cluster),
            f"minReplicas {minimum} must be between 0 and replicas ({desired})",
            field_path((*path, "minReplicas")),
        )
    if desired == 0:
        return None
    hosts = int_field(cluster, *path, "numOfHosts")
    hosts = 1 if hosts is None else hosts
    if hosts < 0:
        raise InvalidWorkload(describe(cluster), "must not be negative", field_path((*path, "numOfHosts")))
    group_name = str_field(cluster, *path, "groupName") or f"worker-group-{index}"
    return SubGroupMetadata(
        group_name, min_available=(minimum or desired) * hosts, topology=_group_topology(cluster, path)
    )


def cluster_subgroups(cluster: KubeObject) -> tuple[SubGroupMetadata, ...]:
    """`headgroup` and the worker groups that need pods, in spec order."""
    head = SubGroupMetadata(
        HEAD_GROUP, min_available=1, topology=_group_topology(cluster, ("spec", "headGroupSpec"))
    )
    workers = list_field(cluster, "spec", "workerGroupSpecs") or []
    groups = [_worker_group(cluster, index) for index in range(len(workers))]
    return (head, *(group for group in groups if group is not None))


def _ray_cluster(
    context: GroupingContext, owner: KubeObject, name_paths: Sequence[tuple[str, ...]]
) -> KubeObject:
    """The RayCluster a RayJob or RayService points at; the first name path that exists wins, even empty."""
    path = next((path for path in name_paths if has_field(owner, *path)), name_paths[0])
    cluster_name = str_field(owner, *path)
    if not cluster_name:
        raise InvalidWorkload(
            describe(owner),
            "failed to extract rayClusterName; make sure that the ray-operator is up and a "
            "rayCluster child-object has been created",
            ".".join(path),
        )
    return context.reader.get(
        str(owner.get("apiVersion") or ""), "RayCluster", namespace(owner), cluster_name
    )


def _uses_subgroups(context: GroupingContext, namespace_: str, pod_group: str) -> bool:
    """False only for a PodGroup made before SubGroups existed: it keeps its flat shape."""
    try:
        existing = context.existing_pod_group(namespace_, pod_group)
    except ReadError:
        return True
    return existing is None or bool(field(existing, "spec", "subGroups"))


def _ray_metadata(
    context: GroupingContext, top_owner: KubeObject, cluster: KubeObject, pod: KubeObject
) -> PodGroupMetadata:
    metadata = default_metadata(context, top_owner, pod)
    subgroups = cluster_subgroups(cluster)
    total = sum(group.min_available for group in subgroups)
    if not _uses_subgroups(context, metadata.namespace, metadata.name):
        subgroups = ()
    node_group = labels_of(pod).get(NODE_GROUP_LABEL)
    subgroups = tuple(
        dataclasses.replace(group, pods=(name(pod),)) if group.name == node_group else group
        for group in subgroups
    )
    priority = labels_of(top_owner).get(RAY_PRIORITY_CLASS_LABEL, metadata.priority_class_name)
    return dataclasses.replace(
        metadata, min_available=total, subgroups=subgroups, priority_class_name=priority
    )


def _ray_grouper(find_cluster: Callable[[GroupingContext, KubeObject], KubeObject]) -> Grouper:
    def group(
        context: GroupingContext, top_owner: KubeObject, pod: KubeObject, all_owners: Sequence[KubeObject]
    ) -> PodGroupMetadata:
        return _ray_metadata(context, top_owner, find_cluster(context, top_owner), pod)

    return group


group_ray_cluster = _ray_grouper(lambda context, cluster: cluster)
group_ray_job = _ray_grouper(lambda context, job: _ray_cluster(context, job, [("status", "rayClusterName")]))
group_ray_service = _ray_grouper(
    lambda context, service: _ray_cluster(
        context,
        service,
        [
            ("status", "activeServiceStatus", "rayClusterName"),
            ("status", "pendingServiceStatus", "rayClusterName"),
        ],
    )
)
