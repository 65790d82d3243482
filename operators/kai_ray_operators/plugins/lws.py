"""LeaderWorkerSet: a PodGroup per replica group, leader and workers as SubGroups (spec §6).

Each group of `size` pods (one leader, `size - 1` workers) is its own gang,
`pg-<lws>-<uid>-group-<index>`. With `startupPolicy: LeaderReady` the workers
appear only after the leader runs, so until then the gang is the leader.

Segments (`subGroupPolicy.subGroupSize`, or `kai.scheduler/segment-size` on
the LWS, then on the worker template) follow LWS's own numbering: when
`size - 1` divides by S the leader is an extra pod of segment 0, otherwise
pods 0..S-1 (leader included) are segment 0. With `LeaderWorker` segment 0 is
a parent of `leader` and `workers`; with `LeaderExcluded` the leader is a
SubGroup of its own beside the segments.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from kai_ray.api.constants import SEGMENT_SIZE_ANNOTATION
from kai_ray_operators.context import GroupingContext
from kai_ray_operators.errors import InvalidWorkload
from kai_ray_operators.fields import (
    KubeObject,
    annotations_of,
    describe,
    field,
    int_field,
    labels_of,
    map_field,
    name,
    parse_int,
    str_field,
)
from kai_ray_operators.metadata import PodGroupMetadata, SubGroupMetadata, TopologyConstraint
from kai_ray_operators.plugins.default import default_metadata
from kai_ray_operators.segments import check_segment_count, pod_index, segment_topology

__all__ = ["group_lws"]

SIZE_ANNOTATION = "leaderworkerset.sigs.k8s.io/size"
GROUP_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/group-index"
WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
LEADER_WORKER, LEADER_EXCLUDED = "LeaderWorker", "LeaderExcluded"
TEMPLATE = ("spec", "leaderWorkerTemplate")


def _is_leader(pod: KubeObject) -> bool:
    return labels_of(pod).get(WORKER_INDEX_LABEL) == "0"


def _gang_size(lws: KubeObject, pod: KubeObject) -> int:
    size = int_field(lws, *TEMPLATE, "size")
    if size is None or size <= 0:
        raise InvalidWorkload(
            describe(lws), f"a positive size is required, got {size}", "spec.leaderWorkerTemplate.size"
        )
    policy = str_field(lws, "spec", "startupPolicy") or "LeaderCreated"
    if policy == "LeaderCreated":
        return size
    if policy != "LeaderReady":
        raise InvalidWorkload(describe(lws), f"unknown startup policy {policy!r}", "spec.startupPolicy")
    if _is_leader(pod) and not field(pod, "spec", "nodeName"):
        return 1  # the workers are created once the leader is ready
    override = parse_int(annotations_of(pod).get(SIZE_ANNOTATION, ""))
    return size if override is None or override <= 0 else override


def _segment_size(lws: KubeObject, members: int) -> int | None:
    """S from the subGroupPolicy, else the LWS's annotation, else the worker template's; None: no segments."""
    size = int_field(lws, *TEMPLATE, "subGroupPolicy", "subGroupSize")
    if size is None:
        template_annotations = ("spec", "leaderWorkerTemplate", "workerTemplate", "metadata", "annotations")
        for path in (("metadata", "annotations"), template_annotations):
            text = str_field(lws, *path, SEGMENT_SIZE_ANNOTATION)
            if text is None:
                continue
            size = parse_int(text)
            if size is None:
                raise InvalidWorkload(
                    describe(lws),
                    f"invalid segment size {text!r}",
                    f"{'.'.join(path)}[{SEGMENT_SIZE_ANNOTATION}]",
                )
            break
    if size is None:
        return None
    if not 1 < size <= members:
        raise InvalidWorkload(
            describe(lws), f"segment size {size} must be greater than 1 and at most the group size {members}"
        )
    return size


def _segment_of(worker: int, members: int, size: int) -> int:
    if worker == 0:
        return 0
    return (worker - 1) // size if (members - 1) % size == 0 else worker // size


def _plain_subgroups(pod: KubeObject, members: int) -> list[SubGroupMetadata]:
    leader = _is_leader(pod)
    groups = [SubGroupMetadata("leader", min_available=1, pods=(name(pod),) if leader else ())]
    if members > 1:
        groups.append(
            SubGroupMetadata("workers", min_available=members - 1, pods=() if leader else (name(pod),))
        )
    return groups


def _segmented_subgroups(
    lws: KubeObject, pod: KubeObject, members: int, size: int, topology: TopologyConstraint | None
) -> list[SubGroupMetadata]:
    count = _segment_of(members - 1, members, size) + 1
    check_segment_count(count, lws)
    worker = pod_index(pod, WORKER_INDEX_LABEL, "leader")
    pod_segment = _segment_of(worker, members, size)
    last = sum(1 for index in range(members) if _segment_of(index, members, size) == count - 1)
    segments = [
        SubGroupMetadata(
            f"segment-{index}",
            min_available=last if index == count - 1 else size,
            pods=(name(pod),) if index == pod_segment else (),
            topology=topology,
        )
        for index in range(count)
    ]
    policy = str_field(lws, *TEMPLATE, "subGroupPolicy", "subGroupPolicyType") or LEADER_WORKER
    divisible = (members - 1) % size == 0
    if policy == LEADER_EXCLUDED:
        if not divisible:
            raise InvalidWorkload(
                describe(lws),
                f"LeaderExcluded needs size - 1 ({members - 1}) to divide by the segment size {size}",
            )
        leader = SubGroupMetadata("leader", min_available=1)
        if _is_leader(pod):
            leader = dataclasses.replace(leader, pods=(name(pod),))
            segments[0] = dataclasses.replace(segments[0], pods=())
        return [leader, *segments]
    first = segments[0]
    first_members = first.min_available + (1 if divisible else 0)
    children = [
        SubGroupMetadata(
            "leader", min_available=1, parent=first.name, pods=first.pods if _is_leader(pod) else ()
        ),
        SubGroupMetadata(
            "workers",
            min_available=first_members - 1,
            parent=first.name,
            pods=() if _is_leader(pod) else first.pods,
        ),
    ]
    segments[0] = dataclasses.replace(first, min_available=0, min_subgroup=len(children), pods=())
    return [*segments, *children]


def group_lws(
    context: GroupingContext, top_owner: KubeObject, pod: KubeObject, all_owners: Sequence[KubeObject]
) -> PodGroupMetadata:
    """Plugin `lws`."""
    metadata = default_metadata(context, top_owner, pod)
    members = _gang_size(top_owner, pod)
    worker_index = labels_of(pod).get(WORKER_INDEX_LABEL)
    if worker_index is not None:
        pod_index(pod, WORKER_INDEX_LABEL, "leader")
    size = _segment_size(top_owner, members)
    if size is None:
        subgroups = _plain_subgroups(pod, members)
    else:
        template = map_field(top_owner, *TEMPLATE, "workerTemplate")
        template_annotations: Mapping[str, str] = annotations_of(template) if template is not None else {}
        topology = segment_topology(pod, template_annotations, top_owner) if template is not None else None
        subgroups = _segmented_subgroups(top_owner, pod, members, size, topology)
    group_index = parse_int(labels_of(pod).get(GROUP_INDEX_LABEL, ""))
    pod_group = metadata.name if group_index is None else f"{metadata.name}-group-{group_index}"
    return dataclasses.replace(metadata, name=pod_group, min_available=members, subgroups=tuple(subgroups))
