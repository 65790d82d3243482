"""The cluster cache's objects as validated models, each parsed and validated once per version.

Why: every cycle converted the whole cache again, a `json.loads` and a pydantic validation per
object, most of an idle cycle at a few thousand pods (issue 12).  A model is never mutated once
built, so the one built for an object's resourceVersion serves every cycle until the object
changes, and the conversion's per-object memos (`kai_ray.identity_cache`) hit as well, since the
very same models come back.  An object without a resourceVersion is parsed every time: nothing
says it is unchanged.

A reader that follows the cache's change log (`update`) gets models only for what changed, for
`kai_ray.convert.live.LiveCluster`; one that reads whole tables (`by_kind`) gets them all.  A pod
the models reject comes with an occupancy-only model (what it holds on its node still counts: a
pod we cannot interpret is reported, never forgotten), without its constraints when even those
are rejected.  Objects no longer in the cache are forgotten, so memory follows the cluster.

A PodGroup's status is no part of its model: its writers read it from the cache's JSON
(`kai_ray.cluster.kube.known`), the conversion never does.  A new version that changed nothing
else (the condition the status writer puts on every pending PodGroup) keeps the model it had and
is not reported as changed, so it is neither validated nor converted again (issue 35: a burst of
20,000 pending PodGroups was validated and converted twice each, once for its condition).  A
Queue's status is the same: the status writer puts its allocation there after any cycle that
moved it, and a Queue reported as changed converts every PodGroup again (their queue tree).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from kai_ray.api import ApiObject, Pod
from kai_ray.api.manifests import validate_object
from kai_ray.cluster.kube.cache import CacheChanges, CachedObject, CacheEntries
from kai_ray.convert import occupancy_only
from kai_ray.convert.live import Key, ObjectModel

__all__ = ["ModelCache"]


_UNREAD: Final[Mapping[str, str]] = {"PodGroup": "status", "Queue": "status"}
"""Per kind, the part of an object no model reader reads."""


@dataclass(frozen=True)
class _Version:
    resource_version: str
    model: ObjectModel
    read: int | None = None
    """For a kind with an unread part: a digest of what the model was built from (its
    resourceVersion aside), as `_plan_inputs` digests a pod for the podgrouper."""


class ModelCache:
    """Models of one reader's objects, by kind and key, each for the version it was built from.

    Thread-safe: a read builds the new table and swaps it in whole, and concurrent readers at
    worst validate an object twice.
    """

    def __init__(self, source: str) -> None:
        self._source = source
        self._lock = threading.Lock()
        self._versions: dict[tuple[str, str, str], _Version] = {}

    def update(self, changes: CacheChanges) -> dict[str, dict[Key, ObjectModel | None]]:
        """The models of what changed, by kind and key (None: deleted), built anew where the
        version moved.  For a complete read: every object of each kind read, and the models of
        that kind's objects not among them are forgotten."""
        updated: dict[str, dict[Key, ObjectModel | None]] = {}
        with self._lock:
            versions = self._versions
            if changes.complete:
                read = set(changes.changed)
                self._versions = versions = {key: v for key, v in versions.items() if key[0] not in read}
            for kind, items in changes.changed.items():
                models: dict[Key, ObjectModel | None] = {}
                for key, item in items.items():
                    full_key = (kind, *key)
                    if item is None:
                        versions.pop(full_key, None)
                        models[key] = None
                        continue
                    version = versions.get(full_key)
                    if version is None or not _same_version(version, item):
                        built = versions[full_key] = self._build(kind, item, version)
                        if version is not None and built.model is version.model:
                            continue  # only what no model reads changed
                        version = built
                    models[key] = version.model
                updated[kind] = models
        return updated

    def by_kind(self, entries: CacheEntries) -> dict[str, dict[tuple[str, str], ApiObject]]:
        """Every kind read, as the cache names it (other schedulers' pods apart), (namespace,
        name) → model; objects the models reject are left out (a cycle reports them)."""
        tables: dict[str, dict[tuple[str, str], ApiObject]] = {kind: {} for kind in entries.objects}
        for (kind, namespace, name), version in self._refresh(entries, list(entries.objects)).items():
            if version.model.obj is not None:
                tables[kind][(namespace, name)] = version.model.obj
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
                    version
                    if version is not None and _same_version(version, item)
                    else self._build(kind, item, version)
                )
        with self._lock:
            self._versions = current
        return current

    def __len__(self) -> int:
        with self._lock:
            return len(self._versions)

    def _build(self, kind: str, item: CachedObject, previous: _Version | None) -> _Version:
        """The model of `item`; `previous`'s own when only what no model reads changed."""
        data = json.loads(item.text)
        unread = _UNREAD.get(kind)
        read = None
        if unread is not None and isinstance(data, dict):
            data.pop(unread, None)
            read = _versionless(data)
            if previous is not None and previous.read == read:
                return _Version(item.resource_version, previous.model, read)
        obj, problems = validate_object(data, self._source)
        occupant: Pod | None = None
        if obj is None and isinstance(data, dict) and data.get("kind") == "Pod":
            reduced, _ = validate_object(occupancy_only(data), self._source)
            if reduced is None:
                reduced, _ = validate_object(occupancy_only(data, constraints=False), self._source)
            occupant = reduced if isinstance(reduced, Pod) else None
        return _Version(item.resource_version, ObjectModel(obj, tuple(problems), occupant), read)


def _versionless(data: dict[str, Any]) -> int:
    """A digest of `data` without its resourceVersion: two versions alike but for it digest alike."""
    meta = data.get("metadata")
    if isinstance(meta, dict):
        meta = {key: value for key, value in meta.items() if key != "resourceVersion"}
    return hash(json.dumps({**data, "metadata": meta}, sort_keys=True, separators=(",", ":")))


def _same_version(version: _Version, item: CachedObject) -> bool:
    return bool(item.resource_version) and version.resource_version == item.resource_version
