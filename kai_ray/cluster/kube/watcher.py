"""One kind's list+watch loop: the thread that keeps a `ClusterCache` store in step with the server.

It lists the kind page by page, then follows a watch from the list's resourceVersion; a watch
that ends resumes from the last resourceVersion, a lost connection backs off, `410 Gone`
re-lists, and a kind the server does not serve is retried slowly (see `cache`'s docstring for
why each).  It knows the cache only through what it is handed: the list call, the stop event,
and the two ways to write (replace the store after a list, apply one event).
"""

from __future__ import annotations

import json
import logging
import random
import threading
from collections.abc import Callable, Mapping
from typing import Any, Final, cast

from kubernetes.client.exceptions import ApiException
from kubernetes.watch.watch import iter_resp_lines

from kai_ray.cluster.kube.resources import Resource, normalise

__all__ = ["WATCH_EVENT_TYPES", "Watcher"]

log = logging.getLogger(__name__)

_LIST_PAGE = 500
_CONNECT_TIMEOUT = 10.0
_LIST_READ_TIMEOUT = 60.0
_BACKOFF_START = 0.1
_BACKOFF_MAX = 5.0
_MISSING_KIND_RETRY = 30.0
WATCH_EVENT_TYPES: Final = ("ADDED", "MODIFIED", "DELETED")


class _Expired(Exception):
    """The server no longer has the resourceVersion we watch from (410 Gone): re-list."""


class _MissingKind(Exception):
    """The kind is not served (its CRD is not installed)."""


class Watcher:
    """Keeps one kind's store in step with the server; its `run` is the thread body."""

    def __init__(
        self,
        resource: Resource,
        call: Callable[..., Any],
        selector: Mapping[str, str],
        stop: threading.Event,
        watch_timeout: float,
        replace: Callable[[str, list[dict[str, Any]], bool], None],
        apply_event: Callable[[str, str, dict[str, Any]], bool],
    ) -> None:
        self._resource = resource
        self._call = call
        self._selector = dict(selector)
        self._stop = stop
        self._watch_timeout = watch_timeout
        self._replace = replace
        self._apply_event = apply_event
        self._rv: str | None = None
        self._listed = False
        self._response: Any = None
        self._restart_from: str | None = None
        self._lock = threading.Lock()

    def run(self) -> None:
        delay = _BACKOFF_START
        stop = self._stop
        while not stop.is_set():
            try:
                with self._lock:
                    if self._restart_from is not None:
                        self._rv, self._restart_from = self._restart_from, None
                if self._rv is None:
                    self._list()
                if self._watch():
                    delay = _BACKOFF_START
            except _Expired as error:
                log.info("%s: %s; re-listing", self._resource.key, error)
                self._rv = None
            except _MissingKind:
                log.warning("%s is not served by the API server; retrying", self._resource.key)
                stop.wait(_MISSING_KIND_RETRY)
            except Exception as error:  # connection loss, 5xx, 403 ...: never end the thread
                if stop.is_set():
                    break
                if self._interrupted():
                    continue
                log.warning("%s watch failed (%s); retrying in %.1fs", self._resource.key, error, delay)
                stop.wait(delay * (0.5 + random.random()))
                delay = min(delay * 2, _BACKOFF_MAX)

    def interrupt(self) -> None:
        """Break a blocked read of the current watch (on stop or a requested restart).

        Callers set the stop event or `_restart_from` first; `_watch` registers its
        response under the same lock and checks both, so no watch slips through.
        """
        with self._lock:
            response = self._response
        if response is None:
            return
        shutdown = getattr(response, "shutdown", None)  # urllib3 >= 2.3 unblocks a reading thread
        try:
            if shutdown is not None:
                shutdown()
            else:
                response.close()
        except Exception as error:  # already closed or torn down: nothing left to interrupt
            log.debug("%s: interrupt: %s", self._resource.key, error)

    def restart_from(self, resource_version: str) -> None:
        with self._lock:
            self._restart_from = resource_version
        self.interrupt()

    def _interrupted(self) -> bool:
        with self._lock:
            return self._restart_from is not None

    def _list(self) -> None:
        """Read every object page by page and replace the store; the watch starts at the list's RV."""
        items: list[dict[str, Any]] = []
        token: str | None = None
        while True:
            try:
                response = self._call(
                    **self._selector,
                    limit=_LIST_PAGE,
                    _continue=token,
                    _preload_content=False,
                    _request_timeout=(_CONNECT_TIMEOUT, _LIST_READ_TIMEOUT),
                )
            except ApiException as error:
                if error.status == 404:
                    self._replace(self._resource.key, [], False)
                    raise _MissingKind from error
                raise
            try:
                page = json.loads(response.data)
            finally:
                response.release_conn()
            items.extend(normalise(item, self._resource) for item in page.get("items") or [])
            meta = page.get("metadata") or {}
            token = meta.get("continue") or None
            if token is None:
                break
        self._replace(self._resource.key, items, self._listed)
        self._listed = True
        self._rv = str(meta.get("resourceVersion") or "")

    def _watch(self) -> bool:
        """Follow events from `self._rv` until the server ends the watch; True if it ended normally."""
        timeout = int(self._watch_timeout * (1 + random.random()))
        try:
            response = self._call(
                **self._selector,
                watch=True,
                resource_version=self._rv,
                allow_watch_bookmarks=True,
                timeout_seconds=timeout,
                _preload_content=False,
                _request_timeout=(_CONNECT_TIMEOUT, timeout + 15),
            )
        except ApiException as error:
            if error.status == 410:
                raise _Expired(f"watch answered 410: {error.reason}") from error
            raise
        with self._lock:
            abandoned = self._stop.is_set() or self._restart_from is not None
            self._response = None if abandoned else response
        try:
            if abandoned:
                return False
            for line in cast(Any, iter_resp_lines)(response):  # untyped helper of the client
                if self._stop.is_set() or self._interrupted():
                    return False
                if line:
                    self._handle(json.loads(line))
        finally:
            with self._lock:
                self._response = None
            response.close()
            response.release_conn()
        return True

    def _handle(self, event: Mapping[str, Any]) -> None:
        kind, obj = event.get("type"), event.get("object") or {}
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise _Expired(str(obj.get("message") or "resource version expired"))
            raise ApiException(status=obj.get("code"), reason=f"{obj.get('reason')}: {obj.get('message')}")
        rv = (obj.get("metadata") or {}).get("resourceVersion")
        if kind in WATCH_EVENT_TYPES:
            self._apply_event(str(kind), self._resource.key, obj)
        if rv:
            self._rv = str(rv)
