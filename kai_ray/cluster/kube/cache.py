"""An informer-style cache of the objects the scheduler reads, kept current by list+watch.

Why a cache: a scheduling cycle runs every second, and listing every Pod,
Node, Queue and PodGroup each time would load the API server with work
proportional to the cluster, not to what changed. Instead each kind is
listed once and then followed with a watch from the list's resourceVersion,
as client-go's reflectors do; the snapshot reads the cache.

Faults are part of the contract (issue 5, "Bad input and faults"):
- a watch that ends (server timeout) resumes from the last resourceVersion;
- a lost connection backs off (capped exponential) and resumes from the last
  resourceVersion, so nothing is re-listed unless the server says it must;
- `410 Gone` ("too old resource version", during a watch or as its answer)
  re-lists that kind and replaces its store, dropping objects deleted meanwhile;
- a kind whose CRD is not installed (404 on list) counts as synced and empty,
  and is retried slowly, so a cluster without e.g. Topologies still schedules.
No error ends a watcher thread; only `stop()` does.

Objects are kept as the API server's JSON (with `apiVersion`/`kind` filled
in, since list items omit them, and without `managedFields`, which nothing
here reads and which dominates an object's size). Storing the JSON text makes
every read an independent deep copy for the price of one `json.loads`.

Pods are followed twice: every pod of this scheduler, and, as `ForeignPod`,
the pods of other schedulers that sit on a node and have not finished.  Those
hold node resources like ours do (a node must never be offered twice), but
only what they occupy is kept (`convert.occupancy_only`), so a cluster full
of other workloads costs the cache little memory.  Of the objects pods' volumes
and environment name (claims, volumes, StorageClasses, ConfigMaps) only the
fields the conversion reads are kept (`reduced`): a ConfigMap's data never is.
"""

from __future__ import annotations

import copy
import functools
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, cast

from kubernetes import client

from kai_ray.api.constants import (
    CORE_API_VERSION,
    SCHEDULER_NAME,
)
from kai_ray.cluster.kube.reduced import (
    VERSION_ONLY_KINDS,
    same_but_version,
)
from kai_ray.cluster.kube.resources import FOREIGN_POD, KINDS, RESOURCES, Resource, normalise, snake
from kai_ray.cluster.kube.watcher import WATCH_EVENT_TYPES, Watcher

__all__ = [
    "CacheChanges",
    "CacheContents",
    "CacheEntries",
    "CachedObject",
    "ClusterCache",
]

log = logging.getLogger(__name__)

ObjectKey = tuple[str, str]
"""(namespace, name); the namespace is "" for cluster-scoped kinds."""


_TOMBSTONES = 10_000
_LOG_SLACK = 1_000


@dataclass(frozen=True)
class CacheContents:
    """A consistent read of several kinds: all taken at one `generation`."""

    generation: int
    objects: Mapping[str, list[dict[str, Any]]]


@dataclass(frozen=True)
class _Entry:
    resource_version: str
    text: str


@dataclass(frozen=True)
class CachedObject:
    """One cached object unparsed: its namespace ("" when cluster-scoped), name,
    resourceVersion and JSON text."""

    namespace: str
    name: str
    resource_version: str
    text: str


@dataclass(frozen=True)
class CacheEntries:
    """`CacheContents` unparsed: several kinds read at one `generation`."""

    generation: int
    objects: Mapping[str, list[CachedObject]]


@dataclass(frozen=True)
class CacheChanges:
    """What changed in several kinds after a reader's last read, at one `generation`.

    `changed[kind][key]` is the object's entry now, or None when it was deleted.  When
    `complete` is true the reader is too far behind for the change log (or reads for the first
    time): `changed` then holds every current object of each kind, and any key the reader knows
    that is not there is gone.
    """

    generation: int
    complete: bool
    changed: Mapping[str, Mapping[ObjectKey, CachedObject | None]]


