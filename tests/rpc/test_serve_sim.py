"""`kai-ray serve --sim-nodes N` / `--sim DIR`: the API a newcomer talks to with no cluster.

Run as a real process, as a user starts it: it logs where the API listens (port 0 picks a free
one), a client over the socket submits a workload that the embedded cluster then schedules, and
SIGTERM ends it with status 0. A token file makes every call but health need a token; a flag
mistake exits 2 with one line naming the flag.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from kube_serve import log_entries, stop_process, wait_until

from kai_ray.rpc.client import KaiRayClient
from kai_ray.rpc.errors import ErrorCode, ServiceError
from kai_ray.v1 import scheduler_pb2 as pb

pytestmark = pytest.mark.grpc

KAI_RAY = Path(sys.executable).parent / "kai-ray"
QUICKSTART = Path(__file__).resolve().parents[2] / "examples" / "quickstart"
LISTENING = re.compile(r"gRPC API on [\d.]+:(\d+)")


class SimServer:
    """One `kai-ray serve --sim...` process; its JSON log lines in a file."""

    def __init__(self, tmp_path: Path, *args: str) -> None:
        self.log = tmp_path / "serve.log"
        argv = [str(KAI_RAY), "serve", *args, "--grpc-address", "127.0.0.1:0", "--metrics-address", ""]
        with self.log.open("wb") as stderr:
            self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=stderr)

    def messages(self) -> list[str]:
        return [str(entry.get("message", entry.get("raw", ""))) for entry in log_entries(self.log)]

    def port(self) -> int:
        found: list[int] = []

        def listening() -> bool:
            assert self.proc.poll() is None, f"serve exited {self.proc.returncode}: {self.messages()}"
            found.extend(int(m.group(1)) for m in map(LISTENING.search, self.messages()) if m)
            return bool(found)

        wait_until(listening, 60, "serve to log its gRPC address")
        return found[0]

    def stop(self) -> int:
        return stop_process(self.proc)


@pytest.fixture
def started(tmp_path: Path) -> Iterator[list[SimServer]]:
    servers: list[SimServer] = []
    try:
        yield servers
    finally:
        for server in servers:
            server.stop()


def gang(name: str, pods: int, gpus: int) -> pb.SubmitWorkloadRequest:
    template = pb.PodTemplate(requests={"nvidia.com/gpu": str(gpus)})
    spec = pb.WorkloadSpec(
        queue="default-queue", pod_sets=[pb.PodSet(name="worker", replicas=pods, template=template)]
    )
    return pb.SubmitWorkloadRequest(namespace="default", name=name, workload=spec)


def test_sim_nodes_schedules_what_a_client_submits_and_stops_cleanly(
    tmp_path: Path, started: list[SimServer]
) -> None:
    server = SimServer(tmp_path, "--sim-nodes", "2")
    started.append(server)
    with KaiRayClient(f"127.0.0.1:{server.port()}") as client:
        cluster = client.get_cluster(pb.GetClusterRequest())
        assert sum(pool.gpus for pool in cluster.node_pools) == 16
        submitted = client.submit_workload(gang("train", pods=2, gpus=8))
        assert submitted.id == "default/train"

        def running() -> bool:
            return client.get_workload(pb.GetWorkloadRequest(id="default/train")).state == pb.RUNNING

        wait_until(running, 30, "default/train RUNNING")
        workload = client.get_workload(pb.GetWorkloadRequest(id="default/train"))
        assert (
            sorted(p.node for p in workload.placements) == ["node-0", "node-1"]
            or len({p.node for p in workload.placements}) == 2
        ), workload.placements
        queues = {q.name: q for q in client.list_queues(pb.ListQueuesRequest()).queues}
        assert queues["default-queue"].resources["nvidia.com/gpu"].allocated == 16
        # A third gang does not fit: it waits, and says why.
        client.submit_workload(gang("more", pods=1, gpus=1))
        wait_until(
            lambda: client.explain(pb.ExplainRequest(id="default/more")).cause != "",
            30,
            "an explanation for default/more",
        )
        assert client.get_workload(pb.GetWorkloadRequest(id="default/more")).state == pb.PENDING
    assert server.stop() == 0


def test_sim_directory_serves_the_manifests_workloads(tmp_path: Path, started: list[SimServer]) -> None:
    server = SimServer(tmp_path, "--sim", str(QUICKSTART))
    started.append(server)
    with KaiRayClient(f"127.0.0.1:{server.port()}") as client:
        names = {q.name for q in client.list_queues(pb.ListQueuesRequest()).queues}
        assert {"team-a", "team-b"} <= names

        def some_running() -> bool:
            listed = client.list_workloads(pb.ListWorkloadsRequest(state=pb.RUNNING))
            return len(listed.workloads) > 0

        wait_until(some_running, 30, "a quickstart workload RUNNING")
    assert server.stop() == 0


def test_sim_file_serves_that_file_alone(tmp_path: Path, started: list[SimServer]) -> None:
    """examples/topology/cluster.yaml without its directory's jobs: five nodes, queue `team` and
    four running pods."""
    cluster = QUICKSTART.parent / "topology" / "cluster.yaml"
    server = SimServer(tmp_path, "--sim", str(cluster))
    started.append(server)
    with KaiRayClient(f"127.0.0.1:{server.port()}") as client:
        assert "team" in {q.name for q in client.list_queues(pb.ListQueuesRequest()).queues}
        assert len(client.get_cluster(pb.GetClusterRequest()).nodes) == 5
        listed = client.list_workloads(pb.ListWorkloadsRequest(namespace="ml")).workloads
        # Its four running pods, not the jobs of examples/topology/jobs.yaml beside it.
        assert sorted(w.name for w in listed) == [f"inference-{i}" for i in range(4)]
    assert server.stop() == 0


def test_a_token_file_guards_every_call_but_health(tmp_path: Path, started: list[SimServer]) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text("s3cret-team-a team-a\n")
    server = SimServer(tmp_path, "--sim-nodes", "1", "--token-file", str(tokens))
    started.append(server)
    address = f"127.0.0.1:{server.port()}"
    with grpc.insecure_channel(address) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        answer = health.Check(health_pb2.HealthCheckRequest(service="kai_ray.v1.Scheduler"), timeout=10)
        assert answer.status == health_pb2.HealthCheckResponse.SERVING
    with KaiRayClient(address) as anonymous, pytest.raises(ServiceError) as refused:
        anonymous.list_queues(pb.ListQueuesRequest())
    assert refused.value.code == ErrorCode.UNAUTHENTICATED
    with KaiRayClient(address, token="s3cret-team-a") as client:
        assert client.list_queues(pb.ListQueuesRequest()).queues
        with pytest.raises(ServiceError) as denied:
            client.submit_workload(gang("x", pods=1, gpus=1))  # namespace "default"
        assert denied.value.code == ErrorCode.PERMISSION_DENIED
    assert server.stop() == 0
    assert not any("s3cret" in line for line in server.log.read_text().splitlines())


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["--sim-nodes", "1", "--tls-cert", "/nonexistent.pem"], "--tls-cert"),
        (["--sim-nodes", "1", "--token-file", "/nonexistent-tokens"], "--token-file"),
        (["--sim", "/nonexistent-dir"], "--sim"),
        (["--sim", str(QUICKSTART), "--sim-nodes", "1"], "--sim"),
    ],
)
def test_a_bad_flag_exits_2_naming_it(tmp_path: Path, args: list[str], flag: str) -> None:
    argv = [str(KAI_RAY), "serve", *args, "--grpc-address", "127.0.0.1:0", "--metrics-address", ""]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 2, proc.stderr
    assert flag in proc.stderr, proc.stderr
