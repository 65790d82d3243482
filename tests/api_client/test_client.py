"""`kai_ray.rpc.client` against kai-ray's gRPC server on 127.0.0.1 over a fake service (fake_scheduler),
and `LocalClient` against the same fake service in-process: error mapping with the field, the token
in the metadata, the client certificate of mutual TLS, the deadline, watch streams stopped on
request, and the request helpers."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from fake_scheduler import FakeServer, FakeService, serve_fake
from grpc_support import make_pki, mutual_tls

from kai_ray.rpc.caller import Caller
from kai_ray.rpc.client import KaiRayClient, LocalClient, RemoteError
from kai_ray.rpc.errors import ErrorCode, ServiceError
from kai_ray.rpc.requests import manifests_request, parse_id, submit_manifests, workload_spec_from_yaml
from kai_ray.v1 import scheduler_pb2 as pb

SPEC = """\
namespace: team-a
name: train
workload:
  queue: team-a
  preemptibility: non-preemptible
  minAvailable: 2
  podSets:
    - name: worker
      replicas: 2
      template:
        requests: {cpu: 4, memory: 16Gi, nvidia.com/gpu: 1}
        tolerations: [{key: gpu, operator: Exists}]
"""


def _spec(replicas: int = 2, queue: str = "team-a") -> pb.SubmitWorkloadRequest:
    return pb.SubmitWorkloadRequest(
        namespace="team-a",
        name="train",
        workload=pb.WorkloadSpec(
            queue=queue,
            pod_sets=[
                pb.PodSet(name="worker", replicas=replicas, template=pb.PodTemplate(requests={"cpu": "1"}))
            ],
        ),
    )


# ------------------------------------------------------------------------------------- over gRPC


@pytest.fixture
def server() -> Iterator[FakeServer]:
    with serve_fake() as running:
        yield running


@pytest.fixture
def client(server: FakeServer) -> Iterator[KaiRayClient]:
    with KaiRayClient(server.address) as opened:
        yield opened


@pytest.mark.grpc
def test_submit_then_get_round_trips_over_a_socket(client: KaiRayClient) -> None:
    submitted = client.submit_workload(_spec())
    assert submitted.id == "team-a/train"
    got = client.get_workload(pb.GetWorkloadRequest(id="team-a/train"))
    assert got.pods == 2 and got.queue == "team-a" and got.state == pb.PENDING
    queues = client.list_queues(pb.ListQueuesRequest())
    assert [q.name for q in queues.queues] == ["research", "team-a", "team-b"]


@pytest.mark.grpc
def test_invalid_argument_comes_back_as_service_error_with_the_field(client: KaiRayClient) -> None:
    with pytest.raises(ServiceError) as caught:
        client.submit_workload(_spec(replicas=0))
    error = caught.value
    assert isinstance(error, RemoteError)
    assert error.code == ErrorCode.INVALID_ARGUMENT
    assert error.field == "workload.pod_sets[0].replicas"
    assert error.message == "must be >= 1, got 0"  # the server's text, without the field it leads with
    assert str(error) == "workload.pod_sets[0].replicas: must be >= 1, got 0"


@pytest.mark.grpc
@pytest.mark.parametrize(
    ("request_id", "code", "field"),
    [("team-a/nope", ErrorCode.NOT_FOUND, "id"), ("team-b/other", ErrorCode.PERMISSION_DENIED, "namespace")],
)
def test_every_code_maps_by_name(request_id: str, code: ErrorCode, field: str) -> None:
    service = FakeService()
    service.add("team-b", "other", "team-b", pb.RUNNING)
    tokens = {"alpha": Caller(frozenset({"team-a"}), "alpha")}
    with (
        serve_fake(service, tokens) as server,
        KaiRayClient(server.address, token="alpha") as client,
        pytest.raises(ServiceError) as caught,
    ):
        client.get_workload(pb.GetWorkloadRequest(id=request_id))
    assert caught.value.code == code
    assert caught.value.field == field


@pytest.mark.grpc
def test_the_token_is_sent_as_bearer_metadata_and_a_missing_one_is_unauthenticated() -> None:
    tokens = {"s3cret": Caller(None, "admin")}
    with serve_fake(tokens=tokens) as server:
        with KaiRayClient(server.address, token="s3cret") as client:
            client.list_queues(pb.ListQueuesRequest())
            assert "s3cret" not in repr(client)
        # The server's token check let it through as the token's caller.
        assert server.service.calls[-1].caller == Caller(None, "admin")
        with KaiRayClient(server.address) as anonymous, pytest.raises(ServiceError) as caught:
            anonymous.list_queues(pb.ListQueuesRequest())
    assert caught.value.code == ErrorCode.UNAUTHENTICATED
    assert caught.value.field is None


@pytest.mark.grpc
def test_a_client_certificate_gets_through_mutual_tls_and_without_one_nothing_does(tmp_path: Path) -> None:
    pki = make_pki(tmp_path / "pki")
    service = FakeService()
    with serve_fake(service, tls=mutual_tls(pki)) as server:
        address = server.address
        with KaiRayClient(address, tls_ca=pki.ca, tls_cert=pki.client_cert, tls_key=pki.client_key) as client:
            assert [q.name for q in client.list_queues(pb.ListQueuesRequest()).queues] == [
                "research",
                "team-a",
                "team-b",
            ]
        # PEM bytes work as well as files.
        cert, key = pki.client_cert.read_bytes(), pki.client_key.read_bytes()
        with KaiRayClient(address, tls_ca=pki.ca.read_bytes(), tls_cert=cert, tls_key=key) as client:
            client.get_cluster(pb.GetClusterRequest())
        assert service.methods_called() == ["list_queues", "get_cluster"]
        for refused_cert, refused_key in (
            (None, None),
            (pki.rogue_cert, pki.rogue_key),
        ):  # none, another CA's
            with (
                KaiRayClient(
                    address, tls_ca=pki.ca, tls_cert=refused_cert, tls_key=refused_key, timeout=10
                ) as client,
                pytest.raises(RemoteError) as caught,
            ):
                client.list_queues(pb.ListQueuesRequest())
            # The handshake fails; gRPC reports it as UNAVAILABLE (UNAUTHENTICATED on some versions).
            assert caught.value.status in {"UNAVAILABLE", "UNAUTHENTICATED"}, caught.value
    assert service.methods_called() == ["list_queues", "get_cluster"]


@pytest.mark.unit
@pytest.mark.parametrize("given", ["tls_cert", "tls_key"])
def test_a_client_certificate_needs_its_key_and_the_key_its_certificate(given: str) -> None:
    with pytest.raises(ValueError, match="tls_cert and tls_key go together"):
        KaiRayClient("127.0.0.1:1", **{given: b"-----BEGIN PEM-----"})  # type: ignore[arg-type]


@pytest.mark.grpc
def test_a_call_that_outlives_its_deadline_fails_as_deadline_exceeded(server: FakeServer) -> None:
    server.service.hold["get_cluster"] = threading.Event()  # let go when the server stops
    with KaiRayClient(server.address, timeout=0.3) as client, pytest.raises(ServiceError) as caught:
        client.get_cluster(pb.GetClusterRequest())
    assert caught.value.code == ErrorCode.DEADLINE_EXCEEDED


@pytest.mark.grpc
def test_an_unreachable_server_is_unavailable() -> None:
    with serve_fake() as server:
        address = server.address
    with KaiRayClient(address, timeout=5) as client, pytest.raises(ServiceError) as caught:
        client.list_queues(pb.ListQueuesRequest())
    assert caught.value.code == ErrorCode.UNAVAILABLE


@pytest.mark.grpc
def test_watch_streams_events_and_ends_quietly_when_stopped(server: FakeServer, client: KaiRayClient) -> None:
    service = server.service
    service.add("team-a", "one", "team-a", pb.PENDING)
    stop = threading.Event()
    stream = client.watch_workloads(pb.WatchWorkloadsRequest(), stop)
    first = next(stream)
    assert first.type == pb.WorkloadEvent.ADDED and first.workload.id == "team-a/one"
    assert service.wait_watching(1, timeout=10)
    service.publish(pb.Workload(id="team-a/one", state=pb.RUNNING))
    second = next(stream)
    assert second.type == pb.WorkloadEvent.MODIFIED and second.workload.state == pb.RUNNING
    assert second.resume_token == "1"
    stop.set()  # the stream is idle now: only the stop can end it
    assert list(stream) == []


@pytest.mark.grpc
def test_watch_with_a_stale_resume_token_is_out_of_range_naming_the_field(client: KaiRayClient) -> None:
    with pytest.raises(ServiceError) as caught:
        list(client.watch_workloads(pb.WatchWorkloadsRequest(resume_token="stale")))
    assert caught.value.code == ErrorCode.OUT_OF_RANGE
    assert caught.value.field == "resume_token"


# ------------------------------------------------------------------------------------- in-process


@pytest.mark.unit
def test_local_client_passes_its_caller_and_raises_the_service_errors_unchanged() -> None:
    service = FakeService()
    caller = Caller(frozenset({"team-a"}), "notebook")
    client = LocalClient(service, caller)
    assert client.submit_workload(_spec()).id == "team-a/train"
    assert [(call.method, call.caller) for call in service.calls] == [("submit_workload", caller)]
    with pytest.raises(ServiceError) as caught:
        client.submit_workload(_spec(queue="nope"))
    assert (caught.value.code, caught.value.field) == (ErrorCode.INVALID_ARGUMENT, "workload.queue")
    service.end_watches()
    events = list(client.watch_workloads(pb.WatchWorkloadsRequest()))
    assert [e.workload.id for e in events] == ["team-a/train"]


# ------------------------------------------------------------------------------------- helpers


@pytest.mark.unit
def test_workload_spec_yaml_mirrors_the_request_message(tmp_path: Path) -> None:
    path = tmp_path / "train.yaml"
    path.write_text(SPEC)
    (request,) = workload_spec_from_yaml(path)
    assert request.namespace == "team-a" and request.name == "train"
    assert request.workload.preemptibility == pb.NON_PREEMPTIBLE
    assert request.workload.min_available == 2
    template = request.workload.pod_sets[0].template
    # YAML numbers are quantities too.
    assert dict(template.requests) == {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1"}
    assert template.tolerations[0].operator == "Exists"


@pytest.mark.unit
@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("namespace: a\nworkload: {podSets: [{replicas: many}]}", "workload.pod_sets[0].replicas"),
        (
            "namespace: a\nworkload: {podSets: [{template: {requests: {cpu: [1]}}}]}",
            'workload.pod_sets[0].template.requests["cpu"]',
        ),
        ("namespace: a\nworkload: {preemptibility: sometimes}", "workload.preemptibility"),
        ("namespace: a\nwrokload: {}", "wrokload"),
        ("namespace: a\nworkload: [1, 2]", "workload"),
    ],
)
def test_a_wrong_spec_names_the_field(text: str, field: str) -> None:
    with pytest.raises(ServiceError) as caught:
        workload_spec_from_yaml(text)
    assert caught.value.code == ErrorCode.INVALID_ARGUMENT
    assert caught.value.field == field


@pytest.mark.unit
def test_manifests_are_not_a_workload_spec_and_become_a_manifests_request(tmp_path: Path) -> None:
    manifest = "apiVersion: batch/v1\nkind: Job\nmetadata: {name: j, namespace: team-a}\n"
    with pytest.raises(ServiceError, match="Kubernetes Job"):
        workload_spec_from_yaml(manifest)
    path = tmp_path / "job.yaml"
    path.write_text(manifest)
    service = FakeService()
    (response,) = submit_manifests(LocalClient(service), None, [path])
    assert response.id == "team-a/from-manifests-1"
    with pytest.raises(ServiceError) as caught:
        manifests_request([{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}])
    assert caught.value.field == "namespace"


@pytest.mark.unit
@pytest.mark.parametrize("text", ["team-a", "/x", "a/", "a/b/c"])
def test_parse_id_refuses_anything_but_namespace_slash_name(text: str) -> None:
    with pytest.raises(ServiceError) as caught:
        parse_id(text)
    assert caught.value.field == "id"
    assert parse_id("team-a/train") == "team-a/train"
