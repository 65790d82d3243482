"""The real service on a simulated cluster, under load, over a real 127.0.0.1 socket (issue 11).

* 1,000 submits from 8 client threads: every one answered, listed exactly once, and placed as
  the capacity allows once the cluster settles.
* 200 concurrent `WatchWorkloads` streams all see one submit (ADDED, then RUNNING), then all stop
  cleanly and the server still answers.
* Resuming a watch: after a restart an old token is OUT_OF_RANGE and the documented recovery
  (list, then watch from no token) loses nothing; within one server run, resuming after a
  disconnect delivers exactly the events after the token.

Nothing here sleeps to synchronise: waits are on conditions, each with a deadline.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import pytest
from service_builders import gpu_job

from kai_ray.rpc.api import SchedulerService
from kai_ray.rpc.client import KaiRayClient
from kai_ray.rpc.errors import ErrorCode, ServiceError
from kai_ray.rpc.sim_backend import SimBackend
from kai_ray.rpc.transport import RunningServer, start_grpc_server
from kai_ray.v1 import scheduler_pb2 as pb

pytestmark = pytest.mark.grpc

QUEUE = "default-queue"
WAIT = 30.0
"""Deadline of every wait on a condition (seconds); generous, as CI machines are slow."""


def wait_until(predicate: Callable[[], bool], timeout: float = WAIT, what: str = "condition") -> None:
    """Re-check ``predicate`` until it holds; fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    pause = threading.Event()
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        pause.wait(0.02)


@contextmanager
def serving(backend: SimBackend) -> Iterator[tuple[SchedulerService, RunningServer, str]]:
    """A fresh `SchedulerService` on ``backend`` behind a gRPC server on a free loopback port."""
    service = SchedulerService(backend)
    with start_grpc_server(service, "127.0.0.1:0") as server:
        yield service, server, f"127.0.0.1:{server.port}"


@contextmanager
def sim_cluster(nodes: int) -> Iterator[SimBackend]:
    backend = SimBackend.from_nodes(nodes, 8)
    backend.start()
    try:
        yield backend
    finally:
        backend.close()


def list_all(client: KaiRayClient, page_size: int = 200, **filters: str) -> list[pb.Workload]:
    """Every workload, page by page, as a client has to."""
    found: list[pb.Workload] = []
    token = ""
    for _ in range(10_000):
        page = client.list_workloads(
            pb.ListWorkloadsRequest(page_size=page_size, page_token=token, **filters)
        )
        assert len(page.workloads) <= page_size
        found.extend(page.workloads)
        token = page.next_page_token
        if not token:
            return found
    raise AssertionError("pagination never ended")


def seq_of(token: str) -> int:
    return int(token.rpartition("-")[2])


def epoch_of(token: str) -> str:
    return token.rpartition("-")[0]


def summary(event: pb.WorkloadEvent) -> tuple[str, str, str]:
    return (
        pb.WorkloadEvent.Type.Name(event.type),
        event.workload.id,
        pb.WorkloadState.Name(event.workload.state),
    )


@dataclass
class Watcher:
    """One watch stream read by its own thread; what it received, and how it ended."""

    client: KaiRayClient
    request: pb.WatchWorkloadsRequest
    stop: threading.Event = field(default_factory=threading.Event)
    events: list[pb.WorkloadEvent] = field(default_factory=list)
    error: BaseException | None = None
    ended: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> Watcher:
        threading.Thread(target=self._read, name="test-watch", daemon=True).start()
        return self

    def _read(self) -> None:
        try:
            for event in self.client.watch_workloads(self.request, self.stop):
                with self.lock:
                    self.events.append(event)
        except BaseException as error:  # recorded for the test to look at
            self.error = error
        finally:
            self.ended.set()

    def seen(self) -> list[pb.WorkloadEvent]:
        with self.lock:
            return list(self.events)

    def saw(self, workload_id: str, state: int) -> bool:
        return any(e.workload.id == workload_id and e.workload.state == state for e in self.seen())


# ------------------------------------------------------------------------------------- submits


