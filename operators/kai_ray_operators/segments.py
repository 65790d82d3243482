"""Segments: splitting a large worker group into topology-packed SubGroups (KAI docs/topology/segments.md).

PyTorchJob and LeaderWorkerSet share the rules: a segment's constraint takes
the topology name from the pod, then the worker template, then the workload,
and its levels from `kai.scheduler/segment-topology-*-placement` on the pod,
then the template; no name or no level means no constraint. More than 10000
segments is refused: the PodGroup would be too large to store and schedule.
"""

from __future__ import annotations

from collections.abc import Mapping

from kai_ray.api.constants import (
    SEGMENT_PREFERRED_PLACEMENT_ANNOTATION,
    SEGMENT_REQUIRED_PLACEMENT_ANNOTATION,
    TOPOLOGY_ANNOTATION,
)
from kai_ray_operators.errors import InvalidWorkload
from kai_ray_operators.fields import KubeObject, annotations_of, describe, labels_of, parse_int
from kai_ray_operators.metadata import TopologyConstraint

__all__ = ["MAX_SEGMENTS", "check_segment_count", "pod_index", "segment_topology"]

MAX_SEGMENTS = 10000


def check_segment_count(count: int, workload: KubeObject) -> None:
    if count > MAX_SEGMENTS:
        raise InvalidWorkload(
            describe(workload),
            f"number of segments {count} is greater than max allowed segmentation {MAX_SEGMENTS}",
        )


def pod_index(pod: KubeObject, label: str, first: str) -> int:
    """The pod's replica or worker index; `first` names what index 0 is, for the message."""
    text = labels_of(pod).get(label)
    if text is None:
        raise InvalidWorkload(describe(pod), "label is required to place the pod in its segment", label)
    index = parse_int(text)
    if index is None:
        raise InvalidWorkload(describe(pod), f"{text!r} is not an integer", label)
    if index < 0:
        raise InvalidWorkload(
            describe(pod), f"{text} is not valid. It must be bigger than 0, or 0 for the {first}", label
        )
    return index


def segment_topology(
    pod: KubeObject, template_annotations: Mapping[str, str], workload: KubeObject
) -> TopologyConstraint | None:
    pod_annotations = annotations_of(pod)

    def value(key: str) -> str:
        return pod_annotations.get(key) or template_annotations.get(key, "")

    topology = (
        pod_annotations.get(TOPOLOGY_ANNOTATION)
        or template_annotations.get(TOPOLOGY_ANNOTATION)
        or annotations_of(workload).get(TOPOLOGY_ANNOTATION, "")
    )
    required = value(SEGMENT_REQUIRED_PLACEMENT_ANNOTATION)
    preferred = value(SEGMENT_PREFERRED_PLACEMENT_ANNOTATION)
    if not topology or not (required or preferred):
        return None
    return TopologyConstraint(topology, required, preferred)
