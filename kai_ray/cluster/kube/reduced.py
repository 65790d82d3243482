"""What the cluster cache keeps of the kinds it follows only for a few fields: the objects pods'
volumes and environment name (PersistentVolumeClaims, PersistentVolumes, StorageClasses,
ConfigMaps).

Why: a cluster holds many ConfigMaps, some of them large (dashboards, scripts, whole config
files), and a pod's conversion asks only whether one exists (`convert.volumes`).  Keeping their
data would cost the scheduler memory in proportion to what others store in the cluster.  So a
ConfigMap is kept as its name, and a claim, volume or class as the fields the conversion reads,
with only the annotations it reads.  The rest of the model layer (validation, conversion) then
sees these reduced objects exactly as a manifest carrying only those fields.

A change to a reduced object outside those fields leaves its reduced form as it was: the cache
takes the new resourceVersion without counting it as a change (`same_but_version`), so a
ConfigMap rewritten every few seconds by some controller does not wake the scheduling loop.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

from kai_ray.api.constants import (
    BETA_STORAGE_CLASS_ANNOTATION,
    DEFAULT_STORAGE_CLASS_ANNOTATIONS,
    SELECTED_NODE_ANNOTATION,
)

__all__ = ["REDUCED_KINDS", "reduce", "same_but_version"]

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


def same_but_version(left: str, right: str) -> bool:
    """Whether two reduced objects' JSON texts differ at most in their resourceVersion."""
    return _versionless(left) == _versionless(right)


def _versionless(text: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(text)
    data.get("metadata", {}).pop("resourceVersion", None)
    return data
