"""Events about our objects, written as client-go's recorder writes them: `ObjectRef`, `EventWriter`.

An Event names what it is about (`ObjectRef`), and the writer either sends it at once or queues
it for one background thread, deduplicating against the last Event sent for the same object
and counting what a full queue drops (the metric `kai_ray_events_dropped_total`).
"""

from __future__ import annotations

import contextlib
import logging
import queue
import secrets
import threading
import time
from collections.abc import Container, Mapping
from dataclasses import dataclass
from typing import Any

from kubernetes import client
from kubernetes.client import ApiClient

from kai_ray.api.constants import (
    PODGROUP_API_VERSION,
    SCHEDULER_NAME,
)
from kai_ray.cluster.kube.calls import api_error_message, discard, now_utc, rfc3339
from kai_ray.cluster.kube.fence import NotLeader

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ObjectRef:
    """What an Event is about.  ``uid`` makes it show in ``kubectl describe``; it may be empty."""

    kind: str
    namespace: str
    name: str
    uid: str = ""
    api_version: str = "v1"

    @classmethod
    def pod(cls, namespace: str, name: str, uid: str = "") -> ObjectRef:
        return cls("Pod", namespace, name, uid, "v1")

    @classmethod
    def podgroup(cls, namespace: str, name: str, uid: str = "") -> ObjectRef:
        return cls("PodGroup", namespace, name, uid, PODGROUP_API_VERSION)

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"


@dataclass(frozen=True)
class _QueuedEvent:
    key: tuple[str, str, str]
    value: tuple[str, str, str]
    namespace: str
    event: Mapping[str, Any]


