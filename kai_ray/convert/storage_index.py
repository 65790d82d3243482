"""The storage objects and ConfigMaps of a changing cluster, and which pods name each of them.

`LiveCluster` converts a pod again only when something it reads changed; a pod's volumes read
claims, volumes, classes and ConfigMaps (`convert.volumes`).  This index keeps those objects as
the conversion reads them (`objects`) and answers, for each change, which of our pods must be
converted again:

- a PersistentVolumeClaim or a ConfigMap: the pods naming it (in its namespace);
- a PersistentVolume: the pods naming a claim bound to it (`spec.volumeName`);
- a StorageClass: every pod naming a claim (the default class, a class's existence and binding
  mode decide how each unbound claim is read; classes are few and seldom change).

Of a ConfigMap only its key is kept: a cluster can hold many large ones, and whether one exists is
all a pod's conversion asks.
"""

from __future__ import annotations

from typing import TypeVar

from kai_ray.api import ApiObject, ConfigMap, PersistentVolume, PersistentVolumeClaim, Pod, StorageClass
from kai_ray.convert.volumes import StorageObjects, default_class, pod_references

__all__ = ["STORAGE_KINDS", "StorageIndex"]

STORAGE_KINDS = ("StorageClass", "PersistentVolume", "PersistentVolumeClaim", "ConfigMap")

Key = tuple[str, str]
"""(namespace, name); the namespace is "" for cluster-scoped kinds."""
Named = tuple[str, str, str]
"""(kind, namespace, name) of an object a pod names."""
_K = TypeVar("_K")
_V = TypeVar("_V")


class StorageIndex:
    """See the module docstring.  Not thread-safe: one reader (the `LiveCluster`)."""

    def __init__(self) -> None:
        self._claims: dict[Key, PersistentVolumeClaim] = {}
        self._volumes: dict[str, PersistentVolume] = {}
        self._classes: dict[str, StorageClass] = {}
        self._config_maps: set[Key] = set()
        self.objects = StorageObjects(self._claims, self._volumes, self._classes, self._config_maps)
        """What conversions read: this index's own tables, current after every change."""
        self._named: dict[Key, tuple[Named, ...]] = {}
        """Pod → what it names, for the pods that name anything."""
        self._naming: dict[Named, set[Key]] = {}
        """What pods name → those pods."""
        self._claimants: set[Key] = set()
        """Pods naming at least one claim."""
        self._bound_to: dict[str, set[Key]] = {}
        """PersistentVolume name → the claims bound to it."""

    def __len__(self) -> int:
        """Entries kept besides the objects: they follow the pods and claims that exist."""
        return len(self._named) + len(self._naming) + len(self._bound_to)

    def pod_changed(self, key: Key, pod: Pod | None) -> None:
        """Our pod `key` is now `pod` (None: gone, or not one the models accept)."""
        for item in self._named.pop(key, ()):
            _unlink(self._naming, item, key)
        self._claimants.discard(key)
        references = pod_references(pod) if pod is not None else None
        if not references:
            return
        namespace = key[0]
        named = (
            *(("PersistentVolumeClaim", namespace, use.name) for use in references.claims),
            *(("ConfigMap", namespace, name) for name in references.config_maps),
        )
        self._named[key] = named
        for item in named:
            self._naming.setdefault(item, set()).add(key)
        if references.claims:
            self._claimants.add(key)

    def object_changed(self, kind: str, key: Key, obj: ApiObject | None) -> set[Key]:
        """Record that object `key` of a `STORAGE_KINDS` kind is now `obj` (None: gone or
        rejected by the models); returns the pods to convert again."""
        if kind == "PersistentVolumeClaim":
            self._claim_changed(key, obj if isinstance(obj, PersistentVolumeClaim) else None)
        elif kind == "PersistentVolume":
            _put(self._volumes, key[1], obj if isinstance(obj, PersistentVolume) else None)
            claims = self._bound_to.get(key[1], set())
            return {
                pod for claim in claims for pod in self._naming.get(("PersistentVolumeClaim", *claim), ())
            }
        elif kind == "StorageClass":
            _put(self._classes, key[1], obj if isinstance(obj, StorageClass) else None)
            default = default_class(self._classes.values())
            if default is not self.objects.default:
                self.objects = StorageObjects(
                    self._claims, self._volumes, self._classes, self._config_maps, default
                )
            return set(self._claimants)
        elif isinstance(obj, ConfigMap):
            self._config_maps.add(key)
        else:
            self._config_maps.discard(key)
        return set(self._naming.get((kind, *key), ()))

    def _claim_changed(self, key: Key, claim: PersistentVolumeClaim | None) -> None:
        before = self._claims.get(key)
        if before is not None and before.spec.volume_name:
            _unlink(self._bound_to, before.spec.volume_name, key)
        _put(self._claims, key, claim)
        if claim is not None and claim.spec.volume_name:
            self._bound_to.setdefault(claim.spec.volume_name, set()).add(key)


def _put(table: dict[_K, _V], key: _K, value: _V | None) -> None:
    if value is None:
        table.pop(key, None)
    else:
        table[key] = value


def _unlink(table: dict[_K, set[Key]], item: _K, key: Key) -> None:
    """Drop `key` from `table[item]`, and the entry once empty (memory follows what exists)."""
    members = table.get(item)
    if members is None:
        return
    members.discard(key)
    if not members:
        del table[item]
