"""The API's backend on a real cluster: state from the scheduler's informer cache, writes through
the API server.

`kai-ray serve --grpc-address` runs the `KubeScheduler` loop as always and serves the API over the
same process's cache:

- **Reads** (`view`) are the cache's objects as API models, loaded by the same loader the cycle's
  snapshot uses (`kai_ray.convert` reads the cache through it), so a workload's state and the
  scheduler's decisions come from one picture.  Models are kept per object and resourceVersion,
  so a view after a change re-validates only what changed; the view itself is rebuilt only when
  the cache's generation moved.
- **The last cycle** comes from the loop (`KubeScheduler.add_cycle_listener`): its converted
  state, the engine's end state and the plan, as `CycleRecord`, the same record the simulated
  backend keeps.  Explain, ListQueues and GetCluster read it.
- **Writes** (`create`, `delete`) go to the API server on a client of their own, not fenced by
  the leader lease: a submit is the user's write, not a scheduling decision, so every replica
  accepts it and the leader schedules it.  Each call has a timeout.  `create` is all or nothing:
  on any failure what was created is deleted again before the error is raised.  What the server
  answers is written through to the cache (`ClusterCache.observe`), so the submitted objects are
  in the very next view, before their watch events arrive.
- **Notifications** (`subscribe`) come from a thread of this backend, never from the scheduling
  loop's thread (a listener that derives every workload's state must not delay a cycle): once per
  finished cycle, in order, with its record, and once after cache changes (coalesced: a burst of
  watch events is one call), with None.

What is sent is what the object was built with (`exclude_unset`: the models' defaults such as
`overhead: {}` are not sent, the API server would refuse them), adapted to Kubernetes' rules:
- extended resources (`nvidia.com/gpu`) get a limit equal to their request (they cannot be
  overcommitted, so the API server requires it, and a submit states requests only);
- pods naming the scheduler `kai-scheduler` (`submit.py`) name this one when it runs under
  another `--scheduler-name`, so this process schedules what it accepted;
- every object carries `SUBMISSION_ANNOTATION`, which a rollback uses to recognise its own.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Protocol

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kai_ray.api import ApiObject
from kai_ray.api.config import SchedulerConfig
from kai_ray.api.constants import PODGROUP_API_VERSION, SCHEDULER_NAME
from kai_ray.cluster.kube.cache import ClusterCache
from kai_ray.cluster.kube.fence import FencedApiClient, NotLeader
from kai_ray.cluster.kube.models import ModelCache
from kai_ray.cluster.kube.planner import CycleListener, PlannedCycle
from kai_ray.cluster.kube.snapshot import SOURCE
from kai_ray.rpc.backend import (
    BackendView,
    CycleRecord,
    Listener,
    NamespacedName,
    ObjectKey,
    object_key,
)
from kai_ray.rpc.errors import ErrorCode, ServiceError

__all__ = [
    "DEFAULT_CALL_TIMEOUT",
    "SUBMISSION_ANNOTATION",
    "KubeBackend",
    "SchedulerLike",
]

log = logging.getLogger(__name__)

DEFAULT_CALL_TIMEOUT = 10.0
"""Seconds each create or delete may take (read timeout); past it the call fails UNAVAILABLE."""
CONNECT_TIMEOUT = 5.0
DEFAULT_WRITERS = 16
"""Pods of one submit created (or deleted) concurrently: a 100-pod gang is 7 round trips, not 100."""
MIN_NOTIFY_INTERVAL = 0.05
"""At most this often a cache change is announced: a burst of watch events becomes one refresh."""
SUBMISSION_ANNOTATION = "kai-ray.io/submission"
"""On every object one submit creates: a token of that submit, so a rollback recognises an object
whose create timed out but happened, and leaves alone one someone else made under its name."""
_CACHE_WAIT = 0.25
"""How long the cache follower blocks at a time: also how long `close()` may wait for it."""
_PODGROUP_GROUP, _, _PODGROUP_VERSION = PODGROUP_API_VERSION.partition("/")
_WRITABLE = ("PodGroup", "Pod")
"""What a submit creates, in creation order: a PodGroup exists before its pods are scheduled."""


class SchedulerLike(Protocol):
    """What the backend reads of `kai_ray.server.scheduler.KubeScheduler`."""

    api: Any
    config: SchedulerConfig
    cache: ClusterCache

    def add_cycle_listener(self, listener: CycleListener) -> None: ...


class KubeBackend:
    """The `Backend` of a `KubeScheduler`.  Thread-safe; `close()` stops its threads.

    `api` is the client for creates and deletes (default: a new, unfenced client on the
    scheduler's configuration, closed with the backend).
    """

    changes_outside_api = True
    """Workloads also appear and go without the API (a RayJob's pods grouped by the podgrouper, a
    pod deleted with kubectl): the workload tracker re-reads them from every view."""

    def __init__(
        self,
        scheduler: SchedulerLike,
        *,
        api: Any | None = None,
        timeout: float = DEFAULT_CALL_TIMEOUT,
        writers: int = DEFAULT_WRITERS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._scheduler = scheduler
        self._cache = scheduler.cache
        self._own_api = api is None
        self._api: Any = api if api is not None else FencedApiClient(scheduler.api.configuration)
        # Any: bodies are plain JSON and answers are read raw (`_preload_content=False`), which the
        # generated client's annotations do not describe.
        self._core: Any = client.CoreV1Api(self._api)
        self._custom: Any = client.CustomObjectsApi(self._api)
        self._timeout = (CONNECT_TIMEOUT, timeout)
        self._clock = clock
        self._pool = ThreadPoolExecutor(max_workers=max(1, writers), thread_name_prefix="kai-ray-kube-write")
        self._lock = threading.Lock()
        """Guards the last cycle, the generation, the pending announcements and the listeners."""
        self._cond = threading.Condition(self._lock)
        self._view_lock = threading.Lock()
        """Guards the models read from the cache (never taken while `_lock` is held)."""
        self._models = ModelCache(SOURCE)
        """The cache's objects as models, validated once per resourceVersion."""
        self._kinds: dict[str, dict[NamespacedName, ApiObject]] | None = None
        self._kinds_cache_generation = -1
        self._generation = 0
        self._last: CycleRecord | None = None
        self._listeners: list[Listener] = []
        self._pending: deque[CycleRecord] = deque()
        self._cache_changed = False
        self._closed = threading.Event()
        scheduler.add_cycle_listener(self._on_cycle)
        self._threads = [
            threading.Thread(target=self._follow_cache, name="kai-ray-api-cache", daemon=True),
            threading.Thread(target=self._deliver, name="kai-ray-api-notify", daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    # ------------------------------------------------------------------ Backend protocol
    @property
    def config(self) -> SchedulerConfig:
        return self._scheduler.config

    def now(self) -> float:
        return self._clock()

    def view(self) -> BackendView:
        """The cache's objects as models, and the last cycle; rebuilt only after a change.

        UNAVAILABLE (retryable) until the cache has listed every kind or a cycle has run (the
        loop goes on without a kind it cannot list; so does the API): a half-listed cluster would
        refuse a submit for a queue that exists.
        """
        with self._lock:
            ready = self._last is not None
        if not ready and not self._cache.synced():
            raise ServiceError(
                ErrorCode.UNAVAILABLE,
                "the scheduler is still listing the cluster (its cache is not synced yet); retry",
            )
        kinds = self._objects()
        with self._lock:
            return BackendView(self._generation, kinds, self._last, self._clock())

    def _objects(self) -> Mapping[str, Mapping[NamespacedName, ApiObject]]:
        """The cache's objects as models, by kind; re-read only when the cache's generation moved.

        Under its own lock, not `_lock`: the scheduling loop's cycle listener must never wait for
        a rebuild.
        """
        with self._view_lock:
            if self._kinds is not None and self._cache.generation == self._kinds_cache_generation:
                return self._kinds
            entries = self._cache.entries()
            kinds = self._models.by_kind(entries)
            self._kinds = kinds
            self._kinds_cache_generation = entries.generation
            with self._lock:
                self._generation += 1
            return kinds

    def create(self, objects: Sequence[ApiObject]) -> None:
        """Create every object or none: PodGroups first, then the pods concurrently; on any failure
        whatever was created is deleted again and the first failure is raised as ServiceError.

        A create that timed out (or met a 5xx) may still have happened: each object carries this
        submit's token (`SUBMISSION_ANNOTATION`), so the rollback finds and deletes such an object
        too, and never one that someone else created under the same name.
        """
        token = uuid.uuid4().hex
        bodies = [self._body(obj, token) for obj in objects]
        created: list[tuple[str, dict[str, Any]]] = []
        uncertain: list[ObjectKey] = []
        failure: ServiceError | None = None
        groups = [(obj, body) for obj, body in zip(objects, bodies, strict=True) if obj.kind == "PodGroup"]
        pods = [(obj, body) for obj, body in zip(objects, bodies, strict=True) if obj.kind == "Pod"]
        for obj, body in groups:
            try:
                created.append(("PodGroup", self._create_one(obj, body)))
            except ServiceError as error:
                failure = error
                if error.code == ErrorCode.UNAVAILABLE:
                    uncertain.append(object_key(obj))
                break
        if failure is None and pods:
            futures = [(obj, self._pool.submit(self._create_one, obj, body)) for obj, body in pods]
            failure = self._gather(futures, created, uncertain)
        if failure is not None:
            left = self._roll_back(created, uncertain, token)
            if left:
                raise ServiceError(
                    failure.code,
                    f"{failure.message}; {len(left)} object(s) created before the failure could not be "
                    f"removed: {', '.join(left)}",
                    failure.field,
                )
            raise failure
        for kind, data in created:
            self._cache.observe(kind, data)

    def delete(self, keys: Sequence[ObjectKey]) -> None:
        """Delete (gracefully: pods end as their spec says) what exists; missing objects are fine.

        Every key is tried; the first failure is raised afterwards, so a retry finishes the job.
        """
        futures = [(key, self._pool.submit(self._delete_one, key, None)) for key in keys]
        errors: list[ServiceError] = []
        for _, future in futures:
            try:
                future.result()
            except ServiceError as error:
                errors.append(error)
        if errors:
            raise errors[0]

    def subscribe(self, listener: Listener) -> None:
        with self._lock:
            self._listeners.append(listener)

    # ------------------------------------------------------------------ lifecycle
    def close(self) -> None:
        """Stop notifying; in-flight writes finish.  The scheduler and its cache are not touched."""
        self._closed.set()
        with self._cond:
            self._cond.notify_all()
        for thread in self._threads:
            thread.join(timeout=10)
        self._pool.shutdown(wait=True)
        if self._own_api:
            self._api.close()

    def __enter__(self) -> KubeBackend:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # ------------------------------------------------------------------ notifications
    def _on_cycle(self, planned: PlannedCycle) -> None:
        """On the scheduling loop's thread: keep the record, hand the announcement to ours."""
        record = CycleRecord(
            planned.number, planned.state.now, planned.state, planned.session, planned.plan, planned.problems
        )
        with self._cond:
            self._last = record
            self._generation += 1
            self._pending.append(record)
            self._cond.notify_all()

    def _follow_cache(self) -> None:
        seen = self._cache.generation
        while not self._closed.is_set():
            current = self._cache.wait_changed(seen, _CACHE_WAIT)
            if current != seen:
                seen = current
                with self._cond:
                    self._cache_changed = True
                    self._cond.notify_all()
            # Rate limit (a burst of watch events is one refresh); also keeps a stopped cache,
            # whose wait returns at once, from spinning this thread.
            self._closed.wait(MIN_NOTIFY_INTERVAL)

    def _deliver(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(
                    lambda: self._closed.is_set() or bool(self._pending) or self._cache_changed
                )
                if self._closed.is_set():
                    return
                records = list(self._pending)
                self._pending.clear()
                self._cache_changed = False
                listeners = list(self._listeners)
            # A cycle's announcement also refreshes from the current view: no separate None.
            announcements: list[CycleRecord | None] = [*records] or [None]
            for record in announcements:
                for listener in listeners:
                    try:
                        listener(record)
                    except Exception:
                        log.exception("an API listener failed on a cluster change")

    # ------------------------------------------------------------------ writes
    def _body(self, obj: ApiObject, token: str) -> dict[str, Any]:
        kind, namespace, name = object_key(obj)
        if kind not in _WRITABLE:
            raise ServiceError(
                ErrorCode.INVALID_ARGUMENT, f"{kind} {namespace}/{name}: only Pods and PodGroups are created"
            )
        scope = self._cache.namespace
        if scope and namespace != scope:
            raise ServiceError(
                ErrorCode.FAILED_PRECONDITION,
                f"this scheduler serves namespace {scope!r} only, not {namespace!r}",
                "namespace",
            )
        # Only what the object was built with: the models' defaults (`overhead: {}`, empty
        # topology constraints) are how kai-ray reads an absent field, not something to send.
        body: dict[str, Any] = obj.model_dump(
            mode="json", by_alias=True, exclude_unset=True, exclude_none=True
        )
        body.pop("status", None)
        meta = body.setdefault("metadata", {})
        meta["annotations"] = {**(meta.get("annotations") or {}), SUBMISSION_ANNOTATION: token}
        for server_owned in (
            "creationTimestamp",
            "resourceVersion",
            "uid",
            "generation",
            "deletionTimestamp",
        ):
            meta.pop(server_owned, None)
        if kind == "Pod":
            spec = body.setdefault("spec", {})
            if not spec.get("nodeName"):
                spec.pop("nodeName", None)
            ours = self._cache.scheduler_name
            if spec.get("schedulerName") == SCHEDULER_NAME and ours != SCHEDULER_NAME:
                spec["schedulerName"] = ours
            for section in ("containers", "initContainers"):
                for container in spec.get(section) or []:
                    _limit_extended_resources(container)
        return body

    def _create_one(self, obj: ApiObject, body: dict[str, Any]) -> dict[str, Any]:
        kind, namespace, name = object_key(obj)
        try:
            if kind == "Pod":
                response = self._core.create_namespaced_pod(
                    namespace, body, _preload_content=False, _request_timeout=self._timeout
                )
            else:
                response = self._custom.create_namespaced_custom_object(
                    _PODGROUP_GROUP,
                    _PODGROUP_VERSION,
                    namespace,
                    "podgroups",
                    body,
                    _preload_content=False,
                    _request_timeout=self._timeout,
                )
            created: dict[str, Any] = json.loads(response.data)
        except Exception as error:
            raise _service_error(error, "create", kind, namespace, name) from None
        created.setdefault("apiVersion", body.get("apiVersion"))
        created.setdefault("kind", kind)
        return created

    def _gather(
        self,
        futures: Sequence[tuple[ApiObject, Future[dict[str, Any]]]],
        created: list[tuple[str, dict[str, Any]]],
        uncertain: list[ObjectKey],
    ) -> ServiceError | None:
        """Wait for every create; the first failure in submission order, after cancelling the
        creates not started yet (those already running finish and are rolled back).  Creates whose
        outcome is unknown (UNAVAILABLE: a timeout, a 5xx) go to `uncertain`."""
        failure: ServiceError | None = None
        for obj, future in futures:
            if failure is not None and future.cancel():
                continue
            try:
                created.append((obj.kind, future.result()))
            except ServiceError as error:
                failure = failure or error
                if error.code == ErrorCode.UNAVAILABLE:
                    uncertain.append(object_key(obj))
                for _, later in futures:
                    later.cancel()
        return failure

    def _roll_back(
        self, created: list[tuple[str, dict[str, Any]]], uncertain: list[ObjectKey], token: str
    ) -> list[str]:
        """Delete what a failed create made (pods before their PodGroup), at once (grace 0), and
        what a create of unknown outcome made if it carries `token`; returns what is left."""
        left: list[str] = []
        for key in uncertain:
            try:
                found = self._get_one(key)
            except ServiceError as error:
                log.error("rolling back a failed submit: %s", error)
                left.append(f"{key[0]} {key[1]}/{key[2]} (perhaps)")
                continue
            if found is not None and _annotations(found).get(SUBMISSION_ANNOTATION) == token:
                created.append((key[0], found))
        pods = [(kind, data) for kind, data in created if kind == "Pod"]
        groups = [(kind, data) for kind, data in created if kind != "Pod"]
        for batch in (pods, groups):
            futures = [
                (kind, data, self._pool.submit(self._delete_one, _key(kind, data), 0, _uid(data)))
                for kind, data in batch
            ]
            for kind, data, future in futures:
                try:
                    future.result()
                    self._cache.observe_deleted(kind, data)
                except ServiceError as error:
                    log.error("rolling back a failed submit: %s", error)
                    _, namespace, name = _key(kind, data)
                    left.append(f"{kind} {namespace}/{name}")
        return left

    def _get_one(self, key: ObjectKey) -> dict[str, Any] | None:
        """The object as the API server has it now, or None if there is none."""
        kind, namespace, name = key
        options: dict[str, Any] = {"_request_timeout": self._timeout, "_preload_content": False}
        try:
            if kind == "Pod":
                response = self._core.read_namespaced_pod(name, namespace, **options)
            else:
                response = self._custom.get_namespaced_custom_object(
                    _PODGROUP_GROUP, _PODGROUP_VERSION, namespace, "podgroups", name, **options
                )
            found: dict[str, Any] = json.loads(response.data)
        except ApiException as error:
            if error.status == 404:
                return None
            raise _service_error(error, "read", kind, namespace, name) from None
        except Exception as error:
            raise _service_error(error, "read", kind, namespace, name) from None
        return found

    def _delete_one(self, key: ObjectKey, grace: int | None, uid: str = "") -> None:
        """Delete one object; gone already is fine.  With `uid`, only that very object: a
        rollback never deletes what someone else created under the same name meanwhile."""
        kind, namespace, name = key
        options: dict[str, Any] = {"_request_timeout": self._timeout, "_preload_content": False}
        if grace is not None:
            options["grace_period_seconds"] = grace
        if uid:
            options["body"] = {"preconditions": {"uid": uid}}
        try:
            if kind == "Pod":
                self._core.delete_namespaced_pod(name, namespace, **options)
            elif kind == "PodGroup":
                self._custom.delete_namespaced_custom_object(
                    _PODGROUP_GROUP, _PODGROUP_VERSION, namespace, "podgroups", name, **options
                )
            else:
                raise ServiceError(
                    ErrorCode.INVALID_ARGUMENT, f"{kind} {namespace}/{name}: not deletable here"
                )
        except ApiException as error:
            if error.status == 404 or (uid and error.status == 409):
                return
            raise _service_error(error, "delete", kind, namespace, name) from None
        except ServiceError:
            raise
        except Exception as error:
            raise _service_error(error, "delete", kind, namespace, name) from None


# ---------------------------------------------------------------------------------- helpers


def _key(kind: str, data: Mapping[str, Any]) -> ObjectKey:
    meta = data.get("metadata") or {}
    return kind, str(meta.get("namespace") or ""), str(meta.get("name") or "")


def _limit_extended_resources(container: dict[str, Any]) -> None:
    """Kubernetes does not overcommit extended resources (`nvidia.com/gpu`) or huge pages: their
    limit must be given and equal the request.  A submit states requests only, so the limit is
    the request, as the API server would otherwise refuse the pod (422)."""
    resources = container.get("resources")
    if not isinstance(resources, dict):
        return
    requests = resources.get("requests") or {}
    limits = dict(resources.get("limits") or {})
    for name, amount in requests.items():
        if name not in limits and _not_overcommitted(name):
            limits[name] = amount
    if limits:
        resources["limits"] = limits


def _not_overcommitted(resource: str) -> bool:
    if resource.startswith("hugepages-"):
        return True
    domain, slash, _ = resource.partition("/")
    return bool(slash) and not (domain == "kubernetes.io" or domain.endswith(".kubernetes.io"))


def _annotations(data: Mapping[str, Any]) -> Mapping[str, Any]:
    annotations = (data.get("metadata") or {}).get("annotations")
    return annotations if isinstance(annotations, dict) else {}


def _uid(data: Mapping[str, Any]) -> str:
    return str((data.get("metadata") or {}).get("uid") or "")


def _service_error(error: BaseException, verb: str, kind: str, namespace: str, name: str) -> ServiceError:
    """An API server's answer (or its silence) as the API's status code; never a token or body dump."""
    what = f"{verb} {kind} {namespace}/{name}"
    if isinstance(error, ServiceError):
        return error
    if isinstance(error, NotLeader):
        return ServiceError(ErrorCode.UNAVAILABLE, f"{what}: {error}")
    if isinstance(error, ApiException):
        status = error.status or 0
        message, field = _status_details(error)
        if status == 409:
            return ServiceError(ErrorCode.ALREADY_EXISTS, f"{what}: {message}", "name")
        if status == 403:
            return ServiceError(ErrorCode.PERMISSION_DENIED, f"{what}: the API server refused: {message}")
        if status == 422 or status == 400:
            return ServiceError(ErrorCode.INVALID_ARGUMENT, f"{what}: {message}", field or None)
        if status == 404:
            return ServiceError(
                ErrorCode.FAILED_PRECONDITION,
                f"{what}: {message} (does the namespace exist, and the PodGroup CRD?)",
                "namespace",
            )
        return ServiceError(ErrorCode.UNAVAILABLE, f"{what}: the API server answered {status} {message}")
    if isinstance(error, (urllib3.exceptions.HTTPError, OSError, TimeoutError)):
        return ServiceError(
            ErrorCode.UNAVAILABLE, f"{what}: the API server did not answer in time ({type(error).__name__})"
        )
    return ServiceError(ErrorCode.UNAVAILABLE, f"{what}: {type(error).__name__}: {error}")


def _status_details(error: ApiException) -> tuple[str, str]:
    """The Status body's message and its first cause's field (422: `spec.containers[0].image`)."""
    try:
        status = json.loads(error.body or "{}")
    except (ValueError, TypeError):
        return str(error.reason or ""), ""
    if not isinstance(status, dict):
        return str(error.reason or ""), ""
    message = str(status.get("message") or error.reason or "")
    causes = (status.get("details") or {}).get("causes") or []
    field = next((str(c.get("field")) for c in causes if isinstance(c, dict) and c.get("field")), "")
    return message, field
