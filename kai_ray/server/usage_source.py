"""Queue usage for `serve`'s cycles (spec §7): recorded by the scheduler itself, or asked of Prometheus.

The loop asks a source for usage before each session and tells it about each finished session.
Neither source can stop scheduling: an unreachable API server or Prometheus is one log line, and
the cycle goes on with the last usage known (none at all before the first answer, which is KAI's
"no data: U = 0").
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

import urllib3
from kubernetes.client.exceptions import ApiException

from kai_ray.api.config import SchedulerConfig
from kai_ray.api.usage_db import UsageParams
from kai_ray.cluster.kube.fence import NotLeader
from kai_ray.cluster.kube.usage_store import UsageStore, config_map_name
from kai_ray.engine.session import Session
from kai_ray.engine.usage import UsageRecorder
from kai_ray.fairshare.usage import QueueUsage
from kai_ray.server.prometheus_usage import PrometheusError, PrometheusUsageClient

log = logging.getLogger(__name__)

_STORE_FAILURES = (ApiException, urllib3.exceptions.HTTPError, OSError, ValueError)


class UsageSource(Protocol):
    def usage(self, now: float) -> QueueUsage:
        """Normalised usage per queue and resource for a session at `now` (Unix seconds)."""
        ...

    def after_cycle(self, session: Session) -> None:
        """The finished session (the leader's; never called on a standby)."""
        ...

    def close(self) -> None:
        """The loop is stopping: keep what must be kept, stop what runs."""
        ...


def usage_source(
    config: SchedulerConfig, api: Any, namespace: str, scheduler_name: str
) -> UsageSource | None:
    """The source `config.usage_db` names; None when time-based fair share is off."""
    usage_db = config.usage_db
    if usage_db is None:
        return None
    if usage_db.client_type == "prometheus":
        address = usage_db.connection_string or os.environ.get(usage_db.connection_string_env_var, "")
        return PrometheusUsage(PrometheusUsageClient(address, usage_db.params), usage_db.params)
    return EmbeddedUsage(usage_db.params, UsageStore(api, namespace, config_map_name(scheduler_name)))


class EmbeddedUsage:
    """Records every cycle's allocations and writes the history to its ConfigMap every fetchInterval.

    The history is read once this process leads (its first cycle), not at start-up: a standby's
    copy would miss what the leader recorded meanwhile. Until that read succeeds nothing is recorded,
    so a history that could not be read is never overwritten by a shorter one; only a refusal
    (no right to read it) starts a history in memory, since no retry can succeed then.
    """

    def __init__(
        self, params: UsageParams, store: UsageStore, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.recorder = UsageRecorder(params)
        self._store = store
        self._clock = clock
        self._every = params.fetch_interval_seconds
        self._loaded = False
        self._next_write = 0.0

    @property
    def loaded(self) -> bool:
        return self._loaded

    def usage(self, now: float) -> QueueUsage:
        if not self._loaded:
            self._load()
        return self.recorder.usage(now)

    def after_cycle(self, session: Session) -> None:
        if not self._loaded:
            return
        self.recorder.record(session)
        if self._clock() >= self._next_write:
            self._write()

    def close(self) -> None:
        if not self._loaded:
            return
        try:
            self._write()
        except NotLeader:
            log.info("usage history not written at exit: this replica no longer leads")

    def _load(self) -> None:
        where = f"{self._store.namespace}/{self._store.name}"
        try:
            data = self._store.read()
        except ApiException as error:
            if error.status != 403:
                log.warning("usage history %s not read, retried next cycle: %s", where, _reason(error))
                return
            log.warning(
                "usage history %s cannot be read (%s): recording in memory only", where, _reason(error)
            )
            data = None
        except (urllib3.exceptions.HTTPError, OSError) as error:
            log.warning("usage history %s not read, retried next cycle: %s", where, _reason(error))
            return
        except ValueError as error:
            log.warning("usage history %s unreadable, recording anew: %s", where, error)
            data = None
        if data is not None:
            try:
                self.recorder.history.load(data)
            except (ValueError, KeyError, TypeError) as error:
                log.warning("usage history %s not used, recording anew: %s", where, error)
        self._loaded = True
        log.info("usage history %s: %d run(s) recorded before", where, self.recorder.history.run_count)

    def _write(self) -> None:
        self._next_write = self._clock() + self._every
        try:
            self._store.write(self.recorder.history.to_dict())
        except _STORE_FAILURES as error:
            where = f"{self._store.namespace}/{self._store.name}"
            log.warning(
                "usage history %s not written, retried in %gs: %s", where, self._every, _reason(error)
            )


class PrometheusUsage:
    """Fetches usage on its own thread every fetchInterval; cycles read the last good answer.

    The first cycle waits up to waitTimeout for a first answer (KAI's start-up wait); later ones
    never wait. An answer older than stalenessPeriod is still used, with a warning.
    """

    def __init__(
        self, client: PrometheusUsageClient, params: UsageParams, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._client = client
        self._params = params
        self._clock = clock
        self._lock = threading.Lock()
        self._latest: QueueUsage = {}
        self._fetched_at: float | None = None
        self._first = threading.Event()
        self._stop = threading.Event()
        self._warned_stale = False
        self._thread = threading.Thread(target=self._fetch_loop, name="prometheus-usage", daemon=True)
        self._thread.start()

    def usage(self, now: float) -> QueueUsage:
        self._first.wait(self._params.wait_timeout_seconds)
        with self._lock:
            latest, fetched_at = self._latest, self._fetched_at
        stale = fetched_at is not None and self._clock() - fetched_at > self._params.staleness_seconds
        if stale and not self._warned_stale and fetched_at is not None:
            age = self._clock() - fetched_at
            log.warning("Prometheus usage is stale (last fetched %.0fs ago); still in use", age)
            self._warned_stale = True
        return latest

    def after_cycle(self, session: Session) -> None:
        """Prometheus scrapes the allocation metrics the loop exports; nothing to record here."""

    def close(self) -> None:
        self._stop.set()
        self._thread.join(self._params.query_timeout_seconds + 1)

    def fetch_once(self) -> bool:
        """One fetch; True when it brought an answer (a failure is one log line)."""
        try:
            usage = self._client.fetch(time.time())
        except PrometheusError as error:
            log.warning("Prometheus usage not fetched, the last known is kept: %s", error)
            self._first.set()
            return False
        with self._lock:
            self._latest, self._fetched_at = usage, self._clock()
        self._warned_stale = False
        self._first.set()
        return True

    def _fetch_loop(self) -> None:
        while not self._stop.is_set():
            self.fetch_once()
            self._stop.wait(self._params.fetch_interval_seconds)


def _reason(error: BaseException) -> str:
    if isinstance(error, ApiException):
        return f"HTTP {error.status} {error.reason}"
    return f"{type(error).__name__}: {error}"
