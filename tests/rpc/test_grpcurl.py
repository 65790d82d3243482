"""The API as a client no one here wrote sees it: grpcurl, which knows it only by reflection.

grpcurl is built from its Go module into the binary cache (`build_grpcurl`, a no-op once
built; `make kube-bins` builds it before pytest starts).  It checks what our own stubs cannot:
the service and method names on the wire, the JSON mapping of the messages (camelCase fields,
maps, enums by name) and the status codes as another gRPC implementation reads them.  The first
tests talk to a fake service (to see exactly which message arrived); the last ones to the real
`SchedulerService` on a simulated cluster.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from fake_scheduler import FakeService
from grpc_support import Pki, make_pki

from kai_ray.devcluster.grpcurl import build_grpcurl
from kai_ray.rpc.api import SchedulerService
from kai_ray.rpc.auth import TlsConfig, TokenTable
from kai_ray.rpc.sim_backend import SimBackend
from kai_ray.rpc.transport import RunningServer, start_grpc_server
from kai_ray.v1 import scheduler_pb2 as pb

pytestmark = [pytest.mark.grpc, pytest.mark.gobin]

TOKEN = "tok-grpcurl-5e6f7a8b"


@pytest.fixture(scope="module")
def grpcurl_bin() -> Path:
    return build_grpcurl() / "grpcurl"


def grpcurl(binary: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run grpcurl (``-max-time`` bounds each call) and return its result, whatever its exit."""
    argv: Sequence[str] = [str(binary), "-max-time", "20", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, f"grpcurl exited {result.returncode}: {result.stderr}"
    return result.stdout


def test_grpcurl_lists_and_describes_the_services_by_reflection(
    grpcurl_bin: Path, server: RunningServer
) -> None:
    address = f"127.0.0.1:{server.port}"
    services = ok(grpcurl(grpcurl_bin, "-plaintext", address, "list")).split()
    assert "kai_ray.v1.Scheduler" in services and "grpc.health.v1.Health" in services
    methods = ok(grpcurl(grpcurl_bin, "-plaintext", address, "list", "kai_ray.v1.Scheduler")).split()
    assert methods == [
        f"kai_ray.v1.Scheduler.{name}"
        for name in (
            "CancelWorkload",
            "Explain",
            "GetCluster",
            "GetWorkload",
            "ListQueues",
            "ListWorkloads",
            "SubmitWorkload",
            "WatchWorkloads",
            "WhatIf",
        )
    ]
    described = ok(
        grpcurl(grpcurl_bin, "-plaintext", address, "describe", "kai_ray.v1.SubmitWorkloadRequest")
    )
    assert "oneof source" in described and ".kai_ray.v1.WorkloadSpec workload = 3;" in described
    health = json.loads(ok(grpcurl(grpcurl_bin, "-plaintext", address, "grpc.health.v1.Health/Check")))
    assert health == {"status": "SERVING"}


def test_grpcurl_calls_list_queues(grpcurl_bin: Path, server: RunningServer, service: FakeService) -> None:
    answer = json.loads(
        ok(grpcurl(grpcurl_bin, "-plaintext", f"127.0.0.1:{server.port}", "kai_ray.v1.Scheduler/ListQueues"))
    )
    assert [q["name"] for q in answer["queues"]] == ["research", "team-a", "team-b"]
    assert answer["queues"][1]["resources"]["nvidia.com/gpu"] == {
        "quota": 8,
        "limit": 12,
        "fair_share": 9,
        "allocated": 6,
        "requested": 8,
    }
    assert service.methods_called() == ["list_queues"]


def test_grpcurl_submits_a_workload(grpcurl_bin: Path, server: RunningServer, service: FakeService) -> None:
    body = {
        "namespace": "team-a",
        "name": "llm-finetune",
        "workload": {
            "queue": "team-a",
            "preemptibility": "NON_PREEMPTIBLE",
            "minAvailable": 2,
            "podSets": [
                {
                    "name": "worker",
                    "replicas": 2,
                    "template": {
                        "requests": {"nvidia.com/gpu": "1", "cpu": "500m"},
                        "tolerations": [{"key": "gpu", "operator": "Exists"}],
                    },
                }
            ],
        },
    }
    address = f"127.0.0.1:{server.port}"
    answer = json.loads(
        ok(
            grpcurl(
                grpcurl_bin,
                "-plaintext",
                "-d",
                json.dumps(body),
                address,
                "kai_ray.v1.Scheduler/SubmitWorkload",
            )
        )
    )
    assert answer["id"] == "team-a/llm-finetune"
    assert answer["workload"]["state"] == "PENDING" and answer["workload"]["pods"] == 2
    # The JSON reached the service as the message it means.
    request = service.calls[0].request
    assert isinstance(request, pb.SubmitWorkloadRequest)
    spec = request.workload
    assert spec.preemptibility == pb.NON_PREEMPTIBLE and spec.min_available == 2
    assert dict(spec.pod_sets[0].template.requests) == {"nvidia.com/gpu": "1", "cpu": "500m"}
    assert spec.pod_sets[0].template.tolerations[0].operator == "Exists"

    # Bad input: grpcurl shows the status and the field.
    body["workload"]["podSets"][0]["replicas"] = 0  # type: ignore[index]
    failed = grpcurl(
        grpcurl_bin, "-plaintext", "-d", json.dumps(body), address, "kai_ray.v1.Scheduler/SubmitWorkload"
    )
    assert failed.returncode != 0
    assert "Code: InvalidArgument" in failed.stderr
    assert "Message: workload.pod_sets[0].replicas: must be >= 1" in failed.stderr


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def test_grpcurl_over_tls_with_a_token(grpcurl_bin: Path, service: FakeService, pki: Pki) -> None:
    tls = TlsConfig(cert=pki.server_cert, key=pki.server_key)
    tokens = TokenTable.parse(f"{TOKEN} team-a\n", source="tokens")
    with start_grpc_server(service, "127.0.0.1:0", tls=tls, tokens=tokens) as server:
        address = f"localhost:{server.port}"
        # Reflection is open, so grpcurl can learn the API before it has a token ...
        assert "kai_ray.v1.Scheduler" in ok(grpcurl(grpcurl_bin, "-cacert", str(pki.ca), address, "list"))
        # ... but the API itself is not.
        refused = grpcurl(grpcurl_bin, "-cacert", str(pki.ca), address, "kai_ray.v1.Scheduler/ListQueues")
        assert refused.returncode != 0 and "Code: Unauthenticated" in refused.stderr
        answer = ok(
            grpcurl(
                grpcurl_bin,
                "-cacert",
                str(pki.ca),
                "-H",
                f"authorization: Bearer {TOKEN}",
                address,
                "kai_ray.v1.Scheduler/ListQueues",
            )
        )
        assert len(json.loads(answer)["queues"]) == 3


# ------------------------------------------------------------------ against the real service
# The same client, now against `SchedulerService` on a simulated cluster: what grpcurl gets is
# what the scheduler decided, not what a fake was told to answer.


@pytest.fixture
def real_server() -> Iterator[tuple[RunningServer, SimBackend]]:
    backend = SimBackend.from_nodes(2, 8)
    backend.run_cycle()
    with start_grpc_server(SchedulerService(backend), "127.0.0.1:0") as running:
        yield running, backend
    backend.close()


def test_grpcurl_lists_and_calls_the_real_service(
    grpcurl_bin: Path, real_server: tuple[RunningServer, SimBackend]
) -> None:
    server, backend = real_server
    address = f"127.0.0.1:{server.port}"
    services = ok(grpcurl(grpcurl_bin, "-plaintext", address, "list")).split()
    assert {"kai_ray.v1.Scheduler", "grpc.health.v1.Health"} <= set(services)

    queues = json.loads(ok(grpcurl(grpcurl_bin, "-plaintext", address, "kai_ray.v1.Scheduler/ListQueues")))
    assert [q["name"] for q in queues["queues"]] == ["default-parent-queue", "default-queue"]
    assert queues["queues"][1]["parent"] == "default-parent-queue"
    assert queues["queues"][1]["resources"]["nvidia.com/gpu"]["limit"] == -1

    body = {
        "namespace": "ml",
        "name": "train",
        "workload": {
            "queue": "default-queue",
            "podSets": [{"name": "worker", "replicas": 2, "template": {"requests": {"nvidia.com/gpu": "4"}}}],
        },
    }
    submit = ["-plaintext", "-d", json.dumps(body), address, "kai_ray.v1.Scheduler/SubmitWorkload"]
    answer = json.loads(ok(grpcurl(grpcurl_bin, *submit)))
    assert answer["id"] == "ml/train"
    assert answer["workload"]["state"] == "PENDING" and answer["workload"]["pods"] == 2
    # It is in the cluster: the pods exist, and a cycle runs them.
    assert backend.view().get("Pod", "ml", "train-worker-1") is not None
    backend.run_cycle()
    get = ["-plaintext", "-d", '{"id": "ml/train"}', address, "kai_ray.v1.Scheduler/GetWorkload"]
    got = json.loads(ok(grpcurl(grpcurl_bin, *get)))
    assert got["state"] == "RUNNING" and got["pods_bound"] == 2  # grpcurl prints proto field names

    # The same name again: the real service's status, as grpcurl reads it.
    again = grpcurl(grpcurl_bin, *submit)
    assert again.returncode != 0 and "Code: AlreadyExists" in again.stderr
    body["name"], body["workload"]["queue"] = "other", "no-such-queue"  # type: ignore[index]
    submit[2] = json.dumps(body)
    unknown = grpcurl(grpcurl_bin, *submit)
    assert unknown.returncode != 0 and "Code: FailedPrecondition" in unknown.stderr
    assert "workload.queue" in unknown.stderr
