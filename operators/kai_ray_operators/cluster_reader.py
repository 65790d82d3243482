"""What the grouper reads on a live cluster: the informer cache where it has the object, else a cached GET.

A pod's owners are arbitrary workload kinds (Jobs, RayClusters, PyTorchJobs,
...), which the scheduler's informer cache does not follow.  Reading them
with a GET per pod per cycle would load the API server with work that grows
with the cluster; the same few owners serve hundreds of pods.  So each read
is remembered for `ttl` seconds (answers "not found" and "forbidden" too),
resource names come from API discovery once per group/version, and pods and
PodGroups, which the informer cache holds, are read from it.  Memory: entries
expire, and `prune` drops them.  A `ReadTrace` says whether one plan read anything, so a
caller knows which plans depend on the pod alone.
"""

from __future__ import annotations

import builtins
import contextlib
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, cast

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kai_ray.cluster.kube.cache import ClusterCache
from kai_ray_operators.errors import Forbidden, NotFound, ReadError
from kai_ray_operators.fields import GroupVersionKind, KubeObject, labels_of

__all__ = ["ClusterReader", "ReadTrace"]

READ_TIMEOUT = (5.0, 10.0)
_FROM_CACHE = {
    ("", "Pod"): "Pod",
    ("scheduling.run.ai", "PodGroup"): "PodGroup",
    ("scheduling.k8s.io", "PriorityClass"): "PriorityClass",
}
"""Kinds the scheduler's informer cache holds: read there, never from the API server."""


@dataclass(frozen=True)
class _Resource:
    plural: str
    namespaced: bool


@dataclass
class ReadTrace:
    """What the reads inside one `ClusterReader.tracing` block amounted to."""

    reads: int = 0
    """Objects got and listings made, from the informer cache or the API server."""


@dataclass
class _Answer:
    value: Any
    error: ReadError | None
    expires: float


