"""`SchedulerService`: every RPC of `kai_ray.v1.Scheduler`, independent of transport.

Each method takes the request message and the `Caller` and returns the response message, or
raises `ServiceError`.  Permission is checked before existence, so a caller cannot learn which
workloads exist in a namespace it may not use.  Reads are served from the workload tracker and
the last cycle, never by running the engine, so they stay fast while cycles run.
"""

from __future__ import annotations

import base64
import binascii
import threading
from collections.abc import Iterator

from kai_ray.rpc.backend import Backend, CycleRecord, Grouper, ObjectKey
from kai_ray.rpc.caller import Caller
from kai_ray.rpc.errors import ErrorCode, ServiceError
from kai_ray.rpc.events import DEFAULT_HISTORY, EventLog
from kai_ray.rpc.explain import explain
from kai_ray.rpc.submit import build_submission
from kai_ray.rpc.views import cluster_view, queue_views
from kai_ray.rpc.whatif import what_if
from kai_ray.rpc.workloads import Members, WorkloadTracker, split_id
from kai_ray.v1 import scheduler_pb2 as pb

__all__ = ["DEFAULT_PAGE_SIZE", "MAX_PAGE_SIZE", "SchedulerService"]

DEFAULT_PAGE_SIZE = 100
MAX_PAGE_SIZE = 1000
WATCH_POLL_SECONDS = 0.25
"""How often a blocked watch looks at its stop event (it is also woken by every event)."""


