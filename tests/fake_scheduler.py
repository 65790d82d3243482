"""A small stand-in for the API, for testing the client and the CLI without the real service.

`FakeService` has the service layer's methods (request, caller) over a dict of workloads, with
canned queues and explanations; `serve_fake` puts it behind a real gRPC server on 127.0.0.1 with a
servicer written here (so client tests do not depend on kai-ray's own server), mapping
`ServiceError` to a status of the same name and the field to `kai-ray-field` trailing metadata,
as the API's contract says.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from concurrent import futures
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import grpc

from kai_ray.service.caller import Caller
from kai_ray.service.errors import ErrorCode, ServiceError
from kai_ray.v1 import scheduler_pb2 as pb
from kai_ray.v1 import scheduler_pb2_grpc as pb_grpc

GPU = "nvidia.com/gpu"


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


@dataclass
class FakeService:
    """The service layer's operations, in memory; `calls` records (method, caller) in order."""

    workloads: dict[str, pb.Workload] = field(default_factory=dict)
    calls: list[tuple[str, Caller]] = field(default_factory=list)
    events: queue.Queue[pb.WorkloadEvent | None] = field(default_factory=queue.Queue)
    watching: threading.Event = field(default_factory=threading.Event)

    def add(
        self, namespace: str, name: str, queue_name: str, state: int, pods: int = 2, bound: int = 0
    ) -> None:
        workload_id = f"{namespace}/{name}"
        self.workloads[workload_id] = pb.Workload(
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

    def _record(self, method: str, caller: Caller) -> None:
        self.calls.append((method, caller))

    def submit_workload(self, request: pb.SubmitWorkloadRequest, caller: Caller) -> pb.SubmitWorkloadResponse:
        self._record("submit_workload", caller)
        if not request.namespace:
            raise ServiceError(ErrorCode.INVALID_ARGUMENT, "required", "namespace")
        caller.require(request.namespace)
        if request.HasField("manifests"):
            name = request.name or f"from-manifests-{len(request.manifests.documents)}"
            queue_name = "team-a"
            pods = len(request.manifests.documents)
        else:
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
            name = request.name or spec.pod_sets[0].name
            queue_name = spec.queue
            pods = sum(p.replicas for p in spec.pod_sets)
        workload_id = f"{request.namespace}/{name}"
        if workload_id in self.workloads:
            raise ServiceError(ErrorCode.ALREADY_EXISTS, f"{workload_id} already exists", "name")
        self.add(request.namespace, name, queue_name, pb.PENDING, pods)
        return pb.SubmitWorkloadResponse(id=workload_id, workload=self.workloads[workload_id])

    def _find(self, workload_id: str, caller: Caller) -> pb.Workload:
        found = self.workloads.get(workload_id)
        if found is None:
            raise ServiceError(ErrorCode.NOT_FOUND, f"no workload {workload_id}", "id")
        caller.require(found.namespace)
        return found

    def get_workload(self, request: pb.GetWorkloadRequest, caller: Caller) -> pb.Workload:
        self._record("get_workload", caller)
        return self._find(request.id, caller)

    def list_workloads(self, request: pb.ListWorkloadsRequest, caller: Caller) -> pb.ListWorkloadsResponse:
        """Pages of `page_size` (2 by default here, so the CLI's paging is exercised)."""
        self._record("list_workloads", caller)
        matches = [
            w
            for key, w in sorted(self.workloads.items())
            if caller.may_use(w.namespace)
            and (not request.namespace or w.namespace == request.namespace)
            and (not request.queue or w.queue == request.queue)
            and (not request.state or w.state == request.state)
        ]
        start = int(request.page_token or 0)
        size = min(request.page_size or 2, 2)
        page = matches[start : start + size]
        more = start + size < len(matches)
        return pb.ListWorkloadsResponse(workloads=page, next_page_token=str(start + size) if more else "")

    def watch_workloads(
        self, request: pb.WatchWorkloadsRequest, caller: Caller, stop: threading.Event
    ) -> Iterator[pb.WorkloadEvent]:
        """One ADDED per workload (unless resuming), then whatever `events` is fed; None ends it."""
        self._record("watch_workloads", caller)
        if request.resume_token == "gone":
            raise ServiceError(
                ErrorCode.OUT_OF_RANGE, "resume token too old; list and watch again", "resume_token"
            )
        if not request.resume_token:
            for index, (_, w) in enumerate(sorted(self.workloads.items())):
                yield pb.WorkloadEvent(type=pb.WorkloadEvent.ADDED, workload=w, resume_token=f"t{index}")
        self.watching.set()
        while not stop.is_set():
            try:
                event = self.events.get(timeout=0.05)
            except queue.Empty:
                continue
            if event is None:
                return
            yield event

    def cancel_workload(self, request: pb.CancelWorkloadRequest, caller: Caller) -> pb.Workload:
        self._record("cancel_workload", caller)
        found = self._find(request.id, caller)
        found.state = pb.CANCELLED
        return found

    def explain(self, request: pb.ExplainRequest, caller: Caller) -> pb.Explanation:
        self._record("explain", caller)
        found = self._find(request.id, caller)
        return pb.Explanation(
            id=found.id,
            state=found.state,
            cause="NoRoom",
            message="gang needs 5 more pods together, only 1 fit",
            gang=pb.GangShortfall(min_available=5, pods_existing=5, pods_bound=0, pods_placeable=1),
            predicates=[
                pb.PredicateFailure(predicate="resources", nodes=3, message="not enough nvidia.com/gpu")
            ],
            nodes_total=4,
            queue=QUEUES[2],
            ahead=[pb.WorkloadRef(id="team-b/first", queue="team-b", priority=50)],
            to_free={GPU: 3.0},
        )

    def list_queues(self, request: pb.ListQueuesRequest, caller: Caller) -> pb.ListQueuesResponse:
        self._record("list_queues", caller)
        return pb.ListQueuesResponse(queues=QUEUES)

    def what_if(self, request: pb.WhatIfRequest, caller: Caller) -> pb.WhatIfResponse:
        self._record("what_if", caller)
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
        return pb.WhatIfResponse(binds=binds, evictions=evictions, workloads=list(self.workloads.values()))

    def get_cluster(self, request: pb.GetClusterRequest, caller: Caller) -> pb.Cluster:
        self._record("get_cluster", caller)
        return pb.Cluster(
            node_pools=[pb.NodePool(name="", nodes=4, gpus=32, gpus_allocated=10, gpus_free=22)]
        )


class FakeServicer(pb_grpc.SchedulerServicer):
    """gRPC over `FakeService`: tokens map to callers; metadata of every call is kept in `seen`.

    `GetCluster` blocks until `release` is set, for deadline tests."""

    def __init__(self, service: FakeService, tokens: dict[str, Caller] | None = None) -> None:
        self.service = service
        self.tokens = tokens
        self.seen: list[dict[str, str]] = []
        self.release = threading.Event()

    def _caller(self, context: Any) -> Caller:
        metadata = {key: value for key, value in context.invocation_metadata()}
        self.seen.append(metadata)
        if self.tokens is None:
            return Caller()
        header = metadata.get("authorization", "")
        caller = self.tokens.get(header.removeprefix("Bearer ")) if header.startswith("Bearer ") else None
        if caller is None:
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "no or unknown token")
        return caller

    def _call(self, method: str, request: Any, context: Any) -> Any:
        caller = self._caller(context)
        try:
            return getattr(self.service, method)(request, caller)
        except ServiceError as exc:
            _abort(context, exc)

    def SubmitWorkload(self, request: Any, context: Any) -> Any:
        return self._call("submit_workload", request, context)

    def GetWorkload(self, request: Any, context: Any) -> Any:
        return self._call("get_workload", request, context)

    def ListWorkloads(self, request: Any, context: Any) -> Any:
        return self._call("list_workloads", request, context)

    def CancelWorkload(self, request: Any, context: Any) -> Any:
        return self._call("cancel_workload", request, context)

    def Explain(self, request: Any, context: Any) -> Any:
        return self._call("explain", request, context)

    def ListQueues(self, request: Any, context: Any) -> Any:
        return self._call("list_queues", request, context)

    def WhatIf(self, request: Any, context: Any) -> Any:
        return self._call("what_if", request, context)

    def GetCluster(self, request: Any, context: Any) -> Any:
        self._caller(context)
        self.release.wait(30)
        return self.service.get_cluster(request, Caller())

    def WatchWorkloads(self, request: Any, context: Any) -> Iterator[pb.WorkloadEvent]:
        caller = self._caller(context)
        stop = threading.Event()
        context.add_callback(stop.set)
        try:
            yield from self.service.watch_workloads(request, caller, stop)
        except ServiceError as exc:
            _abort(context, exc)


def _abort(context: Any, exc: ServiceError) -> None:
    if exc.field:
        context.set_trailing_metadata((("kai-ray-field", exc.field),))
    context.abort(getattr(grpc.StatusCode, exc.code.value), exc.message)


@dataclass
class FakeServer:
    address: str
    servicer: FakeServicer
    service: FakeService


@contextmanager
def serve_fake(
    service: FakeService | None = None, tokens: dict[str, Caller] | None = None
) -> Iterator[FakeServer]:
    """A real gRPC server on a free 127.0.0.1 port, stopped (and GetCluster released) on exit."""
    service = service or FakeService()
    servicer = FakeServicer(service, tokens)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    pb_grpc.add_SchedulerServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield FakeServer(f"127.0.0.1:{port}", servicer, service)
    finally:
        servicer.release.set()
        service.events.put(None)
        server.stop(grace=None)
