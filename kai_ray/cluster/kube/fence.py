"""The fence: no write reaches the API server from a replica that may no longer be the leader.

Leader election alone does not stop an old leader.  A process paused past its
lease (a long GC, SIGSTOP, an overloaded node) wakes up in the middle of a
cycle still believing it schedules, while the standby has already taken over:
both then bind, evict and write status.  client-go guards against this with
a renew deadline shorter than the lease: a leader that could not renew within
it stops acting at once.  Here that rule sits in the one place every write
passes through, the API client:

- `Leadership` knows until when this process may act: a renewal *sent* at
  time t (monotonic clock) makes it leader until t + renew deadline.  The
  standby can take over only after it has seen the lease unchanged for a
  whole lease duration, which starts no earlier than t; the difference
  (lease duration − renew deadline) is the margin for a write already in
  flight, so writes time out well inside it (`WRITE_TIMEOUT`).
- Past that moment the process is fenced, not finished: an API server outage
  stops renewals as surely as a take-over does.  A later renewal lifts the
  fence, and the elector renews only a lease that no other replica has held
  since its last renewal (see `leader`), so no one else can have acted in
  between.  Only a take-over ends leadership for good.
- `FencedApiClient` refuses every POST/PUT/PATCH/DELETE with `NotLeader`
  once that moment has passed, without sending anything.  The check reads the
  clock, not a flag a thread must set, so a process resumed after SIGSTOP is
  fenced before its first write, whichever thread runs first.

It also gives every call a timeout (the generated client has none by
default), so an unreachable server costs a bounded wait, never a hang.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from kubernetes import client

__all__ = ["READ_TIMEOUT", "WRITE_TIMEOUT", "FencedApiClient", "Leadership", "NotLeader"]

CONNECT_TIMEOUT = 5.0
WRITE_TIMEOUT = (CONNECT_TIMEOUT, 5.0)
"""(connect, read) seconds for a write: well inside the 5 s between renew deadline and lease expiry."""
READ_TIMEOUT = (CONNECT_TIMEOUT, 30.0)
"""(connect, read) seconds for a read that gave none (lists of a big cluster take a while)."""
_WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})


class NotLeader(Exception):
    """A write was refused before it was sent: this process is not (or no longer) the leader."""


class Leadership:
    """Until when this process may act as the scheduler. Thread-safe.

    Without any renewal it is not leader.  A renewal that comes after the deadline
    (an outage longer than it) makes it leader again: the elector renews only a lease
    that no other replica has held since (see `leader`), so nobody else acted in
    between.  `lose` ends leadership for good: another replica took the lease, and a
    process that lost it exits rather than trying to lead again with state it can no
    longer trust.
    """

    def __init__(self, renew_deadline: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.renew_deadline = renew_deadline
        self._clock = clock
        self._valid_until = float("-inf")
        self._lost = False
        self._changed = threading.Condition()

    def is_leader(self) -> bool:
        with self._changed:
            return self._leading()

    def renewed(self, sent_at: float) -> None:
        """A renewal sent at `sent_at` (this clock) succeeded."""
        with self._changed:
            if not self._lost:
                self._valid_until = max(self._valid_until, sent_at + self.renew_deadline)
                self._changed.notify_all()

    def lose(self) -> None:
        with self._changed:
            self._lost = True
            self._valid_until = float("-inf")
            self._changed.notify_all()

    @property
    def lost(self) -> bool:
        with self._changed:
            return self._lost

    def wait_lost(self, timeout: float) -> bool:
        with self._changed:
            return self._changed.wait_for(lambda: self._lost, timeout)

    def wait_leading(self, timeout: float) -> bool:
        """Wait until this process may act again (True), or it lost, or `timeout` passed (False)."""
        with self._changed:
            return self._changed.wait_for(lambda: self._lost or self._leading(), timeout) and not self._lost

    def _leading(self) -> bool:
        return not self._lost and self._clock() < self._valid_until


class FencedApiClient(client.ApiClient):
    """`kubernetes.client.ApiClient` whose writes need `leadership`, and whose calls all time out.

    With `leadership=None` nothing is fenced (a single scheduler, tests); the
    default timeouts still apply.
    """

    def __init__(self, configuration: Any, leadership: Leadership | None = None) -> None:
        super().__init__(configuration)
        self.leadership = leadership

    def call_api(
        self,
        method: str,
        url: str,
        header_params: Any = None,
        body: Any = None,
        post_params: Any = None,
        _request_timeout: Any = None,
    ) -> Any:
        write = method.upper() in _WRITES
        if write and self.leadership is not None and not self.leadership.is_leader():
            raise NotLeader(f"{method} {url.split('?', 1)[0]} refused: this replica is not the leader")
        if _request_timeout is None:
            _request_timeout = WRITE_TIMEOUT if write else READ_TIMEOUT
        return super().call_api(method, url, header_params, body, post_params, _request_timeout)
