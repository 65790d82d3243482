"""Building what controllers create: metadata, owner references, pods from templates, replica counts.

Every expander builds its children with these, so all generated objects look
alike where Kubernetes makes them alike: the parent's namespace, one
controller owner reference (`controller` and `blockOwnerDeletion` true, as
every controller here sets it), a uid derived from the object's identity
(`identity.stable_uid`), and pods that copy their template (containers, init
containers, resources, scheduler name, placement) with the controller's labels
laid over the template's.

Reading is strict where a controller's API server or webhook would refuse the
object (a count that is not a non-negative integer, a pod template without
containers) and raises `InvalidWorkload` naming the field, like `fields`.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any, Final

from kai_ray_operators.errors import InvalidWorkload
from kai_ray_operators.fields import (
    GroupVersionKind,
    KubeObject,
    Step,
    annotations_of,
    describe,
    field_path,
    int_field,
    labels_of,
    list_field,
    map_field,
    name,
    namespace,
    str_field,
    uid,
)
from kai_ray_operators.identity import stable_uid

__all__ = [
    "MAX_OBJECTS",
    "ObjectKey",
    "bounded_int",
    "canonical_hash",
    "count",
    "fnv32a",
    "new_object",
    "new_pod",
    "object_key",
    "owner_reference",
    "pod_template",
    "required_map",
    "required_name",
    "template_with",
]

MAX_OBJECTS: Final = 100_000
"""The most objects one workload may create here: more is almost surely a typo in a count, and
building them would take the simulator minutes and gigabytes before it could say so."""

ObjectKey = tuple[str, str, str, str]
"""(API group, kind, namespace, name): an object's identity whatever version it is written in."""


def object_key(obj: KubeObject) -> ObjectKey:
    gvk = GroupVersionKind.of(obj)
    return gvk.group, gvk.kind, namespace(obj), name(obj)


def owner_reference(owner: KubeObject) -> dict[str, Any]:
    return {
        "apiVersion": str(owner.get("apiVersion") or ""),
        "kind": str(owner.get("kind") or ""),
        "name": name(owner),
        "uid": uid(owner),
        "controller": True,
        "blockOwnerDeletion": True,
    }


def new_object(
    api_version: str,
    kind: str,
    owner: KubeObject,
    object_name: str,
    *,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    spec: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """An object `owner`'s controller creates, in `owner`'s namespace."""
    metadata: dict[str, Any] = {
        "name": object_name,
        "namespace": namespace(owner),
        "uid": stable_uid(api_version, kind, namespace(owner), object_name),
        "ownerReferences": [owner_reference(owner)],
    }
    if labels:
        metadata["labels"] = dict(labels)
    if annotations:
        metadata["annotations"] = dict(annotations)
    result: dict[str, Any] = {"apiVersion": api_version, "kind": kind, "metadata": metadata}
    if spec is not None:
        result["spec"] = dict(spec)
    return result


def pod_template(obj: KubeObject, *path: Step) -> Mapping[str, Any]:
    """The pod template at `path`: required, with a `spec` that has at least one container."""
    template = required_map(obj, *path, what="a pod template")
    required_map(obj, *path, "spec", what="a pod spec")
    if not list_field(obj, *path, "spec", "containers"):
        raise InvalidWorkload(
            describe(obj), "at least one container is required", field_path((*path, "spec", "containers"))
        )
    return template


def template_with(
    template: Mapping[str, Any],
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A deep copy of a pod (or Job) template whose metadata gains `labels` and `annotations`."""
    result = copy.deepcopy(dict(template))
    metadata = dict(result["metadata"]) if isinstance(result.get("metadata"), Mapping) else {}
    for key, extra in (("labels", labels), ("annotations", annotations)):
        if extra:
            current = metadata.get(key)
            metadata[key] = {**(current if isinstance(current, Mapping) else {}), **extra}
    result["metadata"] = metadata
    return result


def new_pod(
    owner: KubeObject,
    template_path: tuple[Step, ...],
    pod_name: str,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A pod from `owner`'s template: its metadata under the controller's labels and annotations, its spec
    copied whole (the simulator reads containers, init containers, overhead and placement from it)."""
    template = pod_template(owner, *template_path)
    return new_object(
        "v1",
        "Pod",
        owner,
        pod_name,
        labels={**labels_of(template), **(labels or {})},
        annotations={**annotations_of(template), **(annotations or {})},
        spec=copy.deepcopy(dict(template["spec"])),
    )


def bounded_int(obj: KubeObject, *path: Step, minimum: int) -> int | None:
    """An integer of at least `minimum`, or None when absent."""
    value = int_field(obj, *path)
    if value is not None and value < minimum:
        raise InvalidWorkload(describe(obj), f"must be at least {minimum}, got {value}", field_path(path))
    return value


def count(obj: KubeObject, *path: Step, default: int, minimum: int = 0) -> int:
    """A replica-like count: an integer from `minimum` to `MAX_OBJECTS`, `default` when absent."""
    value = bounded_int(obj, *path, minimum=minimum)
    if value is not None and value > MAX_OBJECTS:
        raise InvalidWorkload(
            describe(obj), f"{value} is more than the {MAX_OBJECTS} objects simulated", field_path(path)
        )
    return default if value is None else value


def required_map(obj: KubeObject, *path: Step, what: str) -> Mapping[str, Any]:
    """An object-valued field the controller cannot do without (`what`: "a Job template")."""
    value = map_field(obj, *path)
    if value is None:
        raise InvalidWorkload(describe(obj), f"{what} is required", field_path(path))
    return value


def required_name(obj: KubeObject, *path: Step) -> str:
    """A non-empty string that names a child (a worker group, a replicated job)."""
    value = str_field(obj, *path)
    if not value:
        raise InvalidWorkload(describe(obj), "a non-empty name is required", field_path(path))
    return value


_FNV_OFFSET: Final = 0x811C9DC5
_FNV_PRIME: Final = 0x01000193


def fnv32a(text: str) -> int:
    """32-bit FNV-1a of the UTF-8 text: the hash Argo names pods with, and Kubernetes ReplicaSets."""
    value = _FNV_OFFSET
    for byte in text.encode():
        value = ((value ^ byte) * _FNV_PRIME) & 0xFFFFFFFF
    return value


_SAFE_ALPHABET: Final = "bcdfghjklmnpqrstvwxz2456789"
"""Kubernetes' `rand.SafeEncodeString` alphabet: no vowels, no look-alike characters."""


def _safe_encode(value: int) -> str:
    """The decimal digits of `value` mapped onto the safe alphabet, as `pod-template-hash` is written."""
    return "".join(_SAFE_ALPHABET[ord(digit) % len(_SAFE_ALPHABET)] for digit in str(value))


def canonical_hash(obj: Any) -> str:
    """A short, stable, name-safe hash of a JSON-like value (key order does not matter)."""
    return _safe_encode(fnv32a(json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)))
