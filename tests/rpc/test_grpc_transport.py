"""The gRPC transport over a real socket: every RPC reaches the service, errors become statuses,
health and reflection answer, many watch streams coexist, bad input never hurts the server."""

from __future__ import annotations

import logging
import socket
import threading
import time
from concurrent import futures

import grpc
import pytest
from fake_scheduler import FakeService
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from kai_ray.rpc.caller import ANYONE
from kai_ray.rpc.errors import ErrorCode, ServiceError
from kai_ray.rpc.transport import (
    FIELD_METADATA_KEY,
    SCHEDULER_SERVICE,
    GrpcStartError,
    RunningServer,
    start_grpc_server,
)
from kai_ray.v1 import scheduler_pb2 as pb
from kai_ray.v1 import scheduler_pb2_grpc as pb_grpc

pytestmark = pytest.mark.grpc

TIMEOUT = 10.0


def submit_request(namespace: str = "team-a", name: str = "", replicas: int = 2) -> pb.SubmitWorkloadRequest:
    return pb.SubmitWorkloadRequest(
        namespace=namespace,
        name=name,
        workload=pb.WorkloadSpec(
            queue="team-a",
            pod_sets=[
                pb.PodSet(
                    name="trainer",
                    replicas=replicas,
                    template=pb.PodTemplate(requests={"nvidia.com/gpu": "1"}),
                )
            ],
        ),
    )


@pytest.fixture
def stub(channel: grpc.Channel) -> pb_grpc.SchedulerStub:
    return pb_grpc.SchedulerStub(channel)


def rpc_error(call: object) -> grpc.RpcError:
    """Run ``call`` (a zero-argument callable), which must fail, and return its error."""
    assert callable(call)
    with pytest.raises(grpc.RpcError) as caught:
        call()
    return caught.value


def field_metadata(error: grpc.RpcError) -> str | None:
    trailing = error.trailing_metadata() or ()  # type: ignore[attr-defined]
    values = [value for key, value in trailing if key == FIELD_METADATA_KEY]
    return values[0] if values else None


# -------------------------------------------------------------------------------- the RPCs


def test_the_bound_port_is_real_and_every_rpc_reaches_the_service(
    server: RunningServer, stub: pb_grpc.SchedulerStub, service: FakeService
) -> None:
    assert server.port > 0
    submitted = stub.SubmitWorkload(submit_request(name="job"), timeout=TIMEOUT)
    assert submitted.id == "team-a/job" and submitted.workload.pods == 2

    assert stub.GetWorkload(pb.GetWorkloadRequest(id="team-a/job"), timeout=TIMEOUT).queue == "team-a"
    listed = stub.ListWorkloads(pb.ListWorkloadsRequest(namespace="team-a"), timeout=TIMEOUT)
    assert [w.id for w in listed.workloads] == ["team-a/job"]
    assert stub.Explain(pb.ExplainRequest(id="team-a/job"), timeout=TIMEOUT).cause == "NoRoom"
    queues = stub.ListQueues(pb.ListQueuesRequest(), timeout=TIMEOUT)
    assert [q.name for q in queues.queues] == ["research", "team-a", "team-b"]
    assert queues.queues[1].resources["nvidia.com/gpu"].limit == 12
    what_if = stub.WhatIf(pb.WhatIfRequest(workloads=[submit_request(name="maybe")]), timeout=TIMEOUT)
    assert [(b.workload, b.node) for b in what_if.binds] == [("team-a/maybe", "node-9")]
    assert stub.GetCluster(pb.GetClusterRequest(), timeout=TIMEOUT).node_pools[0].gpus == 32
    stream = stub.WatchWorkloads(pb.WatchWorkloadsRequest(namespace="team-a"), timeout=TIMEOUT)
    first = next(stream)
    assert first.type == pb.WorkloadEvent.ADDED and first.workload.id == "team-a/job"
    stream.cancel()
    cancelled = stub.CancelWorkload(pb.CancelWorkloadRequest(id="team-a/job"), timeout=TIMEOUT)
    assert cancelled.state == pb.CANCELLED

    assert service.methods_called() == [
        "submit_workload",
        "get_workload",
        "list_workloads",
        "explain",
        "list_queues",
        "what_if",
        "get_cluster",
        "watch_workloads",
        "cancel_workload",
    ]
    # The request arrived intact, and without a token table every caller is ANYONE.
    request = service.calls[0].request
    assert isinstance(request, pb.SubmitWorkloadRequest)
    assert request.workload.pod_sets[0].template.requests["nvidia.com/gpu"] == "1"
    assert {call.caller for call in service.calls} == {ANYONE}


