"""What the cluster cache keeps of the kinds it follows only for a few fields: the objects pods'
volumes and environment name (PersistentVolumeClaims, PersistentVolumes, StorageClasses,
ConfigMaps), and the scheduler's own pods.

Why: a cluster holds many ConfigMaps, some of them large (dashboards, scripts, whole config
files), and a pod's conversion asks only whether one exists (`convert.volumes`).  Keeping their
data would cost the scheduler memory in proportion to what others store in the cluster.  So a
ConfigMap is kept as its name, and a claim, volume or class as the fields the conversion reads,
with only the annotations it reads.  The rest of the model layer (validation, conversion) then
sees these reduced objects exactly as a manifest carrying only those fields.

A change to a reduced object outside those fields leaves its reduced form as it was: the cache
takes the new resourceVersion without counting it as a change (`same_but_version`), so a
ConfigMap rewritten every few seconds by some controller does not wake the scheduling loop, and
a pod's new conditions (the pod runner's, or the `PodScheduled=False` written on every pending
pod) are read, validated and converted by no one (`VERSION_ONLY_KINDS`).

Of the scheduler's own pods (`reduce_pod`) the metadata is kept whole (the podgrouper reads any
label, annotation or owner; the binder the resourceVersion), the rest only as far as the pod
models declare fields (`kai_ray.api.core.Pod`): a container's image, command, arguments, probes
and mounts, an environment variable's value, the defaults the API server fills in, most of the
status are read by no one.  A burst of 20,000 pending pods held them three times over (the
cached text, the parsed object, the model's extras); the models read no extra, and the
podgrouper reads no more of a pod's spec than its priority class and node.
"""

from __future__ import annotations

import functools
import json
import typing
from collections.abc import Mapping
from typing import Any, Final

from pydantic import BaseModel

from kai_ray.api.constants import (
    BETA_STORAGE_CLASS_ANNOTATION,
    DEFAULT_STORAGE_CLASS_ANNOTATIONS,
    SELECTED_NODE_ANNOTATION,
)
from kai_ray.api.core import Pod

__all__ = ["REDUCED_KINDS", "VERSION_ONLY_KINDS", "reduce", "reduce_pod", "same_but_version"]

_META: Final = ("name", "namespace", "uid", "resourceVersion", "creationTimestamp", "deletionTimestamp")

_KEPT: Final[Mapping[str, Mapping[str, tuple[str, ...]]]] = {
    "ConfigMap": {},
    "PersistentVolumeClaim": {"spec": ("storageClassName", "volumeName"), "status": ("phase",)},
    "PersistentVolume": {"spec": ("storageClassName", "nodeAffinity", "claimRef"), "status": ("phase",)},
    "StorageClass": {"": ("provisioner", "volumeBindingMode", "allowedTopologies")},
}
"""Per kind, per section ("" for top-level fields, as a StorageClass has them), what is kept."""

_ANNOTATIONS: Final[Mapping[str, tuple[str, ...]]] = {
    "PersistentVolumeClaim": (SELECTED_NODE_ANNOTATION, BETA_STORAGE_CLASS_ANNOTATION),
    "StorageClass": DEFAULT_STORAGE_CLASS_ANNOTATIONS,
}

REDUCED_KINDS: Final = frozenset(_KEPT)
VERSION_ONLY_KINDS: Final = REDUCED_KINDS | {"Pod"}
"""Kinds whose update that changes nothing kept but the resourceVersion is no change."""


def reduce(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The object cut to what the conversion reads; `obj` must be of a `REDUCED_KINDS` kind."""
    kind = str(obj.get("kind"))
    reduced: dict[str, Any] = {"apiVersion": obj.get("apiVersion"), "kind": kind}
    meta = obj.get("metadata") or {}
    kept_meta = {key: meta[key] for key in _META if key in meta}
    annotations = meta.get("annotations") or {}
    read = {key: annotations[key] for key in _ANNOTATIONS.get(kind, ()) if key in annotations}
    if read:
        kept_meta["annotations"] = read
    reduced["metadata"] = kept_meta
    for section, keys in _KEPT[kind].items():
        source = obj if not section else obj.get(section) or {}
        kept = {key: source[key] for key in keys if key in source}
        if section:
            reduced[section] = kept
        else:
            reduced.update(kept)
    return reduced


def reduce_pod(pod: Mapping[str, Any]) -> dict[str, Any]:
    """The pod without what nobody reads: its metadata whole but `managedFields`, the rest cut to
    the fields the pod models declare."""
    reduced: dict[str, Any] = _declared(pod, Pod)
    meta = pod.get("metadata")
    if isinstance(meta, Mapping):
        reduced["metadata"] = {key: value for key, value in meta.items() if key != "managedFields"}
    return reduced


def _declared(value: Any, model: type[BaseModel]) -> Any:
    """`value` (an object or a list of them, wire form) cut to what `model` declares, recursively;
    anything else is kept as is, for the models to judge."""
    if isinstance(value, list):
        return [_declared(item, model) for item in value]
    if not isinstance(value, Mapping):
        return value
    return {
        key: value[key] if nested is None else _declared(value[key], nested)
        for key, nested in _fields(model).items()
        if key in value
    }


@functools.cache
def _fields(model: type[BaseModel]) -> dict[str, type[BaseModel] | None]:
    """`model`'s wire names, each with the model its values are (None: kept whole)."""
    return {field.alias or name: _model_in(field.annotation) for name, field in model.model_fields.items()}


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The model a field holds, alone, optional or in a list; None for anything else (maps are
    kept whole)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if typing.get_origin(annotation) in (dict, Mapping):
        return None
    return next((found for arg in typing.get_args(annotation) if (found := _model_in(arg))), None)


def same_but_version(left: str, right: str) -> bool:
    """Whether two reduced objects' JSON texts differ at most in their resourceVersion."""
    return _versionless(left) == _versionless(right)


def _versionless(text: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(text)
    data.get("metadata", {}).pop("resourceVersion", None)
    return data