class ClusterCache:
    """List+watch of Pods (of one scheduler), Nodes, Namespaces, Queues, PodGroups, BindRequests,
    PriorityClasses, Topologies and the storage objects and ConfigMaps pods name, one
    background thread per kind. Thread-safe.

    `namespace` restricts the namespaced kinds to one namespace (cluster-scoped
    kinds are always read cluster-wide); None watches all namespaces. The watches
    run on their own connection pool (built from `api`'s configuration), so
    their long-lived connections never crowd out the writers sharing `api`.
    """

    def __init__(
        self,
        api: Any,
        *,
        scheduler_name: str = SCHEDULER_NAME,
        namespace: str | None = None,
        kinds: Iterable[str] = KINDS,
        watch_timeout: float = 60.0,
    ) -> None:
        self.scheduler_name = scheduler_name
        self.namespace = namespace
        self._api = api
        self._kinds = tuple(kinds)
        unknown = set(self._kinds) - set(RESOURCES)
        if unknown:
            raise ValueError(f"unknown kinds {sorted(unknown)}; known: {', '.join(KINDS)}")
        self._watch_timeout = watch_timeout
        self._cond = threading.Condition()
        self._stores: dict[str, dict[ObjectKey, _Entry]] = {kind: {} for kind in self._kinds}
        self._synced: set[str] = set()
        self._generation = 0
        self._ticks = 0
        self._relists: dict[str, int] = dict.fromkeys(self._kinds, 0)
        # Deleted keys and their last resourceVersion (oldest first, bounded), so that a writer's
        # late `observe` of an object the watch has meanwhile seen deleted cannot resurrect it.
        self._tombstones: dict[str, dict[ObjectKey, str]] = {kind: {} for kind in self._kinds}
        # Per kind, every key changed since `_log_floor`, with the generation of its last change,
        # oldest first: `changes` walks it from the newest end, so a reader pays for what changed.
        self._log: dict[str, dict[ObjectKey, int]] = {kind: {} for kind in self._kinds}
        self._log_floor = 0
        self._stop = threading.Event()
        self._watchers: dict[str, Watcher] = {}
        self._threads: list[threading.Thread] = []
        self._watch_api: Any = None

    # ---------------------------------------------------------------- lifecycle
    def start(self) -> None:
        """Start one watcher thread per kind; returns at once (see `wait_synced`)."""
        if self._threads:
            raise RuntimeError("ClusterCache already started")
        self._stop.clear()
        config = copy.copy(self._api.configuration)
        config.connection_pool_maxsize = max(config.connection_pool_maxsize or 0, len(self._kinds) + 2)
        self._watch_api = client.ApiClient(config)
        for kind in self._kinds:
            resource = RESOURCES[kind]
            watcher = Watcher(
                resource,
                self._list_call(resource),
                self._selector(resource),
                self._stop,
                self._watch_timeout,
                self._replace,
                self.apply_event,
            )
            thread = threading.Thread(target=watcher.run, name=f"kai-cache-{kind}", daemon=True)
            self._watchers[kind] = watcher
            self._threads.append(thread)
            thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop every watcher, interrupting in-flight watches, and wait for the threads."""
        self._stop.set()
        for watcher in self._watchers.values():
            watcher.interrupt()
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        self._threads.clear()
        self._watchers.clear()
        if self._watch_api is not None:
            self._watch_api.close()
            self._watch_api = None
        with self._cond:
            self._notify()

    def __enter__(self) -> ClusterCache:
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    # ---------------------------------------------------------------- reading
    @property
    def generation(self) -> int:
        """Bumped on every change to any object; equal generations mean identical contents."""
        with self._cond:
            return self._generation

    def synced(self, kind: str | None = None) -> bool:
        """Whether `kind` (default: every kind) has been listed at least once."""
        with self._cond:
            return kind in self._synced if kind else len(self._synced) == len(self._kinds)

    def wait_synced(self, timeout: float) -> bool:
        """True once every kind has been listed at least once; False at the deadline."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while len(self._synced) < len(self._kinds):
                left = deadline - time.monotonic()
                if left <= 0 or self._stop.is_set():
                    return False
                self._cond.wait(left)
            return True

    def sync_or_stop(self, stop: threading.Event | None, give_up_after: float) -> bool:
        """Wait for the first full list of every kind; False if `stop` was set meanwhile.

        After `give_up_after` seconds it returns True with what it has (a kind the API
        server cannot list must not keep every other kind's work from starting), and says so.
        """
        deadline = time.monotonic() + give_up_after
        while not self.wait_synced(0.2):
            if stop is not None and stop.is_set():
                return False
            if time.monotonic() > deadline:
                log.warning("cluster cache not synced after %ss; going on with what it has", give_up_after)
                break
        return True

    def wait_changed(self, since: int, timeout: float) -> int:
        """Block until `generation` differs from `since` (or the timeout); returns the generation.

        Lets a scheduling loop sleep until there is something new to look at.
        """
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._generation == since and not self._stop.is_set():
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            return self._generation

    def wait_until(self, predicate: Callable[[], bool], timeout: float) -> bool:
        """Re-check `predicate` after every change until it holds (True) or the timeout passes (False).

        For writers and tests that must see an effect in the cache before going on,
        without polling the API server or sleeping.
        """
        deadline = time.monotonic() + timeout
        while True:
            with self._cond:
                seen = self._ticks
            if predicate():
                return True
            with self._cond:
                while self._ticks == seen:
                    left = deadline - time.monotonic()
                    if left <= 0 or self._stop.is_set():
                        return False
                    self._cond.wait(left)

    def objects(self, kind: str) -> list[dict[str, Any]]:
        """Every cached object of `kind` as fresh dicts, ordered by (namespace, name).

        A kind this cache does not follow has no objects.
        """
        return self.contents([kind]).objects[kind]

    def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        """One object (namespace "" for cluster-scoped kinds), or None."""
        with self._cond:
            entry = self._stores.get(kind, {}).get((namespace, name))
        return None if entry is None else _loads(entry.text)

    def contents(self, kinds: Iterable[str] | None = None) -> CacheContents:
        """Several kinds read at one generation, so a snapshot never mixes two moments."""
        read = self.entries(kinds)
        parsed = {kind: [_loads(entry.text) for entry in items] for kind, items in read.objects.items()}
        return CacheContents(read.generation, parsed)

    def entries(self, kinds: Iterable[str] | None = None) -> CacheEntries:
        """`contents` unparsed, with each object's resourceVersion: for a reader that parses only
        what changed since its last read (`kai_ray.cluster.kube.models.ModelCache`)."""
        wanted = self._kinds if kinds is None else tuple(kinds)
        with self._cond:
            stores = {kind: self._stores.get(kind, {}) for kind in wanted}
            items = {
                kind: [
                    CachedObject(namespace, name, entry.resource_version, entry.text)
                    for (namespace, name), entry in sorted(store.items())
                ]
                for kind, store in stores.items()
            }
            return CacheEntries(self._generation, items)

    def changes(self, since: int | None, kinds: Iterable[str]) -> CacheChanges:
        """The entries of `kinds` changed after generation `since` (a generation an earlier
        `changes` returned), or every entry (`complete`) when `since` is None or older than the
        log remembers."""
        wanted = tuple(kinds)
        with self._cond:
            if since is None or since < self._log_floor:
                every = {
                    kind: {key: _cached(key, entry) for key, entry in self._stores.get(kind, {}).items()}
                    for kind in wanted
                }
                return CacheChanges(self._generation, True, every)
            changed: dict[str, dict[ObjectKey, CachedObject | None]] = {}
            for kind in wanted:
                store, found = self._stores.get(kind, {}), {}
                for key, generation in reversed(self._log.get(kind, {}).items()):
                    if generation <= since:
                        break
                    entry = store.get(key)
                    found[key] = None if entry is None else _cached(key, entry)
                changed[kind] = found
            return CacheChanges(self._generation, False, changed)

    def keys(self, kind: str) -> set[ObjectKey]:
        """The (namespace, name) of every cached object of `kind`, without reading any of them."""
        with self._cond:
            return set(self._stores.get(kind, {}))

    def sizes(self) -> dict[str, int]:
        """Objects held per kind (the cache's memory follows the cluster, never its history)."""
        with self._cond:
            return {kind: len(store) for kind, store in self._stores.items()}

    def relists(self, kind: str) -> int:
        """How often `kind` was re-listed after its first list (410 Gone); for tests and metrics."""
        with self._cond:
            return self._relists[kind]

    def rewatch(self, kind: str, resource_version: str) -> None:
        """Abandon the current watch of `kind` and resume from `resource_version`.

        A resourceVersion the server has forgotten is answered with 410 Gone and
        a re-list; this is how tests drive that path against a real server
        without waiting for etcd compaction.
        """
        self._watchers[kind].restart_from(resource_version)

    # ---------------------------------------------------------------- writing through
    def observe(self, kind: str, obj: Mapping[str, Any]) -> bool:
        """Record an object a writer just got back from the API server (create/patch/update).

        Writers call this so the next cycle sees their own change even if the
        watch event has not arrived yet (no double work, no stale decisions).
        An older resourceVersion than the cached one is ignored, so a late
        watch event or observation never rolls an object back. Returns whether
        the cache changed.
        """
        if kind not in self._stores:
            return False
        data = normalise(dict(obj), RESOURCES[kind])
        if not self._wanted(kind, data):
            return False
        return self._upsert(kind, data)

    def observe_deleted(self, kind: str, obj: Mapping[str, Any]) -> bool:
        """Record that a writer deleted `obj` (only its metadata is read); returns whether it was cached."""
        if kind not in self._stores:
            return False
        return self._delete(kind, normalise(dict(obj), RESOURCES[kind]))

    def apply_event(self, event_type: str, kind: str, obj: dict[str, Any]) -> bool:
        """Apply one watch event (ADDED, MODIFIED or DELETED) of `kind`, the cache's name for it,
        as a watcher does; returns whether the cache changed.

        The watchers' one entry, public so that an in-process driver (the churn benchmark,
        tests) feeds the cache exactly as a watch would, without an API server.
        """
        if kind not in self._stores:
            return False
        data = normalise(obj, RESOURCES[kind])
        if event_type == "DELETED":
            return self._delete(kind, data)
        if event_type not in WATCH_EVENT_TYPES:
            known = ", ".join(WATCH_EVENT_TYPES)
            raise ValueError(f"unknown watch event type {event_type!r}; known: {known}")
        # The watch's selectors filter on the server; what still slips through is left out.
        return self._wanted(kind, data) and self._upsert(kind, data)

    # ---------------------------------------------------------------- for the watchers
    def _wanted(self, kind: str, data: Mapping[str, Any]) -> bool:
        meta = data.get("metadata") or {}
        if RESOURCES[kind].namespaced and self.namespace and meta.get("namespace") != self.namespace:
            return False
        ours = (data.get("spec") or {}).get("schedulerName") == self.scheduler_name
        if kind == "Pod":
            return ours
        if kind == FOREIGN_POD:
            return not ours and _occupies_a_node(data)
        return True

    def _replace(self, kind: str, items: list[dict[str, Any]], relist: bool) -> None:
        fresh = {_key(item): _entry(item) for item in items}
        with self._cond:
            old = self._stores[kind]
            if {k: e.resource_version for k, e in old.items()} != {
                k: e.resource_version for k, e in fresh.items()
            }:
                self._generation += 1
            for key in old.keys() | fresh.keys():
                if old.get(key) != fresh.get(key):
                    self._logged(kind, key)
            self._stores[kind] = fresh
            self._tombstones[kind].clear()
            self._synced.add(kind)
            self._relists[kind] += int(relist)
            self._notify()

    def _upsert(self, kind: str, data: dict[str, Any]) -> bool:
        entry = _entry(data)
        key = _key(data)
        with self._cond:
            current = self._stores[kind].get(key)
            if current is not None and not _newer(entry.resource_version, current.resource_version):
                return False
            if (
                current is not None
                and kind in VERSION_ONLY_KINDS
                and same_but_version(current.text, entry.text)
            ):
                self._stores[kind][key] = entry  # nothing kept changed: no new generation (`reduced`)
                return False
            deleted = self._tombstones[kind].get(key)
            if deleted is not None and not _newer(entry.resource_version, deleted):
                return False  # a late write-through of an object already seen deleted
            self._stores[kind][key] = entry
            self._generation += 1
            self._logged(kind, key)
            self._notify()
            return True

    def _delete(self, kind: str, data: dict[str, Any]) -> bool:
        key = _key(data)
        with self._cond:
            tombstones = self._tombstones[kind]
            tombstones.pop(key, None)
            tombstones[key] = _entry(data).resource_version
            if len(tombstones) > _TOMBSTONES:
                del tombstones[next(iter(tombstones))]
            if self._stores[kind].pop(key, None) is None:
                return False
            self._generation += 1
            self._logged(kind, key)
            self._notify()
            return True

    def _logged(self, kind: str, key: ObjectKey) -> None:
        """Record a change of `key` at the current generation; callers hold the lock.

        When deleted keys make up most of the log it is cut to the live keys and its floor
        raised: a reader from before then reads everything once, memory follows the cluster.
        """
        log = self._log[kind]
        log.pop(key, None)
        log[key] = self._generation
        if len(log) > 2 * len(self._stores[kind]) + _LOG_SLACK:
            self._log = {
                k: {key: g for key, g in entries.items() if key in self._stores[k]}
                for k, entries in self._log.items()
            }
            self._log_floor = self._generation

    def _notify(self) -> None:
        """Wake every waiter; callers hold the lock. Ticks also count syncs and re-lists."""
        self._ticks += 1
        self._cond.notify_all()

    def _list_call(self, resource: Resource) -> Callable[..., Any]:
        """The generated client's list function for `resource`, with its positional arguments bound."""
        ns = self.namespace if resource.namespaced else None
        if resource.api_version == CORE_API_VERSION:
            core = client.CoreV1Api(self._watch_api)
            if not resource.namespaced:
                return cast(Callable[..., Any], getattr(core, f"list_{snake(resource.kind)}"))
            if ns:
                return functools.partial(getattr(core, f"list_namespaced_{snake(resource.kind)}"), ns)
            return cast(Callable[..., Any], getattr(core, f"list_{snake(resource.kind)}_for_all_namespaces"))
        if resource.kind == "PriorityClass":
            return client.SchedulingV1Api(self._watch_api).list_priority_class
        if resource.kind == "StorageClass":
            return client.StorageV1Api(self._watch_api).list_storage_class
        custom = client.CustomObjectsApi(self._watch_api)
        if ns:
            return functools.partial(
                custom.list_namespaced_custom_object, resource.group, resource.version, ns, resource.plural
            )
        return functools.partial(
            custom.list_cluster_custom_object, resource.group, resource.version, resource.plural
        )

    def _selector(self, resource: Resource) -> dict[str, str]:
        """Server-side filtering: only the pods each store keeps travel over the wire.

        A pod that stops matching (it finishes, say) arrives as DELETED, so the store
        forgets it.
        """
        if resource.key == "Pod":
            return {"field_selector": f"spec.schedulerName={self.scheduler_name}"}
        if resource.key == FOREIGN_POD:
            return {
                "field_selector": f"spec.schedulerName!={self.scheduler_name},spec.nodeName!=,"
                "status.phase!=Succeeded,status.phase!=Failed"
            }
        return {}


def _occupies_a_node(pod: Mapping[str, Any]) -> bool:
    phase = (pod.get("status") or {}).get("phase")
    return bool((pod.get("spec") or {}).get("nodeName")) and phase not in ("Succeeded", "Failed")


def _key(obj: Mapping[str, Any]) -> ObjectKey:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


def _entry(obj: Mapping[str, Any]) -> _Entry:
    rv = str((obj.get("metadata") or {}).get("resourceVersion") or "")
    return _Entry(rv, json.dumps(obj, separators=(",", ":")))


def _cached(key: ObjectKey, entry: _Entry) -> CachedObject:
    return CachedObject(key[0], key[1], entry.resource_version, entry.text)


def _loads(text: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(text)
    return data


def _newer(candidate: str, current: str) -> bool:
    """Whether `candidate` is a later resourceVersion than `current`.

    resourceVersions are opaque by contract but etcd revisions in practice;
    when both are integers they are compared, otherwise any difference counts.
    """
    if candidate.isdecimal() and current.isdecimal():
        return int(candidate) > int(current)
    return candidate != current
