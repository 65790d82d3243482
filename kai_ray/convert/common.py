"""Pieces every manifest converter shares: the skip-with-a-reason exception and time handling.

Converters raise `Invalid` from wherever they notice a problem; the loop over
objects catches it, records a `ManifestProblem` and skips just that object.
That keeps each converter a straight line instead of threading a problem list
through every helper.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import TypeVar

from kai_ray.api import ApiObject, Manifest, ManifestProblem, ManifestSet, format_path, parse_duration
from kai_ray.api.constants import RESOURCE_CPU, RESOURCE_GPU, RESOURCE_MEMORY, RESOURCE_PODS

ObjectT = TypeVar("ObjectT", bound=ApiObject)
ResultT = TypeVar("ResultT")

VECTOR_RESOURCES = frozenset({RESOURCE_CPU, RESOURCE_MEMORY, RESOURCE_GPU, RESOURCE_PODS})
"""The resources the node vector and the queues account; every other one is "extended" (RDMA,
hugepages, ephemeral storage, MIG profiles): it must fit a node, and no queue is charged for it."""


class Invalid(Exception):
    """The object being converted cannot be used; `field` names the culprit."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def convert_each(
    manifests: list[Manifest[ObjectT]],
    convert: Callable[[Manifest[ObjectT]], ResultT],
    problems: list[ManifestProblem],
) -> list[ResultT]:
    """Convert every object, turning each `Invalid` into a problem and skipping that object."""
    results: list[ResultT] = []
    for manifest in manifests:
        try:
            results.append(convert(manifest))
        except Invalid as error:
            problems.append(manifest.problem(error.field, error.message))
    return results


def label_field(key: str) -> str:
    return format_path(("metadata", "labels", key))


def annotation_field(key: str) -> str:
    return format_path(("metadata", "annotations", key))


def epoch(moment: datetime | None) -> float | None:
    """Seconds since the Unix epoch; a timestamp without a zone is taken as UTC."""
    if moment is None:
        return None
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


def created(manifest: Manifest[ObjectT]) -> float:
    """Creation time, or the order of appearance for objects written without one."""
    stamp = epoch(manifest.obj.metadata.creation_timestamp)
    return float(manifest.position) if stamp is None else stamp


def latest_time(loaded: ManifestSet) -> float:
    """The cluster's "now": the latest moment any object mentions, so nothing lies in the future."""
    moments = [0.0]
    for manifest in loaded.manifests:
        meta = manifest.obj.metadata
        stamps = (epoch(meta.creation_timestamp), epoch(meta.deletion_timestamp))
        moments.extend(stamp for stamp in stamps if stamp is not None)
        moments.append(float(manifest.position))
    return max(moments)


def seconds(duration: str | None) -> float | None:
    """A CRD duration field (already validated by the model) in seconds."""
    return None if duration is None else parse_duration(duration)


def annotation_time(annotations: dict[str, str], key: str) -> float | None:
    """An RFC3339 timestamp annotation (as KAI writes them on PodGroups) in epoch seconds."""
    value = annotations.get(key)
    if value is None:
        return None
    try:
        return epoch(datetime.fromisoformat(value))
    except ValueError:
        raise Invalid(annotation_field(key), f"expected an RFC3339 timestamp, got {value!r}") from None