class ClusterReader:
    """An `ObjectReader` over the informer cache and a short-lived cache of GETs and LISTs."""

    def __init__(
        self, api: Any, cache: ClusterCache, *, ttl: float = 5.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._custom = client.CustomObjectsApi(api)
        self._core = client.CoreV1Api(api)
        self._cache = cache
        self._ttl = ttl
        self._clock = clock
        self._answers: dict[tuple[str, ...], _Answer] = {}
        self._resources: dict[tuple[str, str], dict[str, _Resource]] = {}
        self._lock = threading.Lock()
        self._trace: ReadTrace | None = None

    @contextlib.contextmanager
    def tracing(self) -> Iterator[ReadTrace]:
        """Record what the reads inside the block touch (one caller at a time: the grouper's pass)."""
        trace = ReadTrace()
        self._trace = trace
        try:
            yield trace
        finally:
            self._trace = None

    # ---------------------------------------------------------------- ObjectReader
    def get(self, api_version: str, kind: str, namespace: str, name: str) -> KubeObject:
        gvk = GroupVersionKind.of({"apiVersion": api_version, "kind": kind})
        cached_kind = _FROM_CACHE.get((gvk.group, kind))
        if cached_kind is not None:
            self._count_read()
            found = self._cache.get(cached_kind, namespace, name)
            if found is None:
                raise NotFound(_subject(kind, namespace, name), "not found")
            return found
        value = self._remembered(
            ("get", api_version, kind, namespace, name), lambda: self._get(gvk, namespace, name)
        )
        return cast(KubeObject, value)

    def list(
        self, api_version: str, kind: str, namespace: str | None, selector: Mapping[str, str]
    ) -> list[KubeObject]:
        gvk = GroupVersionKind.of({"apiVersion": api_version, "kind": kind})
        cached_kind = _FROM_CACHE.get((gvk.group, kind))
        if cached_kind is not None:
            self._count_read()
            return [
                obj
                for obj in self._cache.objects(cached_kind)
                if (namespace is None or (obj.get("metadata") or {}).get("namespace") == namespace)
                and all(labels_of(obj).get(k) == v for k, v in selector.items())
            ]
        key = (
            "list",
            api_version,
            kind,
            namespace or "",
            ",".join(f"{k}={v}" for k, v in sorted(selector.items())),
        )
        value = self._remembered(key, lambda: self._list(gvk, namespace, selector))
        return cast(list[KubeObject], value)

    # ---------------------------------------------------------------- memory
    def prune(self) -> None:
        """Forget answers that expired."""
        now = self._clock()
        with self._lock:
            self._answers = {k: a for k, a in self._answers.items() if a.expires > now}

    def tracked(self) -> int:
        with self._lock:
            return len(self._answers)

    # ---------------------------------------------------------------- reading
    def _count_read(self) -> None:
        if self._trace is not None:
            self._trace.reads += 1

    def _remembered(self, key: tuple[str, ...], read: Callable[[], Any]) -> Any:
        self._count_read()
        now = self._clock()
        with self._lock:
            answer = self._answers.get(key)
        if answer is None or answer.expires <= now:
            try:
                answer = _Answer(read(), None, now + self._ttl)
            except ReadError as error:
                answer = _Answer(None, error, now + self._ttl)
            with self._lock:
                self._answers[key] = answer
        if answer.error is not None:
            raise answer.error
        return answer.value

    def _get(self, gvk: GroupVersionKind, namespace: str, name: str) -> KubeObject:
        subject = _subject(gvk.kind, namespace, name)
        if not gvk.group:
            return self._core_get(gvk.kind, namespace, name, subject)
        resource = self._resource(gvk, subject)
        try:
            if resource.namespaced:
                found = self._custom.get_namespaced_custom_object(
                    gvk.group, gvk.version, namespace, resource.plural, name, _request_timeout=READ_TIMEOUT
                )
            else:
                found = self._custom.get_cluster_custom_object(
                    gvk.group, gvk.version, resource.plural, name, _request_timeout=READ_TIMEOUT
                )
        except ApiException as error:
            raise _read_error(error, subject) from None
        return cast(KubeObject, found)

    def _core_get(self, kind: str, namespace: str, name: str, subject: str) -> KubeObject:
        """Core-group reads besides pods: owners (ReplicationControllers, the Nodes of mirror pods)
        and the ConfigMap of per-kind default priorities."""
        found: Any
        try:
            if kind == "ReplicationController":
                found = self._core.read_namespaced_replication_controller(
                    name, namespace, _request_timeout=READ_TIMEOUT
                )
            elif kind == "Node":
                found = self._core.read_node(name, _request_timeout=READ_TIMEOUT)
            elif kind == "ConfigMap":
                found = self._core.read_namespaced_config_map(name, namespace, _request_timeout=READ_TIMEOUT)
            else:
                raise NotFound(subject, f"the podgrouper does not read {kind} objects")
        except ApiException as error:
            raise _read_error(error, subject) from None
        plain: KubeObject = self._core.api_client.sanitize_for_serialization(found)
        return {"apiVersion": "v1", "kind": kind, **plain}

    def _list(
        self, gvk: GroupVersionKind, namespace: str | None, selector: Mapping[str, str]
    ) -> builtins.list[KubeObject]:
        subject = f"{gvk.kind} list"
        resource = self._resource(gvk, subject)
        label_selector = ",".join(f"{k}={v}" for k, v in sorted(selector.items()))
        try:
            if namespace is not None and resource.namespaced:
                listing = self._custom.list_namespaced_custom_object(
                    gvk.group,
                    gvk.version,
                    namespace,
                    resource.plural,
                    label_selector=label_selector,
                    _request_timeout=READ_TIMEOUT,
                )
            else:
                listing = self._custom.list_cluster_custom_object(
                    gvk.group,
                    gvk.version,
                    resource.plural,
                    label_selector=label_selector,
                    _request_timeout=READ_TIMEOUT,
                )
        except ApiException as error:
            raise _read_error(error, subject) from None
        return builtins.list(cast(dict[str, Any], listing).get("items") or [])

    def _resource(self, gvk: GroupVersionKind, subject: str) -> _Resource:
        """The kind's resource name and scope, from discovery (once per group/version)."""
        key = (gvk.group, gvk.version)
        with self._lock:
            known = self._resources.get(key)
        if known is None:
            try:
                listing = self._custom.get_api_resources(
                    gvk.group, gvk.version, _request_timeout=READ_TIMEOUT
                )
            except ApiException as error:
                raise _read_error(error, subject) from None
            known = {
                r.kind: _Resource(r.name, bool(r.namespaced))
                for r in listing.resources or []
                if "/" not in r.name  # subresources
            }
            with self._lock:
                self._resources[key] = known
        resource = known.get(gvk.kind)
        if resource is None:
            raise NotFound(subject, f"the API server serves no {gvk.kind} in {gvk.api_version}")
        return resource


def _subject(kind: str, namespace: str, name: str) -> str:
    return f"{kind} {namespace}/{name}" if namespace else f"{kind} {name}"


def _read_error(error: ApiException, subject: str) -> ReadError:
    if error.status == 403:
        return Forbidden(subject, "forbidden")
    if error.status == 404:
        return NotFound(subject, "not found")
    return ReadError(subject, f"{error.status} {error.reason}")