def test_bad_input_is_invalid_argument_naming_the_field(stub: pb_grpc.SchedulerStub) -> None:
    error = rpc_error(lambda: stub.SubmitWorkload(submit_request(replicas=0), timeout=TIMEOUT))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.details() == "workload.pod_sets[0].replicas: must be >= 1, got 0"
    assert field_metadata(error) == "workload.pod_sets[0].replicas"

    error = rpc_error(
        lambda: stub.SubmitWorkload(pb.SubmitWorkloadRequest(namespace="team-a"), timeout=TIMEOUT)
    )
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT and field_metadata(error) == "source"


def test_not_found_and_failed_precondition(stub: pb_grpc.SchedulerStub) -> None:
    error = rpc_error(lambda: stub.GetWorkload(pb.GetWorkloadRequest(id="team-a/nothing"), timeout=TIMEOUT))
    assert error.code() == grpc.StatusCode.NOT_FOUND
    assert error.details() == "id: no workload team-a/nothing"
    assert field_metadata(error) == "id"

    stub.SubmitWorkload(submit_request(name="once"), timeout=TIMEOUT)
    stub.CancelWorkload(pb.CancelWorkloadRequest(id="team-a/once"), timeout=TIMEOUT)
    error = rpc_error(
        lambda: stub.CancelWorkload(pb.CancelWorkloadRequest(id="team-a/once"), timeout=TIMEOUT)
    )
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION

    error = rpc_error(lambda: stub.SubmitWorkload(submit_request(name="once"), timeout=TIMEOUT))
    assert error.code() == grpc.StatusCode.ALREADY_EXISTS


@pytest.mark.parametrize("code", list(ErrorCode))
def test_every_error_code_is_the_status_of_the_same_name(
    code: ErrorCode, stub: pb_grpc.SchedulerStub, service: FakeService
) -> None:
    service.fail["explain"] = ServiceError(code, "refused on purpose", "id")
    error = rpc_error(lambda: stub.Explain(pb.ExplainRequest(id="a/b"), timeout=TIMEOUT))
    assert error.code() == grpc.StatusCode[code.value]
    assert error.details() == "id: refused on purpose"
    assert field_metadata(error) == "id"


def test_permission_denied_from_the_service_is_passed_on(
    stub: pb_grpc.SchedulerStub, service: FakeService
) -> None:
    service.fail["list_workloads"] = ServiceError(
        ErrorCode.PERMISSION_DENIED, "the caller may not use namespace 'x'", "namespace"
    )
    error = rpc_error(lambda: stub.ListWorkloads(pb.ListWorkloadsRequest(namespace="x"), timeout=TIMEOUT))
    assert error.code() == grpc.StatusCode.PERMISSION_DENIED
    assert error.details() == "namespace: the caller may not use namespace 'x'"


def test_a_non_ascii_field_is_escaped_in_metadata_not_lost(
    stub: pb_grpc.SchedulerStub, service: FakeService
) -> None:
    field = 'workload.pod_sets[0].template.requests["gpü"]'
    service.fail["submit_workload"] = ServiceError(ErrorCode.INVALID_ARGUMENT, "unknown resource", field)
    error = rpc_error(lambda: stub.SubmitWorkload(submit_request(), timeout=TIMEOUT))
    assert error.details() == f"{field}: unknown resource"
    assert field_metadata(error) == 'workload.pod_sets[0].template.requests["gp\\xfc"]'


def test_an_unexpected_exception_is_internal_with_one_log_record_and_no_detail_for_the_client(
    stub: pb_grpc.SchedulerStub, service: FakeService, caplog: pytest.LogCaptureFixture
) -> None:
    service.fail["get_cluster"] = ZeroDivisionError("secret-internal-detail")
    with caplog.at_level(logging.DEBUG, logger="kai_ray"):
        error = rpc_error(lambda: stub.GetCluster(pb.GetClusterRequest(), timeout=TIMEOUT))
    assert error.code() == grpc.StatusCode.INTERNAL
    assert "secret-internal-detail" not in (error.details() or "")
    assert "ZeroDivisionError" not in (error.details() or "")
    records = [r for r in caplog.records if r.name == "kai_ray.rpc.transport"]
    assert len(records) == 1 and records[0].levelno == logging.ERROR
    assert records[0].exc_info is not None and records[0].exc_info[0] is ZeroDivisionError
    # The server is unharmed.
    assert stub.ListQueues(pb.ListQueuesRequest(), timeout=TIMEOUT).queues


