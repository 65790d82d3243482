"""Helpers of the gRPC transport tests (tests/rpc): a fake service layer and throw-away PKI.

`FakeService` implements `SchedulerServiceLike` with just enough behaviour to tell the transport
apart from the service: it records every call with its `Caller`, refuses bad input with the
`ServiceError`s the real service raises (field named), checks namespaces with `Caller.require`,
and can be told to fail a method with any exception.  Its watch streams count themselves, so a
test can wait until every stream is open and see that each one's stop event was set.
"""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from kai_ray.service.caller import Caller
from kai_ray.service.errors import ErrorCode, ServiceError
from kai_ray.v1 import scheduler_pb2 as pb

QUEUES = ("default", "team-a", "team-b")
#: How often a fake watch re-checks its stop event (the real service wakes on it; a fake may poll).
_STOP_POLL_SECONDS = 0.05


@dataclass(frozen=True)
class Call:
    method: str
    request: object
    caller: Caller


class FakeService:
    """An in-memory stand-in for `kai_ray.service.api.SchedulerService`."""

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self.calls: list[Call] = []
        self.workloads: dict[str, pb.Workload] = {}
        #: method name (the service's, e.g. "get_workload") -> what it raises instead of answering
        self.fail: dict[str, BaseException] = {}
        self.watching = 0  # open watch streams
        self.watch_stops = 0  # watch streams that ended because their stop event was set
        self._published: list[pb.Workload] = []

    # ------------------------------------------------------------------ bookkeeping for tests

    def _record(self, method: str, request: object, caller: Caller) -> None:
        with self._lock:
            self.calls.append(Call(method, request, caller))
            failure = self.fail.get(method)
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
            if not request.manifests.documents:
                raise ServiceError(ErrorCode.INVALID_ARGUMENT, "no documents", "manifests.documents")
            name, queue, pods = request.name or "manifests", "default", len(request.manifests.documents)
        elif request.WhichOneof("source") == "workload":
            spec = request.workload
            if spec.queue not in QUEUES:
                raise ServiceError(ErrorCode.INVALID_ARGUMENT, f"no queue {spec.queue!r}", "workload.queue")
            if not spec.pod_sets:
                raise ServiceError(ErrorCode.INVALID_ARGUMENT, "at least one pod set", "workload.pod_sets")
            for index, pod_set in enumerate(spec.pod_sets):
                if pod_set.replicas < 1:
                    raise ServiceError(
                        ErrorCode.INVALID_ARGUMENT, "must be >= 1", f"workload.pod_sets[{index}].replicas"
                    )
            name, queue = request.name or spec.pod_sets[0].name, spec.queue
            pods = sum(pod_set.replicas for pod_set in spec.pod_sets)
        else:
            raise ServiceError(ErrorCode.INVALID_ARGUMENT, "workload or manifests is required", "source")
        workload_id = f"{request.namespace}/{name}"
        workload = pb.Workload(
            id=workload_id, namespace=request.namespace, name=name, queue=queue, pods=pods, state=pb.PENDING
        )
        with self._lock:
            if workload_id in self.workloads:
                raise ServiceError(ErrorCode.ALREADY_EXISTS, f"{workload_id} exists", "name")
            self.workloads[workload_id] = workload
        return pb.SubmitWorkloadResponse(id=workload_id, workload=workload)

    def _find(self, workload_id: str, caller: Caller) -> pb.Workload:
        namespace, _, name = workload_id.partition("/")
        if not namespace or not name:
            raise ServiceError(ErrorCode.INVALID_ARGUMENT, "expected NAMESPACE/NAME", "id")
        caller.require(namespace)
        with self._lock:
            workload = self.workloads.get(workload_id)
        if workload is None:
            raise ServiceError(ErrorCode.NOT_FOUND, f"no workload {workload_id}")
        return workload

    def get_workload(self, request: pb.GetWorkloadRequest, caller: Caller) -> pb.Workload:
        self._record("get_workload", request, caller)
        return self._find(request.id, caller)

    def list_workloads(self, request: pb.ListWorkloadsRequest, caller: Caller) -> pb.ListWorkloadsResponse:
        self._record("list_workloads", request, caller)
        if request.namespace:
            caller.require(request.namespace)
        with self._lock:
            found = [w for _, w in sorted(self.workloads.items()) if caller.may_use(w.namespace)]
        return pb.ListWorkloadsResponse(
            workloads=[w for w in found if not request.namespace or w.namespace == request.namespace]
        )

    def watch_workloads(
        self, request: pb.WatchWorkloadsRequest, caller: Caller, stop: threading.Event
    ) -> Iterator[pb.WorkloadEvent]:
        self._record("watch_workloads", request, caller)
        if request.namespace:
            caller.require(request.namespace)
        if request.resume_token == "stale":
            raise ServiceError(ErrorCode.OUT_OF_RANGE, "resume token too old", "resume_token")
        with self._lock:
            self.watching += 1
            seen = len(self._published)
            self._lock.notify_all()
        try:
            yield pb.WorkloadEvent(
                type=pb.WorkloadEvent.ADDED, workload=pb.Workload(id="watch/hello"), resume_token="0"
            )
            while True:
                with self._lock:
                    self._lock.wait_for(
                        lambda after=seen: len(self._published) > after or stop.is_set(), _STOP_POLL_SECONDS
                    )
                    news = self._published[seen:]
                    seen += len(news)
                if stop.is_set():
                    with self._lock:
                        self.watch_stops += 1
                    return
                for workload in news:
                    yield pb.WorkloadEvent(
                        type=pb.WorkloadEvent.MODIFIED, workload=workload, resume_token=str(seen)
                    )
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
        workload = self._find(request.id, caller)
        return pb.Explanation(id=workload.id, state=workload.state, cause="NoRoom")

    def list_queues(self, request: pb.ListQueuesRequest, caller: Caller) -> pb.ListQueuesResponse:
        self._record("list_queues", request, caller)
        return pb.ListQueuesResponse(
            queues=[
                pb.Queue(
                    name=name,
                    parent="" if name == "default" else "default",
                    resources={"nvidia.com/gpu": pb.QueueResource(quota=8, limit=-1)},
                )
                for name in QUEUES
            ]
        )

    def what_if(self, request: pb.WhatIfRequest, caller: Caller) -> pb.WhatIfResponse:
        self._record("what_if", request, caller)
        return pb.WhatIfResponse(
            binds=[
                pb.Bind(workload=f"{w.namespace}/{w.name}", pod=f"{w.name}-0", node="node-0")
                for w in request.workloads
            ]
        )

    def get_cluster(self, request: pb.GetClusterRequest, caller: Caller) -> pb.Cluster:
        self._record("get_cluster", request, caller)
        return pb.Cluster(node_pools=[pb.NodePool(name="", nodes=2, gpus=16, gpus_free=16)])