class EventWriter:
    """Writes core/v1 Events the way client-go's recorder does, minus its aggregation.

    ``dedupe=True`` on `record` suppresses an Event identical (type, reason, message) to the
    last one sent for the same object: the scheduler re-explains every pending job every
    second, and an Event per second per job would flood etcd.  Memory is per object and
    bounded by the number of objects seen; `forget` drops objects that are gone.

    ``background=True`` makes `record` queue the Event and return at once; one writer
    thread sends the queue in order, as client-go's broadcaster does for KAI's scheduler
    and binder.  Events are then best effort, as in Kubernetes: a failed write is logged
    (and forgotten by dedupe, so the next identical `record` sends it again), and beyond
    ``max_queued`` waiting Events new ones are dropped and counted in ``dropped``.  A burst
    of binds thus never waits for its Events, which matters most when the API server is
    the bottleneck.  `flush` waits for the queue; `close` flushes and stops the writer.
    """

    def __init__(
        self,
        api: ApiClient,
        *,
        component: str = SCHEDULER_NAME,
        background: bool = False,
        max_queued: int = 20_000,
    ) -> None:
        self.core = client.CoreV1Api(api)
        self.component = component
        self.background = background
        self.dropped = 0
        self._last: dict[tuple[str, str, str], tuple[str, str, str]] = {}
        self._lock = threading.Lock()
        self._queue: queue.Queue[_QueuedEvent | None] = queue.Queue(maxsize=max_queued)
        self._writer: threading.Thread | None = None

    def record(
        self,
        ref: ObjectRef,
        event_type: str,
        reason: str,
        message: str,
        *,
        annotations: Mapping[str, str] | None = None,
        dedupe: bool = False,
    ) -> bool:
        """Create the Event; False when it was a suppressed duplicate.

        Synchronous writers let API errors propagate.  A background writer returns True once
        the Event is queued (False if the queue is full and it was dropped) and logs failures.
        """
        key = (ref.kind, ref.namespace, ref.name)
        value = (event_type, reason, message)
        if dedupe:
            with self._lock:
                if self._last.get(key) == value:
                    return False
        now = rfc3339(now_utc())
        involved = {
            "apiVersion": ref.api_version,
            "kind": ref.kind,
            "name": ref.name,
            "namespace": ref.namespace,
        }
        if ref.uid:
            involved["uid"] = ref.uid
        metadata: dict[str, Any] = {
            # client-go's naming, <object>.<hex nanoseconds>, plus a random tail because
            # several Events about one object can be written in the same instant here.
            "name": f"{ref.name[:200]}.{time.time_ns():x}{secrets.token_hex(2)}",
            "namespace": ref.namespace,
        }
        if annotations:
            metadata["annotations"] = dict(annotations)
        # Wire form, not a CoreV1Event model: the client's model round trip costs more CPU than
        # the request itself, and the scheduler writes one or two Events per pod it places.
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": metadata,
            "involvedObject": involved,
            "reason": reason,
            "message": message[:1024],  # the API server caps Event messages; KAI's are short too
            "type": event_type,
            "source": {"component": self.component},
            "reportingComponent": self.component,
            "reportingInstance": self.component,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        if not self.background:
            self._send(ref.namespace, event)
            with self._lock:
                self._last[key] = value
            return True
        with self._lock:
            self._last[key] = value
            if self._writer is None or not self._writer.is_alive():
                self._writer = threading.Thread(target=self._write_queued, name="kai-events", daemon=True)
                self._writer.start()
        try:
            self._queue.put_nowait(_QueuedEvent(key, value, ref.namespace, event))
        except queue.Full:
            with self._lock:
                self.dropped += 1
                if self._last.get(key) == value:
                    del self._last[key]
            log.warning(
                "event queue full; dropped %s Event %s on %s (%d dropped so far)",
                event_type,
                reason,
                ref,
                self.dropped,
            )
            return False
        return True

    def is_duplicate(self, ref: ObjectRef, event_type: str, reason: str, message: str) -> bool:
        """Whether `record(..., dedupe=True)` would suppress this Event as the last one sent."""
        with self._lock:
            return self._last.get((ref.kind, ref.namespace, ref.name)) == (event_type, reason, message)

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every queued Event was written (or failed); False if `timeout` passed first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._queue.all_tasks_done:
            while self._queue.unfinished_tasks:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._queue.all_tasks_done.wait(left)
        return True

    def close(self, timeout: float = 10.0) -> bool:
        """Flush (at most `timeout` seconds) and stop the writer; True when nothing was left unsent."""
        flushed = self.flush(timeout)
        with self._lock:
            writer, self._writer = self._writer, None
        if writer is not None and writer.is_alive():
            with contextlib.suppress(queue.Full):
                self._queue.put_nowait(None)
            writer.join(max(0.0, timeout))
        return flushed

    def _send(self, namespace: str, event: Mapping[str, Any]) -> None:
        core: Any = self.core  # the generated signature asks for a model; a dict is sent as is
        discard(core.create_namespaced_event(namespace, dict(event), _preload_content=False))

    def _write_queued(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is None:
                    return
                try:
                    self._send(item.namespace, item.event)
                except NotLeader:
                    # Fenced (an outage, or another replica leads now): dropped quietly, and
                    # forgotten so that a replica that renews its lease says it again.
                    self.dropped += 1
                    self._forget_sent(item)
                except Exception as exc:  # best effort, as in Kubernetes
                    log.warning(
                        "could not write Event %s: %s", item.event.get("reason"), api_error_message(exc)
                    )
                    self._forget_sent(item)
            finally:
                self._queue.task_done()

    def _forget_sent(self, item: _QueuedEvent) -> None:
        """An Event that was not written is not the last one sent: the next identical one goes."""
        with self._lock:
            if self._last.get(item.key) == item.value:
                del self._last[item.key]

    def forget(self, alive: Container[tuple[str, str, str]]) -> None:
        """Drop dedupe memory for objects not in ``alive`` ((kind, namespace, name) triples).

        The scheduler calls this every cycle with what the cache holds, so the memory is
        bounded by the objects that exist, not by every object ever seen.
        """
        with self._lock:
            for key in [k for k in self._last if k not in alive]:
                del self._last[key]

    def tracked(self) -> int:
        with self._lock:
            return len(self._last)