def test_watch_errors_are_statuses_too(stub: pb_grpc.SchedulerStub, service: FakeService) -> None:
    stream = stub.WatchWorkloads(pb.WatchWorkloadsRequest(resume_token="stale"), timeout=TIMEOUT)
    error = rpc_error(lambda: next(stream))
    assert error.code() == grpc.StatusCode.OUT_OF_RANGE
    assert error.details() == "resume_token: resume token too old"
    assert field_metadata(error) == "resume_token"

    service.fail["watch_workloads"] = RuntimeError("boom")
    stream = stub.WatchWorkloads(pb.WatchWorkloadsRequest(), timeout=TIMEOUT)
    error = rpc_error(lambda: next(stream))
    assert error.code() == grpc.StatusCode.INTERNAL and "boom" not in (error.details() or "")


# -------------------------------------------------------------------------------- health, reflection


def test_health_is_serving_for_the_server_and_the_scheduler(channel: grpc.Channel) -> None:
    health = health_pb2_grpc.HealthStub(channel)
    for name in ("", SCHEDULER_SERVICE):
        answer = health.Check(health_pb2.HealthCheckRequest(service=name), timeout=TIMEOUT)
        assert answer.status == health_pb2.HealthCheckResponse.SERVING, name
    error = rpc_error(lambda: health.Check(health_pb2.HealthCheckRequest(service="nope"), timeout=TIMEOUT))
    assert error.code() == grpc.StatusCode.NOT_FOUND


def reflect(
    channel: grpc.Channel, request: reflection_pb2.ServerReflectionRequest
) -> reflection_pb2.ServerReflectionResponse:
    stub = reflection_pb2_grpc.ServerReflectionStub(channel)
    return next(iter(stub.ServerReflectionInfo(iter([request]), timeout=TIMEOUT)))


def test_reflection_lists_and_describes_the_scheduler(channel: grpc.Channel) -> None:
    listed = reflect(channel, reflection_pb2.ServerReflectionRequest(list_services=""))
    names = {s.name for s in listed.list_services_response.service}
    assert {SCHEDULER_SERVICE, "grpc.health.v1.Health", "grpc.reflection.v1alpha.ServerReflection"} <= names
    described = reflect(
        channel, reflection_pb2.ServerReflectionRequest(file_containing_symbol="kai_ray.v1.Scheduler")
    )
    files = described.file_descriptor_response.file_descriptor_proto
    assert any(b"SubmitWorkload" in f for f in files)


# -------------------------------------------------------------------------------- streams


def test_200_concurrent_watch_streams_each_receive_events_and_stop_when_cancelled(
    server: RunningServer, service: FakeService
) -> None:
    count = 200
    channel = grpc.insecure_channel(f"127.0.0.1:{server.port}")
    stub = pb_grpc.SchedulerStub(channel)
    streams = [stub.WatchWorkloads(pb.WatchWorkloadsRequest(), timeout=60) for _ in range(count)]
    received: list[list[str]] = [[] for _ in range(count)]
    all_modified = threading.Barrier(count + 1, timeout=60)

    def read(index: int) -> None:
        for event in streams[index]:
            received[index].append(pb.WorkloadEvent.Type.Name(event.type))
            if event.type == pb.WorkloadEvent.MODIFIED:
                all_modified.wait()
                return

    with futures.ThreadPoolExecutor(max_workers=count) as readers:
        done = [readers.submit(read, i) for i in range(count)]
        assert service.wait_watching(count, timeout=60), f"only {service.watching} of {count} streams opened"
        # Every stream holds a server thread now; unary calls must still get through.
        assert stub.ListQueues(pb.ListQueuesRequest(), timeout=TIMEOUT).queues
        service.publish(pb.Workload(id="team-a/news"))
        all_modified.wait()
        for future in done:
            future.result(timeout=TIMEOUT)
    assert all(events == ["ADDED", "MODIFIED"] for events in received)
    for stream in streams:
        stream.cancel()
    # Each cancel reaches the service as its stop event: every service iterator returns.
    assert service.wait_watching(0, timeout=30), f"{service.watching} watch(es) still open"
    assert service.watch_stops == count
    channel.close()


def test_watch_streams_beyond_the_limit_are_refused_and_unary_calls_still_served(
    service: FakeService,
) -> None:
    with (
        start_grpc_server(service, "127.0.0.1:0", max_watch_streams=2) as server,
        grpc.insecure_channel(f"127.0.0.1:{server.port}") as channel,
    ):
        stub = pb_grpc.SchedulerStub(channel)
        open_streams = [stub.WatchWorkloads(pb.WatchWorkloadsRequest(), timeout=TIMEOUT) for _ in range(2)]
        for stream in open_streams:
            assert next(stream).type == pb.WorkloadEvent.ADDED
        third = stub.WatchWorkloads(pb.WatchWorkloadsRequest(), timeout=TIMEOUT)
        error = rpc_error(lambda: next(third))
        assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert stub.GetCluster(pb.GetClusterRequest(), timeout=TIMEOUT).node_pools
        open_streams[0].cancel()
        assert service.wait_watching(1)
        again = stub.WatchWorkloads(pb.WatchWorkloadsRequest(), timeout=TIMEOUT)
        assert next(again).type == pb.WorkloadEvent.ADDED  # the slot was given back
        again.cancel()
        open_streams[1].cancel()


