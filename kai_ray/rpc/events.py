"""The bounded history of workload events that `WatchWorkloads` streams and resumes from.

A resume token is `EPOCH-SEQ`: SEQ numbers events of this server process from 1, EPOCH is drawn
at start-up.  A token of another epoch comes from before a restart: the embedded simulated
cluster keeps no history across restarts (a `--sim DIR` server replays its manifests, but the
workloads submitted since are gone), so such a token, like one older than the history, fails
with OUT_OF_RANGE and the client lists and watches again, as with Kubernetes' 410 Gone.
"""

from __future__ import annotations

import secrets
import threading
from collections import deque
from collections.abc import Iterator

from kai_ray.rpc.errors import ErrorCode, ServiceError
from kai_ray.v1 import scheduler_pb2 as pb

__all__ = ["DEFAULT_HISTORY", "EventLog"]

DEFAULT_HISTORY = 10_000


class EventLog:
    """Append-only, bounded, thread-safe; waiters are woken on every append."""

    def __init__(self, capacity: int = DEFAULT_HISTORY, epoch: str | None = None) -> None:
        self.epoch = epoch or secrets.token_hex(4)
        self._capacity = capacity
        self._events: deque[tuple[int, pb.WorkloadEvent]] = deque()
        self._seq = 0
        self._cond = threading.Condition()

    @property
    def last_seq(self) -> int:
        with self._cond:
            return self._seq

    def token(self, seq: int) -> str:
        return f"{self.epoch}-{seq}"

    def append(self, kind: pb.WorkloadEvent.Type, workload: pb.Workload) -> int:
        with self._cond:
            self._seq += 1
            event = pb.WorkloadEvent(type=kind, resume_token=self.token(self._seq))
            event.workload.CopyFrom(workload)
            self._events.append((self._seq, event))
            while len(self._events) > self._capacity:
                self._events.popleft()
            self._cond.notify_all()
            return self._seq

    def parse(self, token: str) -> int:
        """The sequence number a token resumes after; OUT_OF_RANGE when it cannot be bridged."""
        epoch, _, number = token.rpartition("-")
        if not epoch or not number.isdecimal():
            raise ServiceError(ErrorCode.INVALID_ARGUMENT, f"not a resume token: {token!r}", "resume_token")
        if epoch != self.epoch:
            raise ServiceError(
                ErrorCode.OUT_OF_RANGE,
                "the token is from before a server restart; list the workloads and watch again",
                "resume_token",
            )
        seq = int(number)
        with self._cond:
            oldest = self._events[0][0] if self._events else self._seq + 1
            if seq > self._seq or seq < oldest - 1:
                raise ServiceError(
                    ErrorCode.OUT_OF_RANGE,
                    f"the server no longer has events after {seq} (it keeps the last {self._capacity}); "
                    "list the workloads and watch again",
                    "resume_token",
                )
        return seq

    def after(self, seq: int) -> list[tuple[int, pb.WorkloadEvent]]:
        """Events numbered above `seq`; OUT_OF_RANGE if some of them were dropped meanwhile."""
        with self._cond:
            if self._events and self._events[0][0] > seq + 1:
                raise ServiceError(
                    ErrorCode.OUT_OF_RANGE, "the watcher fell behind the event history", "resume_token"
                )
            if seq >= self._seq:
                return []
            start = max(0, len(self._events) - (self._seq - seq))
            return [self._events[i] for i in range(start, len(self._events))]

    def wait(self, seq: int, timeout: float) -> bool:
        """Wait until an event numbered above `seq` exists, or the timeout; True if one does."""
        with self._cond:
            return self._cond.wait_for(lambda: self._seq > seq, timeout)

    def wake(self) -> None:
        """Wake every waiter (a watcher whose stop event was set checks it at once)."""
        with self._cond:
            self._cond.notify_all()

    def __iter__(self) -> Iterator[tuple[int, pb.WorkloadEvent]]:
        with self._cond:
            return iter(list(self._events))
