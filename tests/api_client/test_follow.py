"""`WorkloadFollower` against scripted streams: what it yields across a reconnect and a relist, and
which failures it retries, for how long, and which it raises at once.

The real-socket counterpart (a server restarted with changed state) is tests/rpc/test_watch_resume.py.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Iterator

import pytest

from kai_ray.rpc.client import RemoteError, WorkloadFollower
from kai_ray.rpc.errors import ErrorCode, ServiceError
from kai_ray.v1 import scheduler_pb2 as pb

pytestmark = pytest.mark.unit

ADDED, MODIFIED, DELETED = pb.WorkloadEvent.ADDED, pb.WorkloadEvent.MODIFIED, pb.WorkloadEvent.DELETED

Script = tuple[list[pb.WorkloadEvent], ServiceError | None]
"""One watch call: the events its stream sends, then the error it ends with (None: a clean end)."""


def workload(
    name: str, state: int, bound: int = 0, transition: int = 0, pods: tuple[str, ...] = ()
) -> pb.Workload:
    made = pb.Workload(id=f"ml/{name}", namespace="ml", name=name, state=state, pods_bound=bound)  # type: ignore[arg-type]
    made.last_transition.seconds = transition
    made.placements.extend(pb.PodPlacement(pod=pod, node="node-0") for pod in pods)
    return made


def event(kind: pb.WorkloadEvent.Type, w: pb.Workload, token: str) -> pb.WorkloadEvent:
    return pb.WorkloadEvent(type=kind, workload=w, resume_token=token)


def unavailable() -> RemoteError:
    return RemoteError("UNAVAILABLE", "the server is shutting down; watch again from the last resume_token")


def summary(e: pb.WorkloadEvent) -> tuple[str, str, str, str]:
    return (
        pb.WorkloadEvent.Type.Name(e.type),
        e.workload.id,
        pb.WorkloadState.Name(e.workload.state),
        e.resume_token,
    )


class ScriptedSource:
    """A `WorkloadSource`: each watch call plays the next script; lists answer ``listing`` one
    workload per page (so the follower has to page).  Records every request."""

    def __init__(self, scripts: list[Script], listing: list[pb.Workload] | None = None) -> None:
        self.scripts = deque(scripts)
        self.listing = listing or []
        self.watches: list[str] = []  # the resume token of each watch call
        self.lists: list[pb.ListWorkloadsRequest] = []

    def list_workloads(self, request: pb.ListWorkloadsRequest) -> pb.ListWorkloadsResponse:
        self.lists.append(pb.ListWorkloadsRequest(namespace=request.namespace, page_token=request.page_token))
        start = int(request.page_token or 0)
        more = start + 1 < len(self.listing)
        return pb.ListWorkloadsResponse(
            workloads=self.listing[start : start + 1], next_page_token=str(start + 1) if more else ""
        )

    def watch_workloads(
        self, request: pb.WatchWorkloadsRequest, stop: threading.Event | None = None
    ) -> Iterator[pb.WorkloadEvent]:
        assert request.namespace == "ml"
        self.watches.append(request.resume_token)
        assert self.scripts, f"an unexpected watch call (resume_token {request.resume_token!r})"
        return self._play(*self.scripts.popleft())

    @staticmethod
    def _play(events: list[pb.WorkloadEvent], error: ServiceError | None) -> Iterator[pb.WorkloadEvent]:
        yield from events
        if error is not None:
            raise error


class AlwaysUnavailable(ScriptedSource):
    """A server that answered once, then went away for good."""

    def __init__(self) -> None:
        super().__init__([([event(ADDED, workload("a", pb.RUNNING), "e1-1")], unavailable())])
        self.called_at: list[float] = []

    def watch_workloads(
        self, request: pb.WatchWorkloadsRequest, stop: threading.Event | None = None
    ) -> Iterator[pb.WorkloadEvent]:
        self.called_at.append(time.monotonic())
        if not self.scripts:
            self.scripts.append(([], unavailable()))
        return super().watch_workloads(request, stop)


class RecordingStop(threading.Event):
    """A stop event that records how long the follower waits on it; set after ``stop_after`` waits."""

    def __init__(self, stop_after: int | None = None) -> None:
        super().__init__()
        self.waits: list[float] = []
        self.stop_after = stop_after

    def wait(self, timeout: float | None = None) -> bool:
        assert timeout is not None, "an unbounded wait"
        self.waits.append(timeout)
        if self.stop_after is not None and len(self.waits) >= self.stop_after:
            self.set()
        return super().wait(timeout)


def follow(source: ScriptedSource, token: str = "") -> WorkloadFollower:
    return WorkloadFollower(source, pb.WatchWorkloadsRequest(namespace="ml", resume_token=token))


# ------------------------------------------------------------------------------------- what it yields


def test_after_a_restart_the_relist_becomes_exactly_the_events_missed_then_streaming_goes_on() -> None:
    a = workload("a", pb.RUNNING, bound=2, transition=100, pods=("a-0", "a-1"))
    b = workload("b", pb.PENDING)
    b_running = workload("b", pb.RUNNING, bound=1, transition=150)
    c = workload("c", pb.PENDING)
    # The new server: a as it was, but re-derived (its last_transition reset, its pods in another
    # order); b gone; c running now; d new.
    a_again = workload("a", pb.RUNNING, bound=2, transition=900, pods=("a-1", "a-0"))
    c_running = workload("c", pb.RUNNING, bound=1, transition=900)
    d = workload("d", pb.PENDING, transition=900)
    d_running = workload("d", pb.RUNNING, bound=1, transition=950)
    source = ScriptedSource(
        [
            (
                [event(ADDED, a, "e1-3"), event(ADDED, b, "e1-3"), event(ADDED, c, "e1-3")],
                unavailable(),  # a network blip: the same server is back at once
            ),
            ([event(MODIFIED, b_running, "e1-4")], unavailable()),  # now the restart
            ([], RemoteError("OUT_OF_RANGE", "the token is from before a server restart", "resume_token")),
            (
                [
                    event(ADDED, a_again, "e2-7"),
                    event(ADDED, c_running, "e2-7"),
                    event(ADDED, d, "e2-7"),
                    event(MODIFIED, d_running, "e2-8"),
                ],
                None,
            ),
        ],
        listing=[a_again, c_running, d],
    )
    follower = follow(source)
    got = [summary(e) for e in follower]

    assert got == [
        ("ADDED", "ml/a", "RUNNING", "e1-3"),
        ("ADDED", "ml/b", "PENDING", "e1-3"),
        ("ADDED", "ml/c", "PENDING", "e1-3"),
        ("MODIFIED", "ml/b", "RUNNING", "e1-4"),  # resumed after the blip, nothing repeated
        ("DELETED", "ml/b", "RUNNING", ""),  # as last known; a listing has no resume token
        ("MODIFIED", "ml/c", "RUNNING", "e2-7"),
        ("ADDED", "ml/d", "PENDING", "e2-7"),
        ("MODIFIED", "ml/d", "RUNNING", "e2-8"),  # live again
    ]
    # Resumed from the last token each time; after OUT_OF_RANGE, a fresh watch.
    assert source.watches == ["", "e1-3", "e1-4", ""]
    assert [r.page_token for r in source.lists] == ["", "1", "2"]  # every page of the listing
    assert all(r.namespace == "ml" for r in source.lists)
    assert follower.resume_token == "e2-8"
    assert follower.workloads == {"ml/a": a_again, "ml/c": c_running, "ml/d": d_running}


def test_a_first_watch_is_passed_through_and_a_clean_end_ends_the_follower() -> None:
    a, b = workload("a", pb.RUNNING), workload("b", pb.PENDING)
    stream = [event(ADDED, a, "e1-2"), event(ADDED, b, "e1-2"), event(DELETED, a, "e1-3")]
    source = ScriptedSource([(stream, None)])
    follower = follow(source)
    assert list(follower) == stream
    assert source.watches == [""] and source.lists == []
    assert follower.workloads == {"ml/b": b}


def test_a_stale_token_of_the_callers_own_is_raised_not_relisted() -> None:
    # The follower cannot know which workloads the caller had, so it cannot tell what was deleted.
    source = ScriptedSource([([], RemoteError("OUT_OF_RANGE", "too old", "resume_token"))])
    with pytest.raises(ServiceError) as caught:
        list(follow(source, token="e0-41"))
    assert (caught.value.code, caught.value.field) == (ErrorCode.OUT_OF_RANGE, "resume_token")
    assert source.watches == ["e0-41"] and source.lists == []


def test_from_the_callers_token_it_resumes_through_an_outage_once_it_reached_the_server() -> None:
    b = workload("b", pb.RUNNING)
    source = ScriptedSource([([], unavailable()), ([event(MODIFIED, b, "e0-43")], None)])
    follower = follow(source, token="e0-42")
    # The first stream failed before sending anything, but a caller's token is no sign that the
    # server was ever reached: reported at once.
    with pytest.raises(ServiceError):
        list(follower)
    source = ScriptedSource(
        [([event(MODIFIED, b, "e0-43")], unavailable()), ([event(DELETED, b, "e0-44")], None)]
    )
    follower = follow(source, token="e0-42")
    assert [summary(e)[0] for e in follower] == ["MODIFIED", "DELETED"]
    assert source.watches == ["e0-42", "e0-43"]


# ------------------------------------------------------------------------------------- what it raises


@pytest.mark.parametrize(
    "status", ["PERMISSION_DENIED", "UNAUTHENTICATED", "INVALID_ARGUMENT", "RESOURCE_EXHAUSTED", "INTERNAL"]
)
def test_other_errors_are_raised_at_once_never_retried(status: str) -> None:
    # INTERNAL arrives as a RemoteError whose code is UNAVAILABLE ("could not answer"); the
    # follower goes by the status the server sent, and a bug is not something to wait out.
    source = ScriptedSource([([event(ADDED, workload("a", pb.RUNNING), "e1-1")], RemoteError(status, "no"))])
    with pytest.raises(RemoteError) as caught:
        list(follow(source))
    assert caught.value.status == status
    assert source.watches == [""]


def test_a_server_never_reached_is_reported_at_once() -> None:
    source = ScriptedSource([([], unavailable())])
    with pytest.raises(RemoteError) as caught:
        list(follow(source))
    assert caught.value.status == "UNAVAILABLE"
    assert "did not come back" not in caught.value.message
    assert source.watches == [""]


def test_it_gives_up_after_the_reconnect_timeout_every_wait_bounded() -> None:
    source = AlwaysUnavailable()
    stop = RecordingStop()
    follower = WorkloadFollower(source, pb.WatchWorkloadsRequest(namespace="ml"), stop, reconnect_timeout=1.0)
    events: list[pb.WorkloadEvent] = []
    with pytest.raises(RemoteError) as caught:
        events.extend(follower)
    assert [summary(e)[1] for e in events] == ["ml/a"]
    assert caught.value.status == "UNAVAILABLE" and caught.value.code == ErrorCode.UNAVAILABLE
    assert "did not come back within 1 s" in caught.value.message
    outage = source.called_at[-1] - source.called_at[0]
    assert 1.0 <= outage < 1.0 + 1.0, outage  # the last try at the deadline, not long after
    # Backoff: each wait at most twice the one before (jittered down by up to half) and never
    # past what is left of the timeout.
    assert len(stop.waits) >= 3
    ceilings = [min(0.1 * 2**i, 5.0) for i in range(len(stop.waits))]
    assert all(0 < wait <= ceiling for wait, ceiling in zip(stop.waits, ceilings, strict=True)), stop.waits
    assert sum(stop.waits) <= 1.0 + 1e-6


def test_a_zero_reconnect_timeout_ends_with_the_server_as_a_plain_watch() -> None:
    error = unavailable()
    source = ScriptedSource([([event(ADDED, workload("a", pb.RUNNING), "e1-1")], error)])
    follower = WorkloadFollower(source, pb.WatchWorkloadsRequest(namespace="ml"), reconnect_timeout=0)
    with pytest.raises(RemoteError) as caught:
        list(follower)
    assert caught.value is error
    assert source.watches == [""]


def test_stop_while_waiting_to_reconnect_ends_it_quietly() -> None:
    source = AlwaysUnavailable()
    stop = RecordingStop(stop_after=1)
    follower = WorkloadFollower(source, pb.WatchWorkloadsRequest(namespace="ml"), stop)
    assert [summary(e)[1] for e in follower] == ["ml/a"]
    assert len(stop.waits) == 1 and len(source.called_at) == 1
