"""A watch that survives a server restart (`WorkloadFollower`, `kai-ray watch`), over a real socket.

The real service on the simulated cluster serves three workloads; a follower (and, as a process,
`kai-ray watch`) reads its opening listing.  The server stops; while it is down, one workload is
deleted (so another gets its GPUs and starts) and one is submitted; a new server process (a new
service on the same cluster, with its own resume tokens) comes up on the same port.  The follower
must deliver exactly what changed -- DELETED, MODIFIED, ADDED, nothing for the unchanged one --
then the new server's live events.  A refusal (PERMISSION_DENIED) on reconnecting is not retried.

Nothing here sleeps to synchronise: waits are on conditions, each with a deadline.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from fake_scheduler import FakeService
from service_builders import gpu_job

from kai_ray.rpc.api import SchedulerService
from kai_ray.rpc.auth import TokenTable
from kai_ray.rpc.caller import ANYONE, Caller
from kai_ray.rpc.client import KaiRayClient, RemoteError, WorkloadFollower
from kai_ray.rpc.sim_backend import SimBackend
from kai_ray.rpc.transport import RunningServer, start_grpc_server
from kai_ray.v1 import scheduler_pb2 as pb

pytestmark = pytest.mark.grpc

KAI_RAY = Path(sys.executable).parent / "kai-ray"
QUEUE = "default-queue"
WAIT = 60.0
"""Deadline of every wait on a condition (seconds); generous, as CI machines are slow and a
reconnect waits out gRPC's own backoff too."""

OPENING = [("ADDED", "ml/a", "RUNNING"), ("ADDED", "ml/b", "RUNNING"), ("ADDED", "ml/c", "PENDING")]
MISSED = [("DELETED", "ml/b", "RUNNING"), ("MODIFIED", "ml/c", "RUNNING"), ("ADDED", "ml/d", "RUNNING")]
"""What the follower must report of the restart: b gone (as it was last seen), c started in its
place, d new; nothing for a, which the new server re-derived but which did not change."""


def summary(event: pb.WorkloadEvent) -> tuple[str, str, str]:
    return (
        pb.WorkloadEvent.Type.Name(event.type),
        event.workload.id,
        pb.WorkloadState.Name(event.workload.state),
    )


class Collected:
    """What a reader thread appends to, and a wait on it with a deadline."""

    def __init__(self) -> None:
        self.items: list[Any] = []
        self.ended = False
        self.cond = threading.Condition()

    def add(self, item: Any) -> None:
        with self.cond:
            self.items.append(item)
            self.cond.notify_all()

    def end(self) -> None:
        with self.cond:
            self.ended = True
            self.cond.notify_all()

    def wait_for(self, predicate: Callable[[list[Any]], bool], what: str) -> list[Any]:
        """The items once ``predicate`` holds of them; fails if the reader ended first or at WAIT."""
        with self.cond:
            if not self.cond.wait_for(lambda: predicate(self.items) or self.ended, WAIT):
                raise AssertionError(f"timed out after {WAIT} s waiting for {what}; got {self.items}")
            assert predicate(self.items), f"the reader ended before {what}; got {self.items}"
            return list(self.items)

    def wait_ended(self, what: str) -> None:
        with self.cond:
            assert self.cond.wait_for(lambda: self.ended, WAIT), (
                f"timed out after {WAIT} s waiting for {what}"
            )


@dataclass
class Following:
    """A follower read by its own thread: what it yielded, and how it ended."""

    follower: WorkloadFollower
    stop: threading.Event
    events: Collected = field(default_factory=Collected)
    error: BaseException | None = None

    def start(self) -> Following:
        threading.Thread(target=self._read, name="test-follow", daemon=True).start()
        return self

    def _read(self) -> None:
        try:
            for event in self.follower:
                self.events.add(event)
        except BaseException as error:  # recorded for the test to look at
            self.error = error
        finally:
            self.events.end()


