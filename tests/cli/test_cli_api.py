"""The API's commands (`submit`, `status`, `watch`, `explain`, `queues`, `what-if`) against a fake
service behind the gRPC server (fake_scheduler), and offline on examples/quickstart through the real
service: tables, parseable JSON, one-line errors naming the field, exit 2 for bad input, 1 otherwise."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from fake_scheduler import FakeServer, FakeService, serve_fake
from grpc_support import make_pki, mutual_tls
from typer.testing import CliRunner

from kai_ray.cli import app
from kai_ray.cli.offline import offline_client
from kai_ray.rpc.caller import Caller
from kai_ray.v1 import scheduler_pb2 as pb

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "examples" / "quickstart"

SPEC = """\
namespace: team-a
name: train
workload:
  queue: team-a
  podSets:
    - name: worker
      replicas: {replicas}
      template:
        requests: {{nvidia.com/gpu: 1}}
"""


def run(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args), env=env)
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def server() -> Iterator[FakeServer]:
    service = FakeService()
    service.add("team-a", "running", "team-a", pb.RUNNING, pods=2, bound=2)
    service.add("team-b", "waiting", "team-b", pb.PENDING, pods=5)
    service.add("team-b", "queued", "team-b", pb.PENDING, pods=1)
    with serve_fake(service) as running:
        yield running


def spec_file(tmp_path: Path, replicas: int = 2) -> Path:
    path = tmp_path / "train.yaml"
    path.write_text(SPEC.format(replicas=replicas))
    return path


# ------------------------------------------------------------------------------------- against a server


@pytest.mark.grpc
def test_submit_prints_the_workload_and_json_is_parseable(server: FakeServer, tmp_path: Path) -> None:
    path = spec_file(tmp_path)
    code, out, _ = run("submit", str(path), "--server", server.address)
    assert code == 0, out
    assert "team-a/train" in out and "PENDING" in out
    code, out, _ = run("submit", str(path), "--server", server.address, "--name", "again", "--output", "json")
    assert code == 0
    (response,) = json.loads(out)
    assert response["id"] == "team-a/again"
    assert response["workload"]["pods"] == 2


@pytest.mark.grpc
def test_a_refused_submit_is_one_line_naming_the_field_with_exit_2(
    server: FakeServer, tmp_path: Path
) -> None:
    code, out, err = run("submit", str(spec_file(tmp_path, replicas=0)), "--server", server.address)
    assert code == 2
    assert out == ""
    (line,) = err.strip().splitlines()
    assert line.startswith("error: INVALID_ARGUMENT: workload.pod_sets[0].replicas: ")
    assert line.endswith("must be >= 1, got 0")


@pytest.mark.unit
def test_a_spec_with_a_mistake_is_refused_before_any_call(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("namespace: team-a\nworkload: {queue: team-a, podSets: [{replicas: two}]}\n")
    # No server listens there: the file is refused first.
    code, _, err = run("submit", str(path), "--server", "127.0.0.1:1")
    assert code == 2
    assert "workload.pod_sets[0].replicas: " in err and "expected an integer" in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.grpc
def test_submit_sends_kubernetes_manifests_as_such(server: FakeServer, tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(
        "apiVersion: batch/v1\nkind: Job\nmetadata: {name: j, namespace: team-a}\n---\n"
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, namespace: team-a}\n"
    )
    code, out, _ = run("submit", str(path), "--server", server.address, "--output", "json")
    assert code == 0
    assert json.loads(out)[0]["id"] == "team-a/from-manifests-2"


@pytest.mark.grpc
def test_status_lists_every_page_and_filters(server: FakeServer) -> None:
    code, out, _ = run("status", "--server", server.address, "--output", "json")
    assert code == 0
    # The fake serves two per page: three workloads need the second page.
    assert [w["id"] for w in json.loads(out)] == ["team-a/running", "team-b/queued", "team-b/waiting"]
    code, out, _ = run("status", "--server", server.address, "--state", "pending", "--queue", "team-b")
    assert code == 0
    assert "team-b/waiting" in out and "team-b/queued" in out and "team-a/running" not in out


@pytest.mark.grpc
def test_status_of_one_workload_shows_its_pods(server: FakeServer) -> None:
    code, out, _ = run("status", "team-a/running", "--server", server.address)
    assert code == 0
    assert "running-0" in out and "node-0" in out
    code, out, _ = run("status", "team-a/running", "--server", server.address, "--output", "json")
    assert json.loads(out)["pods_bound"] == 2


@pytest.mark.grpc
def test_an_unknown_workload_is_exit_1_and_a_malformed_id_exit_2(server: FakeServer) -> None:
    code, _, err = run("status", "team-a/nope", "--server", server.address)
    assert code == 1
    assert err.startswith("error: NOT_FOUND: id: ") and err.strip().endswith(": no workload team-a/nope")
    code, _, err = run("explain", "just-a-name", "--server", server.address)
    assert code == 2
    assert "id: expected NAMESPACE/NAME" in err


@pytest.mark.grpc
def test_explain_shows_the_gang_the_checks_and_the_queue(server: FakeServer) -> None:
    code, out, _ = run("explain", "team-b/waiting", "--server", server.address)
    assert code == 0
    assert "team-b/waiting: PENDING (NoRoom)" in out
    assert "gang: 5 required, 5 exist, 0 bound, 1 more would fit now" in out
    assert "3 of 4 nodes: insufficient nvidia.com/gpu (the pod asks 8)  [NodeResourcesFit]" in out
    assert "team-b/first" in out
    code, out, _ = run("explain", "team-b/waiting", "--server", server.address, "--output", "json")
    assert json.loads(out)["gang"]["pods_placeable"] == 1


@pytest.mark.grpc
def test_queues_is_a_tree_and_json(server: FakeServer) -> None:
    code, out, _ = run("queues", "--server", server.address)
    assert code == 0
    lines = out.splitlines()
    research = next(i for i, line in enumerate(lines) if "research" in line)
    team_a = next(i for i, line in enumerate(lines) if "team-a" in line)
    assert research < team_a
    assert "│   team-a" in lines[team_a]  # indented under its parent
    assert "∞" in out  # team-b has no limit
    code, out, _ = run("queues", "--server", server.address, "--output", "json")
    queues = json.loads(out)
    assert [q["name"] for q in queues] == ["research", "team-a", "team-b"]
    assert queues[1]["resources"]["nvidia.com/gpu"]["limit"] == 12


@pytest.mark.grpc
def test_what_if_sends_the_workloads_and_removed_nodes(server: FakeServer, tmp_path: Path) -> None:
    path = spec_file(tmp_path)
    args = ("what-if", str(path), "--remove-node", "node-3", "--server", server.address)
    code, out, _ = run(*args, "--output", "json")
    assert code == 0
    response = json.loads(out)
    assert response["binds"][0]["node"] == "node-9"
    assert response["evictions"][0]["node"] == "node-3"
    assert response["pipelined"][0]["pod"] == "x-0"
    code, out, _ = run(*args)
    assert "1 evicted, 1 pipelined; nothing was applied" in out
    assert "Would evict" in out and "Would pipeline" in out


@pytest.mark.grpc
def test_watch_prints_events_until_the_stream_ends(server: FakeServer) -> None:
    server.service.end_watches()  # each stream ends after its initial ADDED events
    code, out, err = run("watch", "--server", server.address, "--output", "json")
    assert code == 0
    events = [json.loads(line) for line in out.splitlines()]
    assert [e["type"] for e in events] == ["ADDED"] * 3
    assert events[-1]["resume_token"] == "t2"
    code, out, err = run("watch", "--server", server.address, "--namespace", "team-b")
    assert code == 0
    assert "ADDED" in out
    assert "resume with: --resume t2" in err


@pytest.mark.grpc
def test_watch_resuming_from_a_lost_token_is_bad_input(server: FakeServer) -> None:
    code, _, err = run("watch", "--server", server.address, "--resume", "stale")
    assert code == 2
    assert err.startswith("error: OUT_OF_RANGE: resume_token: ")


@pytest.mark.grpc
def test_the_token_comes_from_the_environment_and_is_never_printed(tmp_path: Path) -> None:
    tokens = {"t0ps3cret": Caller(None, "ci")}
    with serve_fake(tokens=tokens) as server:
        code, out, err = run("queues", "--server", server.address, env={"KAI_RAY_TOKEN": "t0ps3cret"})
        assert code == 0
        assert server.service.calls[-1].caller == Caller(None, "ci")
        code, out, err = run("queues", "--server", server.address, "--token", "wrong")
        assert code == 1
        assert err.startswith("error: UNAUTHENTICATED")
        assert "wrong" not in out + err
        code, out, _ = run("queues", "--help")
        assert "KAI_RAY_TOKEN" in out and "t0ps3cret" not in out


@pytest.mark.grpc
def test_a_client_certificate_on_the_command_line_gets_through_mutual_tls(tmp_path: Path) -> None:
    pki = make_pki(tmp_path / "pki")
    service = FakeService()
    with serve_fake(service, tls=mutual_tls(pki)) as server:
        base = ("queues", "--server", server.address, "--tls-ca", str(pki.ca), "--timeout", "10")
        code, out, err = run(*base, "--tls-cert", str(pki.client_cert), "--tls-key", str(pki.client_key))
        assert code == 0, err
        assert "team-a" in out
        code, out, err = run(*base)  # no client certificate: the handshake fails
        assert code == 1
        assert err.startswith(("error: UNAVAILABLE: ", "error: UNAUTHENTICATED: ")), err
        assert len(err.splitlines()) == 1
    assert service.methods_called() == ["list_queues"]


@pytest.mark.unit
def test_client_certificate_flags_are_checked_before_any_call(tmp_path: Path) -> None:
    pem = tmp_path / "client.pem"
    pem.write_text("checked by the TLS handshake, not here\n")
    missing = tmp_path / "nowhere.pem"
    base = ("queues", "--server", "127.0.0.1:1")
    code, _, err = run(*base, "--tls-cert", str(missing), "--tls-key", str(pem))
    assert (code, err) == (2, f"error: --tls-cert: {missing}: no such file\n")
    code, _, err = run(*base, "--tls-cert", str(pem), "--tls-key", str(missing))
    assert (code, err) == (2, f"error: --tls-key: {missing}: no such file\n")
    for flag in ("--tls-cert", "--tls-key"):
        code, _, err = run(*base, flag, str(pem))
        assert (code, err) == (
            2,
            "error: --tls-cert and --tls-key go together: the client's certificate and its key\n",
        )
    code, out, _ = run("status", "--help")
    assert "--tls-cert" in out and "--tls-key" in out
    code, out, _ = run("watch", "--help")
    assert "--reconnect-timeout" in out


@pytest.mark.unit
def test_a_command_needs_exactly_one_source() -> None:
    code, _, err = run("queues")
    assert code == 2
    assert "--server" in err and "--manifests" in err
    code, _, err = run("queues", "--server", "127.0.0.1:1", "--manifests", str(QUICKSTART))
    assert code == 2
    assert "not both" in err


@pytest.mark.grpc
def test_an_unreachable_server_is_exit_1() -> None:
    with serve_fake() as server:
        address = server.address
    code, _, err = run("queues", "--server", address, "--timeout", "5")
    assert code == 1
    assert err.startswith("error: UNAVAILABLE")


@pytest.mark.grpc
def test_tables_follow_the_terminal_width(server: FakeServer) -> None:
    for width in (80, 200):
        code, out, _ = run("status", "--server", server.address, env={"COLUMNS": str(width)})
        assert code == 0
        assert max(len(line) for line in out.splitlines()) <= width
    code, narrow, _ = run("queues", "--server", server.address, env={"COLUMNS": "80"})
    code, wide, _ = run("queues", "--server", server.address, env={"COLUMNS": "200"})
    assert max(len(line) for line in wide.splitlines()) > 80
    assert len(narrow.splitlines()) > len(wide.splitlines())


# ------------------------------------------------------------------------------------- offline


@pytest.mark.unit
def test_offline_queues_status_and_explain_on_quickstart() -> None:
    code, out, _ = run("queues", "--manifests", str(QUICKSTART), "--output", "json")
    assert code == 0
    queues = {q["name"]: q for q in json.loads(out)}
    assert queues["team-a"]["parent"] == "research"
    assert queues["team-a"]["resources"]["nvidia.com/gpu"]["allocated"] > 0
    code, out, _ = run("status", "--manifests", str(QUICKSTART), "--state", "pending", "--output", "json")
    assert code == 0
    assert [w["id"] for w in json.loads(out)] == ["team-b/too-big"]
    code, out, _ = run("explain", "team-b/too-big", "--manifests", str(QUICKSTART))
    assert code == 0
    assert "team-b/too-big: PENDING" in out
    assert "gang: 5 required, 5 exist" in out


@pytest.mark.unit
def test_status_shows_a_workloads_topology_constraint_and_none_where_it_has_none() -> None:
    """examples/topology's jobs ask for their rack by annotation; the podgrouper writes that into
    the PodGroup, and the workload's answer carries it back. Its inference pods ask for none."""
    topology = str(ROOT / "examples" / "topology")
    code, out, _ = run("status", "ml/eval", "--manifests", topology)
    assert code == 0
    assert re.search(r"^topology +cluster-topology: required example\.com/rack *$", out, re.MULTILINE), out
    code, out, _ = run("status", "ml/eval", "--manifests", topology, "--output", "json")
    assert json.loads(out)["topology"] == {
        "topology": "cluster-topology",
        "required_level": "example.com/rack",
        "preferred_level": "",
    }
    code, out, _ = run("status", "ml/inference-0", "--manifests", topology, "--output", "json")
    assert code == 0 and "topology" not in json.loads(out)
    code, out, _ = run("status", "ml/inference-0", "--manifests", topology)
    assert "topology" not in out


