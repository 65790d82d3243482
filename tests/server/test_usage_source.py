"""`serve`'s embedded usage source: when it reads, records and writes its history, and what a
failing or refusing API server does to it. The store is an in-memory stand-in for the ConfigMap
(the real one is exercised against a real API server in tests/kube/test_kube_usage.py)."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException
from service_builders import NOW, cluster, gpu_job

from kai_ray.api.config import SchedulerConfig
from kai_ray.api.usage_db import UsageDBConfig, UsageParams
from kai_ray.engine.cycle import open_session
from kai_ray.engine.session import Session
from kai_ray.rpc.api import SchedulerService
from kai_ray.rpc.caller import ANYONE
from kai_ray.rpc.sim_backend import SimBackend
from kai_ray.server.usage_source import EmbeddedUsage

pytestmark = pytest.mark.unit

PARAMS = UsageParams(window_seconds=3600, fetch_interval_seconds=60)


class Store:
    """Holds one history; `failure` makes the next reads and writes raise it."""

    namespace, name = "kai", "kai-scheduler-queue-usage"

    def __init__(self, data: dict[str, Any] | None = None) -> None:
        self.data = data
        self.failure: Exception | None = None
        self.reads = 0
        self.writes = 0

    def read(self) -> dict[str, Any] | None:
        self.reads += 1
        if self.failure is not None:
            raise self.failure
        return self.data

    def write(self, data: dict[str, Any]) -> None:
        if self.failure is not None:
            raise self.failure
        self.writes += 1
        self.data = data


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def session_with_gpus(now: float = NOW) -> Session:
    """A session of the service's small cluster, one 4-GPU job of team-a running."""
    backend = SimBackend(cluster(), clock=lambda: now)
    try:
        SchedulerService(backend).submit_workload(gpu_job("ns", "train", "team-a", 1, 4), ANYONE)
        return backend.run_cycle().session
    finally:
        backend.close()


def source(store: Store, clock: Clock) -> EmbeddedUsage:
    return EmbeddedUsage(PARAMS, store, clock)  # type: ignore[arg-type]


def test_the_history_is_read_once_and_written_every_fetch_interval() -> None:
    store, clock = Store(), Clock()
    usage = source(store, clock)
    session = session_with_gpus()
    assert usage.usage(NOW) == {}
    usage.after_cycle(session)
    assert store.writes == 1
    clock.now = 30
    usage.usage(NOW + 30)
    usage.after_cycle(session_with_gpus(NOW + 30))
    assert (store.reads, store.writes) == (1, 1)
    clock.now = 61
    usage.after_cycle(session_with_gpus(NOW + 61))
    assert store.writes == 2
    assert usage.usage(NOW + 61)["team-a"]["gpu"] == pytest.approx(4 / 16)


def test_a_restart_continues_from_the_stored_history() -> None:
    store = Store()
    first = source(store, Clock())
    first.usage(NOW)
    first.after_cycle(session_with_gpus())
    second = source(store, Clock())
    assert second.usage(NOW + 600)["team-a"]["gpu"] == pytest.approx(4 / 16)


def test_an_unreadable_history_is_not_overwritten_until_read(caplog: pytest.LogCaptureFixture) -> None:
    store, clock = Store({"version": 1, "resolution": 60.0, "runs": []}), Clock()
    store.failure = ApiException(status=500, reason="Internal Server Error")
    usage = source(store, clock)
    with caplog.at_level(logging.WARNING):
        assert usage.usage(NOW) == {}
        usage.after_cycle(session_with_gpus())
    assert store.writes == 0 and not usage.loaded
    assert [r.getMessage() for r in caplog.records] == [
        "usage history kai/kai-scheduler-queue-usage not read, retried next cycle:"
        " HTTP 500 Internal Server Error"
    ]
    store.failure = None
    usage.usage(NOW + 1)
    assert usage.loaded


def test_a_refused_read_records_in_memory_and_a_failed_write_is_one_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store, clock = Store(), Clock()
    store.failure = ApiException(status=403, reason="Forbidden")
    usage = source(store, clock)
    with caplog.at_level(logging.WARNING):
        usage.usage(NOW)
        usage.after_cycle(session_with_gpus())
    assert usage.usage(NOW + 60)["team-a"]["gpu"] == pytest.approx(4 / 16)
    assert [r.getMessage() for r in caplog.records] == [
        "usage history kai/kai-scheduler-queue-usage cannot be read (HTTP 403 Forbidden):"
        " recording in memory only",
        "usage history kai/kai-scheduler-queue-usage not written, retried in 60s: HTTP 403 Forbidden",
    ]


def test_the_simulated_backend_feeds_its_own_cycles() -> None:
    config = SchedulerConfig(usage_db=UsageDBConfig(params=PARAMS))
    clock = Clock()
    clock.now = NOW
    backend = SimBackend(cluster(), config, clock=clock)
    try:
        SchedulerService(backend).submit_workload(gpu_job("ns", "train", "team-a", 1, 4), ANYONE)
        backend.run_cycle()
        clock.now += 60
        backend.run_cycle()
        clock.now += 60
        assert backend.run_cycle().session.queues.usage["team-a"]["gpu"] == pytest.approx(4 / 16)
    finally:
        backend.close()


def test_without_usage_db_a_session_has_no_usage() -> None:
    session = session_with_gpus()
    assert open_session(session.snapshot, session.config).queues.usage == {}
