"""Kubeflow PyTorchJob: one gang with `master` and `worker` SubGroups (spec/integrations.md §3.2).

The gang size M is the distributed rule's, overridden by
`elasticPolicy.minReplicas`, overridden again by
`runPolicy.schedulingPolicy.minAvailable` (KAI reads the elastic minimum as
the whole gang, master included). `master` needs all its replicas; `worker`
needs the rest of M. With `kai.scheduler/segment-size` S on the pod or the
Worker template, `worker` becomes a parent of `worker-0..n-1` segments of S
pods each (the last one takes the remainder), each packed by its own topology
constraint; segments beyond what M needs are elastic (`minMember 0`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

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
)
from kai_ray_operators.metadata import PodGroupMetadata, SubGroupMetadata
from kai_ray_operators.plugins.kubeflow import MIN_AVAILABLE_PATH, distributed_metadata
from kai_ray_operators.segments import check_segment_count, pod_index, segment_topology

__all__ = ["group_pytorch"]

REPLICA_SPECS = "pytorchReplicaSpecs"
REPLICA_TYPE_LABEL = "training.kubeflow.org/replica-type"
REPLICA_INDEX_LABEL = "training.kubeflow.org/replica-index"
MASTER, WORKER = "Master", "Worker"


def _gang_size(job: KubeObject, replica_total: int) -> int:
    size = replica_total
    for path in (("spec", "elasticPolicy", "minReplicas"), MIN_AVAILABLE_PATH):
        value = int_field(job, *path)
        if value is not None and value < 0:
            raise InvalidWorkload(describe(job), "must not be negative", ".".join(path))
        size = size if value is None else value
    return size


def _segment_size(job: KubeObject, pod: KubeObject, template_annotations: Mapping[str, str]) -> int | None:
    """S from the pod's annotation, else the Worker template's; None when neither asks for segments."""
    sources = (
        (
            pod,
            annotations_of(pod).get(SEGMENT_SIZE_ANNOTATION),
            f"metadata.annotations[{SEGMENT_SIZE_ANNOTATION}]",
        ),
        (
            job,
            template_annotations.get(SEGMENT_SIZE_ANNOTATION),
            f"spec.{REPLICA_SPECS}.{WORKER}.template.metadata.annotations[{SEGMENT_SIZE_ANNOTATION}]",
        ),
    )
    for obj, text, path in sources:
        if not text:
            continue
        size = parse_int(text)
        if size is None or size <= 0:
            raise InvalidWorkload(
                describe(obj), f"invalid segment size {text!r}: a positive integer is needed", path
            )
        return size
    return None


def _pods_if(pod: KubeObject, replica_type: str) -> tuple[str, ...]:
    return (name(pod),) if labels_of(pod).get(REPLICA_TYPE_LABEL) == replica_type.lower() else ()


def _worker_subgroups(
    job: KubeObject, pod: KubeObject, worker_spec: Mapping[str, Any], worker_min: int
) -> list[SubGroupMetadata]:
    workers = int_field(job, "spec", REPLICA_SPECS, WORKER, "replicas")
    workers = 1 if workers is None else workers
    template_annotations = field(worker_spec, "template", "metadata", "annotations")
    template_annotations = template_annotations if isinstance(template_annotations, Mapping) else {}
    pods = _pods_if(pod, WORKER)
    size = _segment_size(job, pod, template_annotations)
    if size is None:
        return [SubGroupMetadata("worker", min_available=worker_min, pods=pods)]
    count = math.ceil(workers / size)
    check_segment_count(count, job)
    pod_segment = pod_index(pod, REPLICA_INDEX_LABEL, "first worker") // size if pods else None
    required = math.ceil(worker_min / size)
    topology = segment_topology(pod, template_annotations, job)
    segments = [SubGroupMetadata("worker", min_available=0, min_subgroup=count)]
    for index in range(count):
        members = min(size, workers - index * size)
        segments.append(
            SubGroupMetadata(
                f"worker-{index}",
                min_available=members if index < required else 0,
                parent="worker",
                pods=pods if index == pod_segment else (),
                topology=topology,
            )
        )
    return segments


def group_pytorch(
    context: GroupingContext, top_owner: KubeObject, pod: KubeObject, all_owners: Sequence[KubeObject]
) -> PodGroupMetadata:
    """Plugin `pytorch`."""
    metadata = distributed_metadata(context, top_owner, pod, REPLICA_SPECS)
    gang = _gang_size(top_owner, metadata.min_available)
    specs = map_field(top_owner, "spec", REPLICA_SPECS)
    if specs is None:
        raise InvalidWorkload(describe(top_owner), "the replica specs are required", f"spec.{REPLICA_SPECS}")
    masters = int_field(top_owner, "spec", REPLICA_SPECS, MASTER, "replicas") or 0
    subgroups: list[SubGroupMetadata] = []
    if MASTER in specs and masters > 0:
        subgroups.append(SubGroupMetadata("master", min_available=masters, pods=_pods_if(pod, MASTER)))
    worker_spec = map_field(top_owner, "spec", REPLICA_SPECS, WORKER)
    if WORKER in specs:
        subgroups += _worker_subgroups(top_owner, pod, worker_spec or {}, max(0, gang - masters))
    return dataclasses.replace(metadata, min_available=gang, subgroups=tuple(subgroups))