class SchedulerService:
    """The API's operations over one backend.  Thread-safe; one instance serves every caller."""

    def __init__(
        self, backend: Backend, *, grouper: Grouper | None = None, history: int = DEFAULT_HISTORY
    ) -> None:
        self.backend = backend
        self.grouper = grouper
        self.events = EventLog(history)
        self.workloads = WorkloadTracker(backend, self.events)
        self._submit_lock = threading.Lock()

    @property
    def answers_from_memory(self) -> bool:
        return bool(getattr(self.backend, "answers_from_memory", False))

    # ------------------------------------------------------------------ workloads
    def submit_workload(self, request: pb.SubmitWorkloadRequest, caller: Caller) -> pb.SubmitWorkloadResponse:
        # One submit at a time: the name check and the create must not interleave with another
        # submit of the same name.  Validation is cheap; cycles are not blocked by this lock.
        with self._submit_lock:
            view = self.backend.view()
            submission = build_submission(request, caller, view, grouper=self.grouper, taken=self.workloads)
            self.backend.create(submission.objects)
            workload = self.workloads.add(submission.members)
        return pb.SubmitWorkloadResponse(id=workload.id, workload=workload)

    def get_workload(self, request: pb.GetWorkloadRequest, caller: Caller) -> pb.Workload:
        return self._visible(request.id, caller)

    def list_workloads(self, request: pb.ListWorkloadsRequest, caller: Caller) -> pb.ListWorkloadsResponse:
        if request.namespace:
            caller.require(request.namespace)
        if request.page_size < 0:
            raise ServiceError(
                ErrorCode.INVALID_ARGUMENT, f"must be >= 0, got {request.page_size}", "page_size"
            )
        size = min(request.page_size or DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE)
        after = _decode_page_token(request.page_token) if request.page_token else ""
        matches = [
            w
            for w in self.workloads.all()
            if _matches(w, request.namespace, request.queue, caller) and w.id > after
        ]
        if request.state != pb.WORKLOAD_STATE_UNSPECIFIED:
            matches = [w for w in matches if w.state == request.state]
        page = matches[:size]
        response = pb.ListWorkloadsResponse(workloads=page)
        if len(matches) > size:
            response.next_page_token = _encode_page_token(page[-1].id)
        return response

    def watch_workloads(
        self, request: pb.WatchWorkloadsRequest, caller: Caller, stop: threading.Event
    ) -> Iterator[pb.WorkloadEvent]:
        """Validates before the first `next()` returns, then blocks yielding events until `stop`."""
        if request.namespace:
            caller.require(request.namespace)

        def matches(workload: pb.Workload) -> bool:
            return _matches(workload, request.namespace, request.queue, caller)

        if request.resume_token:
            seq = self.events.parse(request.resume_token)
            initial: list[pb.WorkloadEvent] = []
        else:
            current, seq = self.workloads.snapshot(matches)
            # Only the last opening event carries the snapshot's token: resuming from it skips
            # the whole listing, so a stream cut halfway through the listing must not leave the
            # client a token that skips the rest of it.
            initial = [pb.WorkloadEvent(type=pb.WorkloadEvent.ADDED, workload=w) for w in current]
            if initial:
                initial[-1].resume_token = self.events.token(seq)
        return self._stream(initial, seq, matches, stop)

    def _stream(
        self, initial: list[pb.WorkloadEvent], seq: int, matches: object, stop: threading.Event
    ) -> Iterator[pb.WorkloadEvent]:
        assert callable(matches)
        yield from initial
        while not stop.is_set():
            for number, event in self.events.after(seq):
                seq = number
                if matches(event.workload):
                    yield event
                if stop.is_set():
                    return
            self.events.wait(seq, WATCH_POLL_SECONDS)

    def cancel_workload(self, request: pb.CancelWorkloadRequest, caller: Caller) -> pb.Workload:
        workload = self._visible(request.id, caller)
        if workload.state == pb.CANCELLED:
            return workload
        with self._submit_lock:
            return self.workloads.cancel(workload.id, self._delete)

    def _delete(self, members: Members) -> None:
        keys: list[ObjectKey] = [("Pod", members.namespace, name) for name in members.pods]
        keys.extend(("PodGroup", members.namespace, name) for name in members.pod_groups)
        self.backend.delete(keys)

    # ------------------------------------------------------------------ explain, queues, what-if, cluster
    def explain(self, request: pb.ExplainRequest, caller: Caller) -> pb.Explanation:
        workload = self._visible(request.id, caller)
        view = self.backend.view()
        return explain(
            workload,
            self.workloads.members(workload.id),
            view.last_cycle,
            self.workloads.evicted(workload.id),
            self.workloads.pod_group_owners(),
            caller,
        )

    def list_queues(self, request: pb.ListQueuesRequest, caller: Caller) -> pb.ListQueuesResponse:
        cycle = self._last_cycle()
        return pb.ListQueuesResponse(queues=queue_views(cycle.session, self.workloads.all()))

    def what_if(self, request: pb.WhatIfRequest, caller: Caller) -> pb.WhatIfResponse:
        return what_if(request, caller, self.backend, self.workloads, self.grouper)

    def get_cluster(self, request: pb.GetClusterRequest, caller: Caller) -> pb.Cluster:
        return cluster_view(self._last_cycle().session)

    # ------------------------------------------------------------------ helpers
    def _last_cycle(self) -> CycleRecord:
        """The cycle that fair shares, allocations and free GPUs come from.  Before this process
        has run one (a standby replica, which never schedules, or the leader still starting) the
        answer is UNAVAILABLE, so a client retries, reaching the leader in time, rather than read
        an empty cluster as the truth."""
        cycle = self.backend.view().last_cycle
        if cycle is None:
            raise ServiceError(
                ErrorCode.UNAVAILABLE,
                "this replica has not run a scheduling cycle (a standby, or starting); retry, "
                "or ask the leader (the holder of the scheduler's Lease)",
            )
        return cycle

    def _visible(self, workload_id: str, caller: Caller) -> pb.Workload:
        namespace, _ = split_id(workload_id)
        caller.require(namespace)
        workload = self.workloads.get(workload_id)
        if workload is None:
            raise ServiceError(ErrorCode.NOT_FOUND, f"workload {workload_id} does not exist", "id")
        return workload


def _matches(workload: pb.Workload, namespace: str, queue: str, caller: Caller) -> bool:
    if namespace and workload.namespace != namespace:
        return False
    if queue and workload.queue != queue:
        return False
    return caller.may_use(workload.namespace)


_TOKEN_PREFIX = "after:"


def _encode_page_token(last_id: str) -> str:
    return base64.urlsafe_b64encode((_TOKEN_PREFIX + last_id).encode()).decode().rstrip("=")


def _decode_page_token(token: str) -> str:
    try:
        text = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        text = ""
    if not text.startswith(_TOKEN_PREFIX):
        raise ServiceError(ErrorCode.INVALID_ARGUMENT, "not a page token from this server", "page_token")
    return text[len(_TOKEN_PREFIX) :]