class WatchProcess:
    """`kai-ray watch --output json ...` as a user runs it; its events as parsed JSON lines."""

    def __init__(self, tmp_path: Path, *args: str) -> None:
        self.stderr = tmp_path / "watch.stderr"
        with self.stderr.open("w") as stderr:
            self.proc = subprocess.Popen(
                [str(KAI_RAY), "watch", "--output", "json", *args],
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
                # A hang is ended with SIGABRT, on which faulthandler writes every thread's stack.
                env={**os.environ, "PYTHONFAULTHANDLER": "1"},
            )
        self.events = Collected()
        threading.Thread(target=self._read, name="test-watch-stdout", daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.events.add(json.loads(line))
        self.events.end()

    def wait_for(self, count: int, what: str) -> list[tuple[str, str, str]]:
        events = self.events.wait_for(lambda items: len(items) >= count, what)
        return [(e["type"], e["workload"]["id"], e["workload"]["state"]) for e in events]

    def finish(self, interrupt: bool) -> tuple[int, str]:
        """Its exit status and stderr, after Ctrl-C if ``interrupt``; if it hangs, aborted and its
        threads' stacks reported."""
        if interrupt:
            self.proc.send_signal(signal.SIGINT)
        try:
            code = self.proc.wait(timeout=WAIT)
        except subprocess.TimeoutExpired:
            self.proc.send_signal(signal.SIGABRT)
            try:
                self.proc.wait(timeout=WAIT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=WAIT)
            raise AssertionError(
                f"kai-ray watch hung; its stderr:\n{self.stderr.read_text()[-8000:]}"
            ) from None
        return code, self.stderr.read_text()


@contextmanager
def first_server() -> Iterator[tuple[SimBackend, SchedulerService, RunningServer]]:
    """One node of 8 GPUs serving ml/a (2 GPUs) and ml/b (4) running, ml/c (4) waiting for room."""
    backend = SimBackend.from_nodes(1, 8)
    backend.start()
    service = SchedulerService(backend)
    try:
        with start_grpc_server(service, "127.0.0.1:0") as server:
            for name, gpus in (("a", 2), ("b", 4), ("c", 4)):
                service.submit_workload(gpu_job("ml", name, QUEUE, 1, gpus), ANYONE)
            backend.wait_idle(timeout=WAIT)
            yield backend, service, server
    finally:
        backend.close()


def restart_changed(
    backend: SimBackend, first: SchedulerService, server: RunningServer
) -> tuple[SchedulerService, RunningServer]:
    """Stop ``server``; while it is down, delete ml/b and submit ml/d; serve a new service (a new
    process's, with its own resume tokens) on the same port."""
    server.stop(grace=1.0)
    first.cancel_workload(pb.CancelWorkloadRequest(id="ml/b"), ANYONE)  # its pods and PodGroup go
    first.submit_workload(gpu_job("ml", "d", QUEUE, 1, 1), ANYONE)
    backend.wait_idle(timeout=WAIT)  # ml/c starts on ml/b's GPUs
    second = SchedulerService(backend)
    listed = second.list_workloads(pb.ListWorkloadsRequest(namespace="ml"), ANYONE).workloads
    assert [(w.id, pb.WorkloadState.Name(w.state)) for w in listed] == [
        ("ml/a", "RUNNING"),
        ("ml/c", "RUNNING"),
        ("ml/d", "RUNNING"),
    ]
    return second, start_grpc_server(second, f"127.0.0.1:{server.port}")


def is_running(workload_id: str) -> Callable[[list[pb.WorkloadEvent]], bool]:
    return lambda events: any(e.workload.id == workload_id and e.workload.state == pb.RUNNING for e in events)


def test_a_follower_reports_exactly_what_changed_across_a_restart_then_live_events() -> None:
    with first_server() as (backend, first, server), KaiRayClient(f"127.0.0.1:{server.port}") as client:
        stop = threading.Event()
        following = Following(client.follow_workloads(pb.WatchWorkloadsRequest(namespace="ml"), stop), stop)
        following.start()
        opening = following.events.wait_for(lambda events: len(events) >= 3, "the opening listing")
        assert [summary(e) for e in opening] == OPENING
        old_epoch = following.follower.resume_token.rpartition("-")[0]

        second, restarted = restart_changed(backend, first, server)
        with restarted:
            events = following.events.wait_for(lambda events: len(events) >= 6, "the changes")
            assert [summary(e) for e in events[3:]] == MISSED
            assert events[3].resume_token == ""  # a deletion comes from a listing, not a stream
            assert events[4].resume_token.rpartition("-")[0] != old_epoch
            # Then the new server's own events, tokens and all, and nothing else.
            client.submit_workload(gpu_job("ml", "e", QUEUE, 1, 1))
            events = following.events.wait_for(is_running("ml/e"), "ml/e RUNNING")
            live = [(summary(e), e.resume_token) for _, e in second.events if e.workload.id == "ml/e"]
            assert [(summary(e), e.resume_token) for e in events[6:]] == live
            # The follower's store is the new server's state, ml/a's re-derived view included.
            now = second.list_workloads(pb.ListWorkloadsRequest(namespace="ml"), ANYONE).workloads
            assert following.follower.workloads == {w.id: w for w in now}
            stop.set()
            following.events.wait_ended("the follower to end once stopped")
        assert following.error is None


def test_kai_ray_watch_goes_on_across_a_restart(tmp_path: Path) -> None:
    with first_server() as (backend, first, server):
        watch = WatchProcess(tmp_path, "--server", f"127.0.0.1:{server.port}", "--namespace", "ml")
        try:
            assert watch.wait_for(3, "the opening listing") == OPENING
            second, restarted = restart_changed(backend, first, server)
            with restarted:
                assert watch.wait_for(6, "the changes made while the server was down")[3:] == MISSED
                second.submit_workload(gpu_job("ml", "e", QUEUE, 1, 1), ANYONE)
                seen = watch.events.wait_for(is_running_json("ml/e"), "ml/e RUNNING")
                assert [e["workload"]["id"] for e in seen[6:]] == ["ml/e"] * len(seen[6:])
                code, stderr = watch.finish(interrupt=True)
        finally:
            if watch.proc.poll() is None:
                watch.proc.kill()
    assert code == 0, stderr
    assert "error" not in stderr


def is_running_json(workload_id: str) -> Callable[[list[dict[str, Any]]], bool]:
    return lambda events: any(
        e["workload"]["id"] == workload_id and e["workload"]["state"] == "RUNNING" for e in events
    )


def test_kai_ray_watch_with_reconnect_timeout_zero_ends_with_the_server(tmp_path: Path) -> None:
    with first_server() as (_backend, _first, server):
        address = f"127.0.0.1:{server.port}"
        watch = WatchProcess(tmp_path, "--server", address, "--namespace", "ml", "--reconnect-timeout", "0")
        try:
            assert watch.wait_for(3, "the opening listing") == OPENING
            server.stop(grace=1.0)
            code, stderr = watch.finish(interrupt=False)
        finally:
            if watch.proc.poll() is None:
                watch.proc.kill()
    assert code == 1
    assert stderr.startswith("error: UNAVAILABLE: "), stderr


def test_a_refusal_after_a_restart_is_raised_at_once_never_retried() -> None:
    # The server comes back with a token file in which the follower's token lost its namespace.
    service = FakeService()
    service.add("team-a", "ours", "team-a", pb.RUNNING)
    before = TokenTable([("alpha", Caller(frozenset({"team-a"}), "alpha"))])
    after = TokenTable([("alpha", Caller(frozenset({"team-b"}), "alpha"))])
    with start_grpc_server(service, "127.0.0.1:0", tokens=before) as server:
        address = f"127.0.0.1:{server.port}"
        with KaiRayClient(address, token="alpha") as client:
            stop = threading.Event()
            following = Following(
                client.follow_workloads(pb.WatchWorkloadsRequest(namespace="team-a"), stop), stop
            ).start()
            following.events.wait_for(lambda events: len(events) == 1, "the opening ADDED")
            server.stop(grace=1.0)
            with start_grpc_server(service, address, tokens=after):
                following.events.wait_ended("the follower to give up")
                assert isinstance(following.error, RemoteError), following.error
                assert following.error.status == "PERMISSION_DENIED"
                # The first watch, and the one reconnect that was refused: no retry after it.
                assert service.methods_called() == ["watch_workloads", "watch_workloads"]
