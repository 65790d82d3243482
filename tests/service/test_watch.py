"""WatchWorkloads: ADDED for what exists, changes as they happen, resume, OUT_OF_RANGE."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from service_builders import gpu_job

from kai_ray.rpc.api import SchedulerService
from kai_ray.rpc.caller import ANYONE, Caller
from kai_ray.rpc.errors import ErrorCode, ServiceError
from kai_ray.rpc.sim_backend import SimBackend
from kai_ray.v1 import scheduler_pb2 as pb

pytestmark = pytest.mark.unit


def take(stream: Iterator[pb.WorkloadEvent], count: int) -> list[pb.WorkloadEvent]:
    return [next(stream) for _ in range(count)]


def summary(events: list[pb.WorkloadEvent]) -> list[tuple[str, str, str]]:
    return [
        (pb.WorkloadEvent.Type.Name(e.type), e.workload.id, pb.WorkloadState.Name(e.workload.state))
        for e in events
    ]


def test_watch_from_empty_token_then_resume(service: SchedulerService, backend: SimBackend) -> None:
    service.submit_workload(gpu_job("ml", "first", "team-a", 1, 1), ANYONE)
    stop = threading.Event()
    stream = service.watch_workloads(pb.WatchWorkloadsRequest(namespace="ml"), ANYONE, stop)
    assert summary(take(stream, 1)) == [("ADDED", "ml/first", "PENDING")]
    service.submit_workload(gpu_job("web", "hidden", "team-a", 1, 1), ANYONE)
    service.submit_workload(gpu_job("ml", "second", "team-a", 1, 1), ANYONE)
    backend.run_cycle()
    events = take(stream, 3)
    assert summary(events) == [
        ("ADDED", "ml/second", "PENDING"),
        ("MODIFIED", "ml/first", "RUNNING"),
        ("MODIFIED", "ml/second", "RUNNING"),
    ]
    token = events[0].resume_token
    service.cancel_workload(pb.CancelWorkloadRequest(id="ml/first"), ANYONE)
    resumed = service.watch_workloads(
        pb.WatchWorkloadsRequest(namespace="ml", resume_token=token), ANYONE, stop
    )
    assert summary(take(resumed, 3)) == [
        ("MODIFIED", "ml/first", "RUNNING"),
        ("MODIFIED", "ml/second", "RUNNING"),
        ("MODIFIED", "ml/first", "CANCELLED"),
    ]
    stop.set()
    service.events.wake()
    assert list(resumed) == []


def test_only_the_last_opening_event_carries_a_token(service: SchedulerService) -> None:
    for name in ("a", "b", "c"):
        service.submit_workload(gpu_job("ml", name, "team-a", 1, 1), ANYONE)
    stop = threading.Event()
    opening = take(service.watch_workloads(pb.WatchWorkloadsRequest(), ANYONE, stop), 3)
    assert [e.workload.id for e in opening] == ["ml/a", "ml/b", "ml/c"]
    # A client cut off after "ml/a" holds no token, so it must list again rather than resume
    # past "ml/b" and "ml/c", which it never received.
    assert [bool(e.resume_token) for e in opening] == [False, False, True]
    service.submit_workload(gpu_job("ml", "d", "team-a", 1, 1), ANYONE)
    resumed = service.watch_workloads(
        pb.WatchWorkloadsRequest(resume_token=opening[-1].resume_token), ANYONE, stop
    )
    assert summary(take(resumed, 1)) == [("ADDED", "ml/d", "PENDING")]
    stop.set()


def test_a_blocked_watch_ends_when_stopped(service: SchedulerService) -> None:
    stop = threading.Event()
    stream = service.watch_workloads(pb.WatchWorkloadsRequest(), ANYONE, stop)
    collected: list[pb.WorkloadEvent] = []
    reader = threading.Thread(target=lambda: collected.extend(stream))
    reader.start()
    service.submit_workload(gpu_job("ml", "one", "team-a", 1, 1), ANYONE)
    stop.set()
    service.events.wake()
    reader.join(timeout=10)
    assert not reader.is_alive()


def test_old_and_foreign_tokens_are_out_of_range(backend: SimBackend) -> None:
    service = SchedulerService(backend, history=3)
    first = service.submit_workload(gpu_job("ml", "a", "team-a", 1, 1), ANYONE)
    del first
    stream = service.watch_workloads(pb.WatchWorkloadsRequest(), ANYONE, threading.Event())
    token = next(stream).resume_token
    for name in ("b", "c", "d", "e"):
        service.submit_workload(gpu_job("ml", name, "team-a", 1, 1), ANYONE)
    with pytest.raises(ServiceError) as old:
        service.watch_workloads(pb.WatchWorkloadsRequest(resume_token=token), ANYONE, threading.Event())
    assert old.value.code == ErrorCode.OUT_OF_RANGE
    restarted = SchedulerService(backend)
    with pytest.raises(ServiceError) as foreign:
        restarted.watch_workloads(pb.WatchWorkloadsRequest(resume_token=token), ANYONE, threading.Event())
    assert foreign.value.code == ErrorCode.OUT_OF_RANGE
    with pytest.raises(ServiceError) as garbage:
        service.watch_workloads(pb.WatchWorkloadsRequest(resume_token="garbage"), ANYONE, threading.Event())
    assert garbage.value.code == ErrorCode.INVALID_ARGUMENT and garbage.value.field == "resume_token"


def test_watch_shows_only_the_callers_namespaces(service: SchedulerService) -> None:
    service.submit_workload(gpu_job("web", "theirs", "team-a", 1, 1), ANYONE)
    service.submit_workload(gpu_job("ml", "mine", "team-a", 1, 1), ANYONE)
    stream = service.watch_workloads(pb.WatchWorkloadsRequest(), Caller(frozenset({"ml"})), threading.Event())
    assert summary(take(stream, 1)) == [("ADDED", "ml/mine", "PENDING")]