def test_stop_ends_watch_streams_at_once_with_unavailable(service: FakeService) -> None:
    server = start_grpc_server(service, "127.0.0.1:0")
    channel = grpc.insecure_channel(f"127.0.0.1:{server.port}")
    stream = pb_grpc.SchedulerStub(channel).WatchWorkloads(pb.WatchWorkloadsRequest(), timeout=60)
    assert next(stream).type == pb.WorkloadEvent.ADDED
    started = time.monotonic()
    server.stop(grace=30.0)
    # The stream did not hold the server for its grace period: stop ended it.
    assert time.monotonic() - started < 15.0
    error = rpc_error(lambda: next(stream))
    assert error.code() == grpc.StatusCode.UNAVAILABLE
    assert service.watching == 0 and service.watch_stops == 1
    server.stop()  # idempotent
    channel.close()


# -------------------------------------------------------------------------------- bad input, limits


def test_a_burst_of_invalid_calls_gets_clean_statuses_and_the_server_keeps_serving(
    server: RunningServer, channel: grpc.Channel, stub: pb_grpc.SchedulerStub
) -> None:
    raw_submit = channel.unary_unary("/kai_ray.v1.Scheduler/SubmitWorkload")  # bytes in, bytes out
    unknown = channel.unary_unary("/kai_ray.v1.Scheduler/NoSuchMethod")
    calls = [
        (
            lambda: stub.SubmitWorkload(pb.SubmitWorkloadRequest(), timeout=TIMEOUT),
            grpc.StatusCode.INVALID_ARGUMENT,
        ),
        (
            lambda: stub.SubmitWorkload(submit_request(replicas=-3), timeout=TIMEOUT),
            grpc.StatusCode.INVALID_ARGUMENT,
        ),
        (
            lambda: stub.GetWorkload(pb.GetWorkloadRequest(id="no-slash"), timeout=TIMEOUT),
            grpc.StatusCode.INVALID_ARGUMENT,
        ),
        (lambda: stub.Explain(pb.ExplainRequest(id="a/none"), timeout=TIMEOUT), grpc.StatusCode.NOT_FOUND),
        # Not a protobuf message at all: grpc's own deserialisation refuses it.
        (lambda: raw_submit(b"\xff\xff\xff\xff", timeout=TIMEOUT), grpc.StatusCode.INTERNAL),
        (lambda: unknown(b"", timeout=TIMEOUT), grpc.StatusCode.UNIMPLEMENTED),
    ]
    burst = calls * 100

    def outcome(index: int) -> tuple[grpc.StatusCode, grpc.StatusCode]:
        call, expected = burst[index]
        try:
            call()
        except grpc.RpcError as error:
            return error.code(), expected  # type: ignore[attr-defined]
        return grpc.StatusCode.OK, expected

    with futures.ThreadPoolExecutor(max_workers=32) as pool:
        results = list(pool.map(outcome, range(len(burst))))
    wrong = [(got, expected) for got, expected in results if got != expected]
    assert not wrong, wrong[:5]
    assert (
        stub.SubmitWorkload(submit_request(name="after-the-burst"), timeout=TIMEOUT).id
        == "team-a/after-the-burst"
    )


def test_an_oversized_message_is_resource_exhausted_and_one_below_the_limit_passes(
    stub: pb_grpc.SchedulerStub,
) -> None:
    def manifests(size: int) -> pb.SubmitWorkloadRequest:
        return pb.SubmitWorkloadRequest(namespace="team-a", manifests=pb.Manifests(documents=["x" * size]))

    assert stub.SubmitWorkload(manifests(3 * 1024 * 1024), timeout=TIMEOUT).id == "team-a/from-manifests-1"
    error = rpc_error(lambda: stub.SubmitWorkload(manifests(5 * 1024 * 1024), timeout=TIMEOUT))
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert stub.ListQueues(pb.ListQueuesRequest(), timeout=TIMEOUT).queues


def test_a_taken_port_fails_to_start_instead_of_sharing_it(
    server: RunningServer, service: FakeService
) -> None:
    # Another gRPC server is the case that matters: grpc would share the port with it through
    # SO_REUSEPORT unless told not to, and half the calls would go to the other server.
    with pytest.raises(GrpcStartError, match=f"127.0.0.1:{server.port}"):
        start_grpc_server(service, f"127.0.0.1:{server.port}")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(GrpcStartError, match=f"127.0.0.1:{port}"):
            start_grpc_server(service, f"127.0.0.1:{port}")