# ---------------------------------------------------------------------------------- PKI


@dataclass(frozen=True)
class Pki:
    """PEM files of a test CA, a server certificate for 127.0.0.1/localhost and client certificates."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path  # signed by ``ca``
    client_key: Path
    rogue_ca: Path  # an unrelated CA
    rogue_cert: Path  # a client certificate signed by ``rogue_ca``
    rogue_key: Path


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def _make_ca(directory: Path, name: str) -> None:
    _openssl(
        "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
        "-keyout", f"{name}.key", "-out", f"{name}.crt", "-subj", f"/CN={name}", "-days", "2",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        cwd=directory,
    )  # fmt: skip


def _make_leaf(directory: Path, name: str, ca: str, extensions: str) -> None:
    (directory / f"{name}.ext").write_text(extensions)
    _openssl(
        "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
        "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}",
        cwd=directory,
    )  # fmt: skip
    _openssl(
        "x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.crt", "-CAkey", f"{ca}.key",
        "-CAcreateserial", "-out", f"{name}.crt", "-days", "2", "-extfile", f"{name}.ext",
        cwd=directory,
    )  # fmt: skip


def make_pki(directory: Path) -> Pki:
    """Create the CA and certificates with the ``openssl`` CLI (the ``cryptography`` package is
    not a dependency here)."""
    directory.mkdir(parents=True, exist_ok=True)
    _make_ca(directory, "ca")
    _make_ca(directory, "rogue-ca")
    _make_leaf(
        directory, "server", "ca", "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n"
    )
    _make_leaf(directory, "client", "ca", "extendedKeyUsage=clientAuth\n")
    _make_leaf(directory, "rogue", "rogue-ca", "extendedKeyUsage=clientAuth\n")
    return Pki(
        ca=directory / "ca.crt",
        server_cert=directory / "server.crt",
        server_key=directory / "server.key",
        client_cert=directory / "client.crt",
        client_key=directory / "client.key",
        rogue_ca=directory / "rogue-ca.crt",
        rogue_cert=directory / "rogue.crt",
        rogue_key=directory / "rogue.key",
    )
