"""A small stand-in for the service layer, for testing the transport, the client and the CLI
without the real service.

`FakeService` implements `SchedulerServiceLike` over a dict of workloads, with canned queues and
explanations, and just enough behaviour to tell a caller apart from the service: it records every
call with its request and `Caller`, refuses bad input with the `ServiceError`s the real service
raises (field named), checks namespaces with `Caller.require` before existence, and can be told
to fail a method with any exception or to hold it (for deadlines).  Its watch streams count
themselves, so a test can wait until every stream is open and see that each one's stop event was
set.  `serve_fake` puts it behind kai-ray's own gRPC server on 127.0.0.1.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from kai_ray.rpc.auth import TlsConfig, TokenTable
from kai_ray.rpc.caller import Caller
from kai_ray.rpc.errors import ErrorCode, ServiceError
from kai_ray.rpc.transport import start_grpc_server
from kai_ray.v1 import scheduler_pb2 as pb

GPU = "nvidia.com/gpu"
#: How often a fake watch re-checks its stop event (the real service wakes on it; a fake may poll).
_STOP_POLL_SECONDS = 0.05
#: The longest a held call waits to be let go (`FakeService.hold`).
_HOLD_SECONDS = 30.0


def _queue(
    name: str, parent: str, quota: float, limit: float, fair: float, alloc: float, req: float
) -> pb.Queue:
    return pb.Queue(
        name=name,
        parent=parent,
        resources={
            GPU: pb.QueueResource(quota=quota, limit=limit, fair_share=fair, allocated=alloc, requested=req),
            "cpu": pb.QueueResource(quota=-1, limit=-1, fair_share=16, allocated=8, requested=12),
            "memory": pb.QueueResource(quota=-1, limit=-1, fair_share=64 * 2**30, allocated=0, requested=0),
        },
        workloads_running=1,
        workloads_pending=2,
    )


QUEUES = [
    _queue("research", "", 16, -1, 16, 10, 20),
    _queue("team-a", "research", 8, 12, 9, 6, 8),
    _queue("team-b", "research", 8, -1, 7, 4, 12),
]


@dataclass(frozen=True)
class Call:
    method: str
    request: object
    caller: Caller


class FakeService:
    """An in-memory stand-in for `kai_ray.rpc.api.SchedulerService`."""

    answers_from_memory = False
    """Its calls can be held (`hold`) to test deadlines: they must not block the server's loop."""

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self.calls: list[Call] = []
        self.workloads: dict[str, pb.Workload] = {}
        #: method name (the service's, e.g. "get_workload") -> what it raises instead of answering
        self.fail: dict[str, BaseException] = {}
        #: method name -> an event its calls wait for (at most 30 s) before answering
        self.hold: dict[str, threading.Event] = {}
        self.watching = 0  # open watch streams
        self.watch_stops = 0  # watch streams that ended because their stop event was set
        self._published: list[pb.Workload] = []
        self._ended = False

    # ------------------------------------------------------------------ bookkeeping for tests

    def add(
        self, namespace: str, name: str, queue_name: str, state: int, pods: int = 2, bound: int = 0
    ) -> pb.Workload:
        """A workload of ``pods`` pods asking one GPU each, ``bound`` of them on node-0."""
        workload_id = f"{namespace}/{name}"
        workload = pb.Workload(
            id=workload_id,
            namespace=namespace,
            name=name,
            queue=queue_name,
            state=state,  # type: ignore[arg-type]
            pods=pods,
            pods_bound=bound,
            min_available=pods,
            requested={GPU: float(pods)},
            reason="" if bound else "NoRoom",
            message="" if bound else f"gang needs {pods} more pods together",
            placements=[
                pb.PodPlacement(pod=f"{name}-{i}", node="node-0" if i < bound else "") for i in range(pods)
            ],
        )
        with self._lock:
            self.workloads[workload_id] = workload
        return workload

    def _record(self, method: str, request: object, caller: Caller) -> None:
        with self._lock:
            self.calls.append(Call(method, request, caller))
            failure = self.fail.get(method)
            held = self.hold.get(method)
        if held is not None:
            held.wait(_HOLD_SECONDS)
        if failure is not None:
            raise failure

    def methods_called(self) -> list[str]:
        with self._lock:
            return [call.method for call in self.calls]

    def publish(self, workload: pb.Workload) -> None:
        """Every open watch stream sends ``workload`` as a MODIFIED event."""
        with self._lock:
            self._published.append(workload)
            self._lock.notify_all()

    def end_watches(self) -> None:
        """Every watch stream, open or to come, ends after what it has to send (a finite watch)."""
        with self._lock:
            self._ended = True
            self._lock.notify_all()

    def wait_watching(self, count: int, timeout: float = 30.0) -> bool:
        with self._lock:
            return self._lock.wait_for(lambda: self.watching == count, timeout)

    # ------------------------------------------------------------------ the service

    def submit_workload(self, request: pb.SubmitWorkloadRequest, caller: Caller) -> pb.SubmitWorkloadResponse:
        self._record("submit_workload", request, caller)
        if not request.namespace:
            raise ServiceError(ErrorCode.INVALID_ARGUMENT, "a namespace is required", "namespace")
        caller.require(request.namespace)
        if request.WhichOneof("source") == "manifests":
            documents = len(request.manifests.documents)
            if not documents:
                raise ServiceError(ErrorCode.INVALID_ARGUMENT, "no documents", "manifests.documents")
            name, queue_name, pods = request.name or f"from-manifests-{documents}", "team-a", documents
        elif request.WhichOneof("source") == "workload":
            spec = request.workload
            if not spec.pod_sets:
                raise ServiceError(ErrorCode.INVALID_ARGUMENT, "at least one pod set", "workload.pod_sets")
            for index, pod_set in enumerate(spec.pod_sets):
                if pod_set.replicas < 1:
                    raise ServiceError(
                        ErrorCode.INVALID_ARGUMENT,
                        f"must be >= 1, got {pod_set.replicas}",
                        f"workload.pod_sets[{index}].replicas",
                    )
            if spec.queue not in {q.name for q in QUEUES}:
                raise ServiceError(
                    ErrorCode.INVALID_ARGUMENT, f"queue {spec.queue!r} does not exist", "workload.queue"
                )
            name, queue_name = request.name or spec.pod_sets[0].name, spec.queue
            pods = sum(pod_set.replicas for pod_set in spec.pod_sets)
        else:
            raise ServiceError(ErrorCode.INVALID_ARGUMENT, "workload or manifests is required", "source")
        workload_id = f"{request.namespace}/{name}"
        with self._lock:
            if workload_id in self.workloads:
                raise ServiceError(ErrorCode.ALREADY_EXISTS, f"{workload_id} already exists", "name")
            workload = self.add(request.namespace, name, queue_name, pb.PENDING, pods)
        return pb.SubmitWorkloadResponse(id=workload_id, workload=workload)

    def _find(self, workload_id: str, caller: Caller) -> pb.Workload:
        namespace, _, name = workload_id.partition("/")
        if not namespace or not name:
            raise ServiceError(ErrorCode.INVALID_ARGUMENT, "expected NAMESPACE/NAME", "id")
        caller.require(namespace)
        with self._lock:
            workload = self.workloads.get(workload_id)
        if workload is None:
            raise ServiceError(ErrorCode.NOT_FOUND, f"no workload {workload_id}", "id")
        return workload

    def get_workload(self, request: pb.GetWorkloadRequest, caller: Caller) -> pb.Workload:
        self._record("get_workload", request, caller)
        return self._find(request.id, caller)

    def list_workloads(self, request: pb.ListWorkloadsRequest, caller: Caller) -> pb.ListWorkloadsResponse:
        """Pages of `page_size` (2 at most here, so the CLI's paging is exercised)."""
        self._record("list_workloads", request, caller)
        if request.namespace:
            caller.require(request.namespace)
        with self._lock:
            matches = [
                w
                for _, w in sorted(self.workloads.items())
                if caller.may_use(w.namespace)
                and (not request.namespace or w.namespace == request.namespace)
                and (not request.queue or w.queue == request.queue)
                and (not request.state or w.state == request.state)
            ]
        start = int(request.page_token or 0)
        size = min(request.page_size or 2, 2)
        more = start + size < len(matches)
        return pb.ListWorkloadsResponse(
            workloads=matches[start : start + size], next_page_token=str(start + size) if more else ""
        )

    def watch_workloads(
        self, request: pb.WatchWorkloadsRequest, caller: Caller, stop: threading.Event
    ) -> Iterator[pb.WorkloadEvent]:
        """One ADDED per workload (unless resuming), then a MODIFIED per `publish`, until ``stop``
        is set or `end_watches`."""
        self._record("watch_workloads", request, caller)
        if request.namespace:
            caller.require(request.namespace)
        if request.resume_token == "stale":
            raise ServiceError(ErrorCode.OUT_OF_RANGE, "resume token too old", "resume_token")
        with self._lock:
            self.watching += 1
            seen = len(self._published)
            existing = [] if request.resume_token else [w for _, w in sorted(self.workloads.items())]
            self._lock.notify_all()
        try:
            for index, workload in enumerate(existing):
                yield pb.WorkloadEvent(
                    type=pb.WorkloadEvent.ADDED, workload=workload, resume_token=f"t{index}"
                )
            while True:
                with self._lock:
                    self._lock.wait_for(
                        lambda after=seen: len(self._published) > after or stop.is_set() or self._ended,
                        _STOP_POLL_SECONDS,
                    )
                    news = self._published[seen:]
                    seen += len(news)
                    ended = self._ended
                if stop.is_set():
                    with self._lock:
                        self.watch_stops += 1
                    return
                for workload in news:
                    yield pb.WorkloadEvent(
                        type=pb.WorkloadEvent.MODIFIED, workload=workload, resume_token=str(seen)
                    )
                if ended:
                    return
        finally:
            with self._lock:
                self.watching -= 1
                self._lock.notify_all()

    def cancel_workload(self, request: pb.CancelWorkloadRequest, caller: Caller) -> pb.Workload:
        self._record("cancel_workload", request, caller)
        workload = self._find(request.id, caller)
        with self._lock:
            if workload.state == pb.CANCELLED:
                raise ServiceError(ErrorCode.FAILED_PRECONDITION, f"{request.id} is already cancelled")
            workload.state = pb.CANCELLED
        return workload

    def explain(self, request: pb.ExplainRequest, caller: Caller) -> pb.Explanation:
        self._record("explain", request, caller)
        found = self._find(request.id, caller)
        return pb.Explanation(
            id=found.id,
            state=found.state,
            cause="NoRoom",
            message="gang needs 5 more pods together, only 1 fit",
            gang=pb.GangShortfall(min_available=5, pods_existing=5, pods_bound=0, pods_placeable=1),
            predicates=[
                pb.PredicateFailure(
                    predicate="NodeResourcesFit",
                    nodes=3,
                    message="insufficient nvidia.com/gpu (the pod asks 8)",
                )
            ],
            nodes_total=4,
            queue=QUEUES[2],
            ahead=[pb.WorkloadRef(id="team-b/first", queue="team-b", priority=50)],
            to_free={GPU: 3.0},
        )

    def list_queues(self, request: pb.ListQueuesRequest, caller: Caller) -> pb.ListQueuesResponse:
        self._record("list_queues", request, caller)
        return pb.ListQueuesResponse(queues=QUEUES)

    def what_if(self, request: pb.WhatIfRequest, caller: Caller) -> pb.WhatIfResponse:
        self._record("what_if", request, caller)
        binds = [
            pb.Bind(workload=f"{w.namespace}/{w.name or 'x'}", pod=f"{w.name}-0", node="node-9")
            for w in request.workloads
        ]
        evictions = [
            pb.Eviction(
                workload="team-a/victim", pod="victim-0", node=node, cause="reclaim", for_workload="x"
            )
            for node in request.remove_nodes
        ]
        pipelined = [
            pb.Bind(workload="x", pod="x-0", node=node) for node in request.remove_nodes
        ]  # the workload the evictions make room for
        with self._lock:
            workloads = list(self.workloads.values())
        return pb.WhatIfResponse(binds=binds, evictions=evictions, pipelined=pipelined, workloads=workloads)

    def get_cluster(self, request: pb.GetClusterRequest, caller: Caller) -> pb.Cluster:
        self._record("get_cluster", request, caller)
        return pb.Cluster(
            node_pools=[pb.NodePool(name="", nodes=4, gpus=32, gpus_allocated=10, gpus_free=22)]
        )


@dataclass(frozen=True)
class FakeServer:
    address: str
    service: FakeService


@contextmanager
def serve_fake(
    service: FakeService | None = None,
    tokens: dict[str, Caller] | None = None,
    tls: TlsConfig | None = None,
) -> Iterator[FakeServer]:
    """``service`` (a new one by default) behind kai-ray's gRPC server on a free 127.0.0.1 port,
    with these bearer tokens and this TLS if given; held calls are let go on exit."""
    service = service or FakeService()
    table = TokenTable(list(tokens.items())) if tokens is not None else None
    with start_grpc_server(service, "127.0.0.1:0", tls=tls, tokens=table) as server:
        try:
            yield FakeServer(f"127.0.0.1:{server.port}", service)
        finally:
            for held in service.hold.values():
                held.set()