@pytest.mark.unit
def test_offline_submit_runs_a_cycle_and_a_bad_one_names_the_field(tmp_path: Path) -> None:
    path = tmp_path / "small.yaml"
    path.write_text(SPEC.format(replicas=1))
    code, out, _ = run("submit", str(path), "--manifests", str(QUICKSTART), "--output", "json")
    assert code == 0, out
    (response,) = json.loads(out)
    assert response["id"] == "team-a/train"
    assert response["workload"]["state"] in {"RUNNING", "PENDING"}
    code, _, err = run("submit", str(spec_file(tmp_path, replicas=0)), "--manifests", str(QUICKSTART))
    assert code == 2
    assert "workload.pod_sets[0].replicas" in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.unit
def test_offline_what_if_applies_nothing(tmp_path: Path) -> None:
    code, out, _ = run(
        "what-if", str(spec_file(tmp_path)), "--manifests", str(QUICKSTART), "--output", "json"
    )
    assert code == 0
    response = json.loads(out)
    assert {w["id"] for w in response["workloads"]} >= {"team-a/train", "team-b/too-big"}


@pytest.mark.unit
def test_offline_needs_a_directory_with_manifests(tmp_path: Path) -> None:
    code, _, err = run("queues", "--manifests", str(tmp_path))
    assert code == 2
    assert "no Kubernetes manifests" in err
    (tmp_path / "bad.yaml").write_text("apiVersion: v1\nkind: Frobnicator\nmetadata: {name: x}\n")
    code, _, err = run("queues", "--manifests", str(tmp_path))
    assert code == 2
    assert "Frobnicator" in err


