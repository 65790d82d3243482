"""The cluster cache's objects as validated models, each parsed and validated once per version.

Why: every cycle converted the whole cache again, a `json.loads` and a pydantic validation per
object, most of an idle cycle at a few thousand pods (issue 12).  A model is never mutated once
built, so the one built for an object's resourceVersion serves every cycle until the object
changes, and the conversion's per-object memos (`kai_ray.identity_cache`) hit as well, since the
very same models come back.  An object without a resourceVersion is parsed every time: nothing
says it is unchanged.

What comes out, for `convert.cluster_from_manifest_set`: the objects the models accept in the
cache's order, every problem, and for a pod they reject an occupancy-only model (what it holds
on its node still counts: a pod we cannot interpret is reported, never forgotten).  Entries of
objects that are no longer in the cache are dropped at each read, so memory follows the cluster.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from dataclasses import dataclass

from kai_ray.api import ApiObject, Manifest, ManifestProblem, ManifestSet, Pod
from kai_ray.api.manifests import ManifestCollector, validate_object
from kai_ray.cluster.kube.cache import CachedObject, CacheEntries
from kai_ray.convert import occupancy_only

__all__ = ["LoadedObjects", "ModelCache"]


@dataclass(frozen=True)
class LoadedObjects:
    """The objects for `convert.cluster_from_manifest_set`, and the pods only counted on nodes."""

    loaded: ManifestSet
    occupants: list[Manifest[Pod]]


@dataclass(frozen=True)
class _Version:
    resource_version: str
    obj: ApiObject | None
    problems: tuple[ManifestProblem, ...]
    occupant: Pod | None
    """A rejected pod reduced to what it occupies (`convert.occupancy_only`), if even that loads."""


class ModelCache:
    """Models of one reader's objects, by kind and key, each for the version it was built from.

    Thread-safe: a read builds the new table and swaps it in whole, and concurrent readers at
    worst validate an object twice.
    """

    def __init__(self, source: str) -> None:
        self._source = source
        self._lock = threading.Lock()
        self._versions: dict[tuple[str, str, str], _Version] = {}

    def load(self, entries: CacheEntries, kinds: Sequence[str]) -> LoadedObjects:
        """``kinds`` in this order (the order problems are reported in), each ordered by key."""
        collector = ManifestCollector()
        occupants: list[Manifest[Pod]] = []
        for (_kind, _namespace, _name), version in self._refresh(entries, kinds).items():
            collector.result.problems.extend(version.problems)
            if version.obj is not None:
                collector.add(version.obj, self._source)
            elif version.occupant is not None:
                occupants.append(Manifest(self._source, 0, len(occupants), version.occupant))
        return LoadedObjects(collector.result, occupants)

    def by_kind(self, entries: CacheEntries) -> dict[str, dict[tuple[str, str], ApiObject]]:
        """Every kind read, as the cache names it (other schedulers' pods apart), (namespace,
        name) → model; objects the models reject are left out (a cycle reports them)."""
        tables: dict[str, dict[tuple[str, str], ApiObject]] = {kind: {} for kind in entries.objects}
        for (kind, namespace, name), version in self._refresh(entries, list(entries.objects)).items():
            if version.obj is not None:
                tables[kind][(namespace, name)] = version.obj
        return tables

    def _refresh(self, entries: CacheEntries, kinds: Sequence[str]) -> dict[tuple[str, str, str], _Version]:
        """The models of ``kinds``' objects, in order, built anew where the version moved; they
        become what the next read compares with (objects gone are forgotten)."""
        with self._lock:
            known = self._versions
        current: dict[tuple[str, str, str], _Version] = {}
        for kind in kinds:
            for item in entries.objects.get(kind, []):
                key = (kind, item.namespace, item.name)
                version = known.get(key)
                current[key] = (
                    version if version is not None and _same_version(version, item) else self._build(item)
                )
        with self._lock:
            self._versions = current
        return current

    def __len__(self) -> int:
        with self._lock:
            return len(self._versions)

    def _build(self, item: CachedObject) -> _Version:
        data = json.loads(item.text)
        obj, problems = validate_object(data, self._source)
        occupant: Pod | None = None
        if obj is None and isinstance(data, dict) and data.get("kind") == "Pod":
            reduced, _ = validate_object(occupancy_only(data), self._source)
            occupant = reduced if isinstance(reduced, Pod) else None
        return _Version(item.resource_version, obj, tuple(problems), occupant)


def _same_version(version: _Version, item: CachedObject) -> bool:
    return bool(item.resource_version) and version.resource_version == item.resource_version