def test_a_thousand_submits_from_eight_threads_are_all_kept() -> None:
    total, threads, nodes = 1000, 8, 100
    with sim_cluster(nodes) as backend, serving(backend) as (_service, _server, address):
        answered: list[list[str]] = [[] for _ in range(threads)]
        failures: list[BaseException] = []

        def submit(worker: int) -> None:
            try:
                with KaiRayClient(address) as client:
                    for index in range(worker, total, threads):
                        name = f"job-{index:04d}"
                        response = client.submit_workload(gpu_job("load", name, QUEUE, 1, 1))
                        assert response.id == f"load/{name}", response.id
                        answered[worker].append(response.id)
            except BaseException as error:
                failures.append(error)

        workers = [threading.Thread(target=submit, args=(w,)) for w in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(timeout=60)
        assert not any(w.is_alive() for w in workers), "a submitting thread hung"
        assert failures == []
        expected = {f"load/job-{index:04d}" for index in range(total)}
        ids = [i for chunk in answered for i in chunk]
        assert len(ids) == total and set(ids) == expected

        with KaiRayClient(address) as client:
            listed = [w.id for w in list_all(client, page_size=200)]
            assert len(listed) == total, "lost or duplicated in the list"
            assert set(listed) == expected
            assert listed == sorted(listed), "pages out of order"

            backend.wait_idle(timeout=60)
            settled = list_all(client, page_size=200)
            states: dict[str, int] = {}
            for workload in settled:
                name = pb.WorkloadState.Name(workload.state)
                states[name] = states.get(name, 0) + 1
            # 100 nodes x 8 GPUs, one GPU each: 800 run, the other 200 wait for room.
            assert states == {"RUNNING": nodes * 8, "PENDING": total - nodes * 8}
            running = client.list_workloads(
                pb.ListWorkloadsRequest(state=pb.RUNNING, page_size=1000, namespace="load")
            )
            assert len(running.workloads) == nodes * 8 and not running.next_page_token
            cluster = client.get_cluster(pb.GetClusterRequest())
            assert cluster is not None


# ------------------------------------------------------------------------------------- watches


def test_two_hundred_watch_streams_all_see_a_submit_then_stop_cleanly() -> None:
    streams, per_client = 200, 4
    with sim_cluster(4) as backend, serving(backend) as (_service, server, address):
        clients = [KaiRayClient(address) for _ in range(streams // per_client)]
        try:
            with KaiRayClient(address) as control:
                # A workload that exists before the watches: each starts with its ADDED, which
                # proves that stream's snapshot was taken before the submit below.
                control.submit_workload(gpu_job("watch", "seed", QUEUE, 1, 1))
                request = pb.WatchWorkloadsRequest(namespace="watch")
                watchers = [Watcher(clients[i // per_client], request).start() for i in range(streams)]
                wait_until(lambda: all(w.seen() for w in watchers), what="every stream's first event")
                assert len(server.streams) == streams
                for watcher in watchers:
                    first = watcher.seen()[0]
                    assert summary(first)[:2] == ("ADDED", "watch/seed")

                control.submit_workload(gpu_job("watch", "probe", QUEUE, 1, 2))
                wait_until(
                    lambda: all(w.saw("watch/probe", pb.RUNNING) for w in watchers),
                    what="every stream to see watch/probe RUNNING",
                )
                for watcher in watchers:
                    probe = [e for e in watcher.seen() if e.workload.id == "watch/probe"]
                    assert summary(probe[0])[:2] == ("ADDED", "watch/probe"), summary(probe[0])
                    assert sum(e.type == pb.WorkloadEvent.ADDED for e in probe) == 1
                    assert probe[-1].workload.state == pb.RUNNING
                    tokens = [seq_of(e.resume_token) for e in watcher.seen()[1:]]
                    assert tokens == sorted(set(tokens)), "events out of order or repeated"
                assert all(w.error is None for w in watchers)

                for watcher in watchers:
                    watcher.stop.set()
                for watcher in watchers:
                    assert watcher.ended.wait(WAIT), "a stopped watch did not end"
                assert [w.error for w in watchers if w.error is not None] == []
                wait_until(lambda: len(server.streams) == 0, what="the server to close every stream")

                # Still answering: unary calls and a new watch.
                listed = {w.id for w in list_all(control)}
                assert listed == {"watch/seed", "watch/probe"}
                again = Watcher(control, request).start()
                wait_until(lambda: len(again.seen()) == 2, what="a new watch's snapshot")
                assert {e.workload.id for e in again.seen()} == listed
                again.stop.set()
                assert again.ended.wait(WAIT) and again.error is None
        finally:
            for client in clients:
                client.close()


# ------------------------------------------------------------------------------------- resume


def test_after_a_restart_an_old_token_is_out_of_range_and_list_then_watch_loses_nothing() -> None:
    with sim_cluster(4) as backend:
        before = {f"ml/before-{i}" for i in range(3)}
        with serving(backend) as (_service, server, address), KaiRayClient(address) as client:
            for workload_id in sorted(before):
                client.submit_workload(gpu_job("ml", workload_id.split("/")[1], QUEUE, 1, 1))
            watcher = Watcher(client, pb.WatchWorkloadsRequest(namespace="ml")).start()
            wait_until(
                lambda: all(watcher.saw(i, pb.RUNNING) for i in before), what="the first run's workloads"
            )
            old_token = watcher.seen()[-1].resume_token
            server.stop(grace=1.0)  # the restart: the open watch ends with UNAVAILABLE
            assert watcher.ended.wait(WAIT)
            assert isinstance(watcher.error, ServiceError)
            assert watcher.error.code == ErrorCode.UNAVAILABLE

        # A new process: a new service (new event epoch) on the cluster as it still is.
        with serving(backend) as (_service, _server, address), KaiRayClient(address) as client:
            client.submit_workload(gpu_job("ml", "after-0", QUEUE, 1, 1))
            with pytest.raises(ServiceError) as stale:
                next(iter(client.watch_workloads(pb.WatchWorkloadsRequest(resume_token=old_token))))
            assert stale.value.code == ErrorCode.OUT_OF_RANGE
            assert stale.value.field == "resume_token"

            # The documented recovery: list, then watch from no token.
            everything = before | {"ml/after-0"}
            assert {w.id for w in list_all(client, page_size=2, namespace="ml")} == everything
            watcher = Watcher(client, pb.WatchWorkloadsRequest(namespace="ml")).start()
            wait_until(lambda: len(watcher.seen()) >= len(everything), what="the new watch's snapshot")
            snapshot = watcher.seen()[: len(everything)]
            assert {e.workload.id for e in snapshot} == everything
            assert all(e.type == pb.WorkloadEvent.ADDED for e in snapshot)
            # Only the listing's last event carries a token (a cut listing leaves none to skip the rest).
            assert [bool(e.resume_token) for e in snapshot] == [False] * (len(everything) - 1) + [True]
            assert epoch_of(snapshot[-1].resume_token) != epoch_of(old_token)
            # ... and it follows what happens next.
            client.submit_workload(gpu_job("ml", "after-1", QUEUE, 1, 1))
            wait_until(lambda: watcher.saw("ml/after-1", pb.RUNNING), what="ml/after-1 RUNNING")
            watcher.stop.set()
            assert watcher.ended.wait(WAIT) and watcher.error is None


def test_resuming_within_one_run_delivers_exactly_the_events_after_the_token() -> None:
    with sim_cluster(4) as backend, serving(backend) as (service, _server, address):
        with KaiRayClient(address) as client:
            for name in ("a", "b"):
                client.submit_workload(gpu_job("ml", name, QUEUE, 1, 1))
            first = Watcher(client, pb.WatchWorkloadsRequest(namespace="ml")).start()
            wait_until(lambda: first.saw("ml/b", pb.RUNNING), what="ml/b RUNNING")
            client.submit_workload(gpu_job("ml", "c", QUEUE, 1, 1))
            wait_until(lambda: any(e.workload.id == "ml/c" for e in first.seen()), what="ml/c ADDED")
            # The token of the last event received before the client goes away.
            received = first.seen()
            token = received[-1].resume_token
            first.stop.set()
            assert first.ended.wait(WAIT) and first.error is None

        # While disconnected: more changes, in and outside the watched namespace.
        with KaiRayClient(address) as client:
            client.submit_workload(gpu_job("ml", "d", QUEUE, 1, 1))
            client.submit_workload(gpu_job("web", "elsewhere", QUEUE, 1, 1))
            client.cancel_workload(pb.CancelWorkloadRequest(id="ml/a"))
            client.submit_workload(gpu_job("ml", "too-big", QUEUE, 1, 64))
            backend.wait_idle(timeout=WAIT)
            expected = [
                event
                for seq, event in service.events
                if seq > seq_of(token) and event.workload.namespace == "ml"
            ]
            assert ("MODIFIED", "ml/a", "CANCELLED") in [summary(e) for e in expected]
            assert ("ADDED", "ml/d", "PENDING") in [summary(e) for e in expected]

        with KaiRayClient(address) as client:
            resumed = Watcher(client, pb.WatchWorkloadsRequest(namespace="ml", resume_token=token)).start()
            wait_until(lambda: len(resumed.seen()) >= len(expected), what="the resumed events")
            # Then a marker: the next event must be its ADDED, so nothing extra came in between.
            client.submit_workload(gpu_job("ml", "marker", QUEUE, 1, 1))
            wait_until(
                lambda: any(e.workload.id == "ml/marker" for e in resumed.seen()), what="the marker's ADDED"
            )
            got = resumed.seen()
            resumed.stop.set()
            assert resumed.ended.wait(WAIT) and resumed.error is None

        marker_at = next(i for i, e in enumerate(got) if e.workload.id == "ml/marker")
        assert [e.resume_token for e in got[:marker_at]] == [e.resume_token for e in expected]
        assert [summary(e) for e in got[:marker_at]] == [summary(e) for e in expected]
        assert summary(got[marker_at])[:2] == ("ADDED", "ml/marker")
        # The live events before the token (after the watch's snapshot) and those resumed after it
        # are together every event of the namespace, each exactly once, in order.
        snapshot_seq = seq_of(next(e.resume_token for e in received if e.resume_token))
        live = [
            seq_of(e.resume_token)
            for e in received
            if e.resume_token and seq_of(e.resume_token) > snapshot_seq
        ]
        resumed_seqs = [seq_of(e.resume_token) for e in got[:marker_at]]
        last = resumed_seqs[-1]
        numbered = [seq for seq, e in service.events if e.workload.namespace == "ml"]
        assert live + resumed_seqs == [s for s in numbered if snapshot_seq < s <= last]