@pytest.mark.grpc
def test_a_real_server_answers_as_offline_mode_does(tmp_path: Path) -> None:
    """The transport's own server over the real service: same JSON as offline, token checked."""
    grpc_api = pytest.importorskip("kai_ray.rpc.transport")
    from kai_ray.rpc.auth import TokenTable

    offline = run("queues", "--manifests", str(QUICKSTART), "--output", "json")
    client = offline_client(QUICKSTART)
    tokens = TokenTable([("t0k", Caller(None, "test"))])
    with client, grpc_api.start_grpc_server(client.service, "127.0.0.1:0", tokens=tokens) as server:
        address = f"127.0.0.1:{server.port}"
        remote = run("queues", "--server", address, "--token", "t0k", "--output", "json")
        assert remote == offline
        code, _, err = run("queues", "--server", address, "--token", "nope")
        assert code == 1 and err.startswith("error: UNAUTHENTICATED")
        code, _, err = run("submit", str(spec_file(tmp_path, 0)), "--server", address, "--token", "t0k")
        assert code == 2
        assert "workload.pod_sets[0].replicas" in err


@pytest.mark.unit
def test_the_spec_in_docs_cli_md_submits_offline(tmp_path: Path) -> None:
    text = (ROOT / "docs" / "cli.md").read_text()
    spec = text.split("```yaml\n", 1)[1].split("```", 1)[0]
    path = tmp_path / "train.yaml"
    path.write_text(spec)
    code, out, err = run("submit", str(path), "--manifests", str(QUICKSTART), "--output", "json")
    assert code == 0, err
    (response,) = json.loads(out)
    assert response["id"] == "team-a/train"
    assert response["workload"]["min_available"] == 2
