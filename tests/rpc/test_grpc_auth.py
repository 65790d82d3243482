"""Authentication of the gRPC API: the token file, bearer tokens over a real socket, TLS and mTLS."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from fake_scheduler import FakeService
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from grpc_support import Pki, make_pki

from kai_ray.rpc.auth import AuthConfigError, TlsConfig, TokenTable, load_token_file
from kai_ray.rpc.caller import Caller
from kai_ray.rpc.transport import SCHEDULER_SERVICE, RunningServer, start_grpc_server
from kai_ray.v1 import scheduler_pb2 as pb
from kai_ray.v1 import scheduler_pb2_grpc as pb_grpc

pytestmark = pytest.mark.grpc

TIMEOUT = 10.0
TEAM_A_TOKEN = "tok-team-a-7f3c9e1d5b"
ADMIN_TOKEN = "tok-admin-0a9b8c7d6e"
WRONG_TOKEN = "tok-wrong-1234567890"
TOKEN_FILE = f"""\
# kai-ray API tokens
{TEAM_A_TOKEN} team-a,team-a2

{ADMIN_TOKEN}   *
"""


def bearer(token: str) -> tuple[tuple[str, str]]:
    return (("authorization", f"Bearer {token}"),)


def rpc_error(call: object) -> grpc.RpcError:
    assert callable(call)
    with pytest.raises(grpc.RpcError) as caught:
        call()
    return caught.value


# -------------------------------------------------------------------------------- the token file


def test_the_token_file_maps_tokens_to_namespaces(tmp_path: Path) -> None:
    path = tmp_path / "tokens"
    path.write_text(TOKEN_FILE)
    table = load_token_file(path)
    assert len(table) == 2
    assert table.lookup(TEAM_A_TOKEN) == Caller(frozenset({"team-a", "team-a2"}), name=f"{path}:2")
    admin = table.lookup(ADMIN_TOKEN)
    assert admin is not None and admin.namespaces is None and admin.name == f"{path}:4"
    assert table.lookup(WRONG_TOKEN) is None
    assert table.lookup(TEAM_A_TOKEN[:-1]) is None  # a prefix is not the token
    assert table.lookup(TEAM_A_TOKEN + "x") is None
    assert table.lookup("") is None


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ("lonely-token", "expected 'TOKEN NAMESPACES'"),
        ("secret-token team-a team-b", "found 3 field(s)"),
        ("secret-token Team_A", "'Team_A' is not a namespace name"),
        ("secret-token team-a,,team-b", "'' is not a namespace name"),
        ("secret-token team-a,*", "'*' must stand alone"),
        (f"{TEAM_A_TOKEN} team-b", "the same token as line 2"),
    ],
)
def test_a_bad_line_is_an_error_naming_file_and_line_and_never_the_token(
    tmp_path: Path, line: str, problem: str
) -> None:
    path = tmp_path / "tokens"
    path.write_text(f"# header\n{TEAM_A_TOKEN} team-a\n\n{line}\n")
    with pytest.raises(AuthConfigError) as caught:
        load_token_file(path)
    message = str(caught.value)
    assert message.startswith(f"{path}:4: ") and problem in message
    assert "secret-token" not in message and TEAM_A_TOKEN not in message and "lonely-token" not in message


def test_an_unusable_token_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(AuthConfigError, match=r"--token-file .*missing"):
        load_token_file(tmp_path / "missing")
    empty = tmp_path / "empty"
    empty.write_text("# nothing yet\n\n")
    with pytest.raises(AuthConfigError, match="no tokens"):
        load_token_file(empty)


# -------------------------------------------------------------------------------- tokens on the wire


@pytest.fixture
def tokens() -> TokenTable:
    return TokenTable.parse(TOKEN_FILE, source="tokens")


@pytest.fixture
def server(service: FakeService, tokens: TokenTable) -> Iterator[RunningServer]:
    with start_grpc_server(service, "127.0.0.1:0", tokens=tokens) as running:
        yield running


def test_calls_without_a_known_token_are_unauthenticated_and_never_reach_the_service(
    channel: grpc.Channel, service: FakeService
) -> None:
    stub = pb_grpc.SchedulerStub(channel)
    for metadata in [
        (),
        bearer(WRONG_TOKEN),
        bearer(""),
        (("authorization", f"Basic {TEAM_A_TOKEN}"),),
        (("authorization", TEAM_A_TOKEN),),
        (*bearer(TEAM_A_TOKEN), *bearer(ADMIN_TOKEN)),
    ]:
        error = rpc_error(
            lambda m=metadata: stub.ListQueues(pb.ListQueuesRequest(), metadata=m, timeout=TIMEOUT)
        )
        assert error.code() == grpc.StatusCode.UNAUTHENTICATED, metadata
        stream = stub.WatchWorkloads(pb.WatchWorkloadsRequest(), metadata=metadata, timeout=TIMEOUT)
        error = rpc_error(lambda s=stream: next(s))
        assert error.code() == grpc.StatusCode.UNAUTHENTICATED, metadata
    assert service.calls == []


def test_a_known_token_reaches_the_service_as_its_caller(channel: grpc.Channel, service: FakeService) -> None:
    stub = pb_grpc.SchedulerStub(channel)
    assert stub.ListQueues(pb.ListQueuesRequest(), metadata=bearer(TEAM_A_TOKEN), timeout=TIMEOUT).queues
    # The scheme is case-insensitive (RFC 7235).
    lower = (("authorization", f"bearer {ADMIN_TOKEN}"),)
    assert stub.GetCluster(pb.GetClusterRequest(), metadata=lower, timeout=TIMEOUT).node_pools
    stream = stub.WatchWorkloads(pb.WatchWorkloadsRequest(), metadata=bearer(TEAM_A_TOKEN), timeout=TIMEOUT)
    assert next(stream).type == pb.WorkloadEvent.ADDED
    stream.cancel()
    assert [(c.method, c.caller) for c in service.calls] == [
        ("list_queues", Caller(frozenset({"team-a", "team-a2"}), "tokens:2")),
        ("get_cluster", Caller(None, "tokens:4")),
        ("watch_workloads", Caller(frozenset({"team-a", "team-a2"}), "tokens:2")),
    ]


def test_a_namespace_outside_the_token_list_is_permission_denied(channel: grpc.Channel) -> None:
    stub = pb_grpc.SchedulerStub(channel)
    request = pb.SubmitWorkloadRequest(
        namespace="team-b",
        workload=pb.WorkloadSpec(queue="team-b", pod_sets=[pb.PodSet(name="w", replicas=1)]),
    )
    error = rpc_error(lambda: stub.SubmitWorkload(request, metadata=bearer(TEAM_A_TOKEN), timeout=TIMEOUT))
    assert error.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "namespace" in (error.details() or "")
    stream = stub.WatchWorkloads(
        pb.WatchWorkloadsRequest(namespace="team-b"), metadata=bearer(TEAM_A_TOKEN), timeout=TIMEOUT
    )
    assert rpc_error(lambda: next(stream)).code() == grpc.StatusCode.PERMISSION_DENIED
    # The same request is fine for a token with every namespace ...
    assert stub.SubmitWorkload(request, metadata=bearer(ADMIN_TOKEN), timeout=TIMEOUT).id == "team-b/w"
    # ... and the team-a token sees only team-a's workloads.
    listed = stub.ListWorkloads(pb.ListWorkloadsRequest(), metadata=bearer(TEAM_A_TOKEN), timeout=TIMEOUT)
    assert list(listed.workloads) == []


def test_health_and_reflection_need_no_token(channel: grpc.Channel) -> None:
    health = health_pb2_grpc.HealthStub(channel)
    for name in ("", SCHEDULER_SERVICE):
        answer = health.Check(health_pb2.HealthCheckRequest(service=name), timeout=TIMEOUT)
        assert answer.status == health_pb2.HealthCheckResponse.SERVING
    reflection = reflection_pb2_grpc.ServerReflectionStub(channel)
    answers = reflection.ServerReflectionInfo(
        iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=TIMEOUT
    )
    names = {s.name for s in next(iter(answers)).list_services_response.service}
    assert SCHEDULER_SERVICE in names


def test_no_token_is_ever_logged(
    service: FakeService, tokens: TokenTable, caplog: pytest.LogCaptureFixture
) -> None:
    # Every logger at every level, grpc's own included.
    with (
        caplog.at_level(logging.DEBUG),
        start_grpc_server(service, "127.0.0.1:0", tokens=tokens) as server,
        grpc.insecure_channel(f"127.0.0.1:{server.port}") as channel,
    ):
        stub = pb_grpc.SchedulerStub(channel)
        for token in (TEAM_A_TOKEN, ADMIN_TOKEN, WRONG_TOKEN):
            for call in (
                lambda t=token: stub.ListQueues(pb.ListQueuesRequest(), metadata=bearer(t), timeout=TIMEOUT),
                lambda t=token: stub.GetWorkload(
                    pb.GetWorkloadRequest(id="team-b/x"), metadata=bearer(t), timeout=TIMEOUT
                ),
                lambda t=token: stub.ListQueues(
                    pb.ListQueuesRequest(), metadata=(("authorization", f"Basic {t}"),), timeout=TIMEOUT
                ),
            ):
                try:
                    call()
                except grpc.RpcError as error:
                    assert token not in (error.details() or "")  # type: ignore[attr-defined]
        service.fail["get_cluster"] = RuntimeError("crash")
        with pytest.raises(grpc.RpcError):
            stub.GetCluster(pb.GetClusterRequest(), metadata=bearer(ADMIN_TOKEN), timeout=TIMEOUT)
    text = caplog.text + "".join(str(r.__dict__) for r in caplog.records)
    assert "refused" in text  # the refusals were logged ...
    for token in (TEAM_A_TOKEN, ADMIN_TOKEN, WRONG_TOKEN):
        assert token not in text  # ... without the tokens


# -------------------------------------------------------------------------------- TLS


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def tls_channel(port: int, pki: Pki, cert: Path | None = None, key: Path | None = None) -> grpc.Channel:
    credentials = grpc.ssl_channel_credentials(
        root_certificates=pki.ca.read_bytes(),
        private_key=key.read_bytes() if key else None,
        certificate_chain=cert.read_bytes() if cert else None,
    )
    return grpc.secure_channel(f"localhost:{port}", credentials)


def health_status(channel: grpc.Channel) -> int:
    answer = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=TIMEOUT)
    return int(answer.status)


def test_tls_serves_trusting_clients_and_refuses_plaintext(service: FakeService, pki: Pki) -> None:
    tls = TlsConfig(cert=pki.server_cert, key=pki.server_key)
    with start_grpc_server(service, "127.0.0.1:0", tls=tls) as server:
        with tls_channel(server.port, pki) as channel:
            assert health_status(channel) == health_pb2.HealthCheckResponse.SERVING
            assert pb_grpc.SchedulerStub(channel).ListQueues(pb.ListQueuesRequest(), timeout=TIMEOUT).queues
        with grpc.insecure_channel(f"127.0.0.1:{server.port}") as plaintext:
            assert rpc_error(lambda: health_status(plaintext)).code() == grpc.StatusCode.UNAVAILABLE
        # A client that does not trust the server's CA refuses it.
        untrusting = grpc.ssl_channel_credentials(root_certificates=pki.rogue_ca.read_bytes())
        with grpc.secure_channel(f"localhost:{server.port}", untrusting) as channel:
            assert rpc_error(lambda: health_status(channel)).code() == grpc.StatusCode.UNAVAILABLE


def test_mtls_requires_a_client_certificate_from_the_client_ca(service: FakeService, pki: Pki) -> None:
    tls = TlsConfig(cert=pki.server_cert, key=pki.server_key, client_ca=pki.ca)
    with start_grpc_server(service, "127.0.0.1:0", tls=tls) as server:
        with tls_channel(server.port, pki, pki.client_cert, pki.client_key) as channel:
            assert health_status(channel) == health_pb2.HealthCheckResponse.SERVING
        with tls_channel(server.port, pki) as channel:  # no client certificate
            assert rpc_error(lambda: health_status(channel)).code() == grpc.StatusCode.UNAVAILABLE
        with tls_channel(server.port, pki, pki.rogue_cert, pki.rogue_key) as channel:  # another CA's
            assert rpc_error(lambda: health_status(channel)).code() == grpc.StatusCode.UNAVAILABLE
    assert service.calls == []


def test_tls_and_tokens_together(service: FakeService, pki: Pki, tokens: TokenTable) -> None:
    tls = TlsConfig(cert=pki.server_cert, key=pki.server_key)
    with (
        start_grpc_server(service, "127.0.0.1:0", tls=tls, tokens=tokens) as server,
        tls_channel(server.port, pki) as channel,
    ):
        stub = pb_grpc.SchedulerStub(channel)
        error = rpc_error(lambda: stub.ListQueues(pb.ListQueuesRequest(), timeout=TIMEOUT))
        assert error.code() == grpc.StatusCode.UNAUTHENTICATED
        assert stub.ListQueues(pb.ListQueuesRequest(), metadata=bearer(ADMIN_TOKEN), timeout=TIMEOUT).queues


def test_unusable_tls_files_fail_at_start_naming_the_flag(
    service: FakeService, pki: Pki, tmp_path: Path
) -> None:
    with pytest.raises(AuthConfigError, match=r"--tls-cert .*nowhere\.crt"):
        start_grpc_server(service, "127.0.0.1:0", tls=TlsConfig(tmp_path / "nowhere.crt", pki.server_key))
    garbage = tmp_path / "garbage.key"
    garbage.write_text("not a key\n")
    with pytest.raises(AuthConfigError, match=r"--tls-key .*garbage\.key: not a PEM file"):
        start_grpc_server(service, "127.0.0.1:0", tls=TlsConfig(pki.server_cert, garbage))
    with pytest.raises(
        AuthConfigError, match=r"--tls-client-ca .*server\.key: not a PEM file with a CERTIFICATE"
    ):
        start_grpc_server(
            service, "127.0.0.1:0", tls=TlsConfig(pki.server_cert, pki.server_key, client_ca=pki.server_key)
        )


def test_tokens_without_tls_off_loopback_are_warned_about(
    service: FakeService, tokens: TokenTable, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="kai_ray.rpc.transport"):
        with start_grpc_server(service, "127.0.0.1:0", tokens=tokens):
            pass
        assert "clear text" not in caplog.text
        with start_grpc_server(service, "0.0.0.0:0", tokens=tokens):
            pass
    assert "bearer tokens without TLS on 0.0.0.0:0" in caplog.text
