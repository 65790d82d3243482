"""The small Kubernetes helpers every writer shares: API-call errors, bounded calls, custom objects.

What the plan applier, the binder, the status and Event writers and the job marks all need of a
call to the API server: `OperationError` (one failed call, named), the server's message out of
an exception, a raw response released, independent calls run with a bound on those in flight,
custom-object calls that fall back when a CRD has no status subresource, the resource names
and versions of KAI's objects and the patch content types.  Kept apart so that none of those
writers imports another for a constant (the applier and the binder did, both ways).
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, cast

from kubernetes import client
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from kai_ray.api.constants import (
    BINDREQUEST_API_VERSION,
    DEFAULT_NAMESPACE,
    PODGROUP_API_VERSION,
    QUEUE_API_VERSION,
    SCHEDULING_GROUP,
)

log = logging.getLogger(__name__)

PODGROUP_VERSION = PODGROUP_API_VERSION.split("/")[1]
QUEUE_VERSION = QUEUE_API_VERSION.split("/")[1]
PODGROUPS = "podgroups"
QUEUES = "queues"
BINDREQUESTS = "bindrequests"
BINDREQUEST_VERSION = BINDREQUEST_API_VERSION.split("/")[1]

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"


@dataclass(frozen=True)
class OperationError:
    """One API call that failed: what was being done, to which object, and the server's answer."""

    operation: str
    object: str
    message: str

    def __str__(self) -> str:
        return f"{self.operation} {self.object}: {self.message}"


def split_job_key(key: str) -> tuple[str, str]:
    """``"ns/name"`` → ``("ns", "name")``; a bare name (simulator jobs) lives in ``default``."""
    namespace, sep, name = key.partition("/")
    return (namespace, name) if sep else (DEFAULT_NAMESPACE, key)


def now_utc() -> _dt.datetime:
    return _dt.datetime.now(_dt.UTC)


def rfc3339(moment: _dt.datetime) -> str:
    """Kubernetes' timestamp form (second precision, ``Z``), as KAI writes its annotations."""
    return moment.astimezone(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def api_error_message(exc: BaseException) -> str:
    """The human part of an API error (the server's Status message when there is one)."""
    if isinstance(exc, ApiException):
        body = exc.body
        if isinstance(body, bytes | bytearray):
            body = body.decode(errors="replace")
        if isinstance(body, str) and body:
            try:
                status = json.loads(body)
            except ValueError:
                return f"{exc.status} {exc.reason}: {body[:300]}"
            if isinstance(status, dict) and status.get("message"):
                return f"{exc.status} {status.get('reason') or exc.reason}: {status['message']}"
        return f"{exc.status} {exc.reason}"
    return f"{type(exc).__name__}: {exc}"


def is_status(exc: BaseException, *codes: int) -> bool:
    return isinstance(exc, ApiException) and exc.status in codes


def discard(response: object) -> None:
    """Release a raw (``_preload_content=False``) response so its connection returns to the pool."""
    release = getattr(response, "release_conn", None)
    drain = getattr(response, "drain_conn", None)
    if callable(drain):
        drain()
    if callable(release):
        release()


def run_bounded(calls: Sequence[Callable[[], None]], concurrency: int) -> None:
    """Run independent API calls with at most ``concurrency`` in flight; returns when all ended.

    Each call records its own outcome (callers guard them so they never raise); a thread pool rather
    than asyncio because the kubernetes client is synchronous.  One call runs inline, which
    keeps the common small cycle free of thread start-up cost.
    """
    if not calls:
        return
    if len(calls) == 1 or concurrency <= 1:
        for call in calls:
            call()
        return
    with ThreadPoolExecutor(max_workers=min(concurrency, len(calls)), thread_name_prefix="kai-apply") as pool:
        for future in [pool.submit(call) for call in calls]:
            future.result()


class CustomObjects:
    """Custom-object calls with the status-subresource check done once per resource.

    KAI's CRDs all have a ``status`` subresource, so status must go through ``/status`` (a
    patch of the main resource silently drops it).  A CRD without one (an older or
    hand-written install) answers 404 on ``/status``; then the main resource is patched and
    that answer is remembered for the rest of the process.
    """

    def __init__(self, api: ApiClient) -> None:
        self.api = client.CustomObjectsApi(api)
        self._no_status_subresource: set[str] = set()
        self._lock = threading.Lock()

    def get(self, plural: str, version: str, namespace: str | None, name: str) -> dict[str, Any]:
        if namespace is None:
            obj = self.api.get_cluster_custom_object(SCHEDULING_GROUP, version, plural, name)
        else:
            obj = self.api.get_namespaced_custom_object(SCHEDULING_GROUP, version, namespace, plural, name)
        return cast(dict[str, Any], obj)

    def patch_status(
        self, plural: str, version: str, namespace: str | None, name: str, body: Mapping[str, Any]
    ) -> None:
        """Merge-patch ``body`` (``{"status": ...}``) into the object's status."""
        if plural not in self._no_status_subresource:
            try:
                discard(self._patch(plural, version, namespace, name, body, status=True))
                return
            except ApiException as exc:
                if exc.status != 404:
                    raise
            # 404: either the object is gone or the CRD has no status subresource; the main
            # resource tells which (it 404s too when the object is gone).
            discard(self._patch(plural, version, namespace, name, body, status=False))
            with self._lock:
                self._no_status_subresource.add(plural)
            log.info("CRD %s.%s has no status subresource; patching status on the object", plural, version)
            return
        discard(self._patch(plural, version, namespace, name, body, status=False))

    def patch(self, plural: str, version: str, namespace: str | None, name: str, body: Any) -> dict[str, Any]:
        """Patch the object itself; returns it as the server stored it (for the cache to observe)."""
        response = self._patch(plural, version, namespace, name, body, status=False)
        try:
            return cast(dict[str, Any], json.loads(response.data))
        finally:
            discard(response)

    def _patch(
        self, plural: str, version: str, namespace: str | None, name: str, body: Any, *, status: bool
    ) -> Any:
        """The raw response (`_preload_content=False`): the caller reads or `discard`s it."""
        content_type = JSON_PATCH if isinstance(body, list) else MERGE_PATCH
        kwargs: dict[str, Any] = {"_content_type": content_type, "_preload_content": False}
        group = SCHEDULING_GROUP
        if namespace is None:
            if status:
                resp = self.api.patch_cluster_custom_object_status(
                    group, version, plural, name, body, **kwargs
                )
            else:
                resp = self.api.patch_cluster_custom_object(group, version, plural, name, body, **kwargs)
        elif status:
            resp = self.api.patch_namespaced_custom_object_status(
                group, version, namespace, plural, name, body, **kwargs
            )
        else:
            resp = self.api.patch_namespaced_custom_object(
                group, version, namespace, plural, name, body, **kwargs
            )
        return resp
