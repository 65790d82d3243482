"""Issue 34's table, as a new user meets it: pods on the quickstart's four 8-GPU nodes through
`kai-ray simulate`, each ending as kube-scheduler decides, with the reason shown."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from kai_ray.cli import app

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "examples" / "quickstart"
CONSTRAINTS = ROOT / "examples" / "constraints"


def pod(name: str, spec: dict[str, Any], labels: dict[str, str] | None = None) -> dict[str, Any]:
    """A pod of team-a's queue with one container; `spec` adds to the pod spec, `resources` to the
    container."""
    resources = spec.pop("resources", {"limits": {"nvidia.com/gpu": "1"}})
    ports = spec.pop("ports", [])
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "team-a",
            "labels": {"kai.scheduler/queue": "team-a", **(labels or {})},
        },
        "spec": {
            "schedulerName": "kai-scheduler",
            "containers": [{"name": "main", "image": "busybox", "resources": resources, "ports": ports}],
            **spec,
        },
    }


def simulate(tmp_path: Path, objects: list[dict[str, Any]]) -> tuple[dict[str, str | None], str]:
    """Each pod's node after one cycle on the quickstart's nodes and queues, and the table."""
    for name in ("nodes.yaml", "queues.yaml"):
        shutil.copy(QUICKSTART / name, tmp_path / name)
    (tmp_path / "pods.yaml").write_text(yaml.safe_dump_all(objects))
    runner = CliRunner()
    result = runner.invoke(app, ["simulate", str(tmp_path), "--output", "json"])
    assert result.exit_code == 0, result.stdout + result.stderr
    tasks = json.loads(result.stdout)["cycles"][0]["end"]["tasks"]
    placed = {key.split("/")[-1]: task["node"] for key, task in tasks.items()}
    table = runner.invoke(app, ["simulate", str(tmp_path)], env={"COLUMNS": "400"})
    assert table.exit_code == 0, table.stdout
    return placed, table.stdout


WEB = {"app": "web"}
ANTI_AFFINITY = {
    "affinity": {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": WEB}, "topologyKey": "kubernetes.io/hostname"}
            ]
        }
    }
}


def test_replicas_with_required_anti_affinity_go_one_per_node(tmp_path: Path) -> None:
    replicas = [pod(f"web-{i}", dict(ANTI_AFFINITY), WEB) for i in range(5)]
    placed, table = simulate(tmp_path, replicas)
    nodes = [placed[f"web-{i}"] for i in range(5)]
    assert sorted(n for n in nodes if n) == ["gpu-node-1", "gpu-node-2", "gpu-node-3", "gpu-node-4"]
    assert placed["web-4"] is None
    assert "4 nodes: pod anti-affinity with team-a/web-0 on kubernetes.io/hostname" in table


def test_pods_binding_one_host_port_go_one_per_node(tmp_path: Path) -> None:
    port = [{"containerPort": 8080, "hostPort": 8080}]
    placed, table = simulate(tmp_path, [pod(f"p-{i}", {"ports": port}) for i in range(5)])
    assert sorted(n for n in placed.values() if n) == ["gpu-node-1", "gpu-node-2", "gpu-node-3", "gpu-node-4"]
    assert "4 nodes: host port 8080/TCP in use" in table


def test_resources_no_node_publishes_keep_pods_pending(tmp_path: Path) -> None:
    rdma = pod("rdma", {"resources": {"limits": {"nvidia.com/gpu": "1", "rdma/hca": "1"}}})
    scratch = pod("scratch", {"resources": {"requests": {"cpu": "1", "ephemeral-storage": "100Ti"}}})
    placed, table = simulate(tmp_path, [rdma, scratch])
    assert placed == {"rdma": None, "scratch": None}
    assert "4 nodes: insufficient rdma/hca" in table
    assert "4 nodes: insufficient ephemeral-storage" in table


def test_required_node_affinity_terms_are_ored(tmp_path: Path) -> None:
    terms = [
        {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["gpu-node-3"]}]},
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gpu-node-4"]}]},
    ]
    required = {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}
    }
    pods = [
        pod(f"p-{i}", {"affinity": required, "resources": {"limits": {"nvidia.com/gpu": "8"}}})
        for i in range(3)
    ]
    placed, table = simulate(tmp_path, pods)
    assert sorted(n for n in placed.values() if n) == ["gpu-node-3", "gpu-node-4"]
    assert "0 of 4 nodes fit (2 fail node affinity/taints; 2 lack free GPUs)" in table


def test_the_constraints_example_places_as_its_docs_say() -> None:
    result = CliRunner().invoke(app, ["simulate", str(CONSTRAINTS), "--output", "json"])
    assert result.exit_code == 0, result.stdout
    tasks = json.loads(result.stdout)["cycles"][0]["end"]["tasks"]
    placed = {key.split("/")[-1]: task["node"] for key, task in tasks.items()}
    web = sorted(node for name, node in placed.items() if name.startswith("web-") and node)
    assert web == ["gpu-node-1", "gpu-node-2", "gpu-node-3", "gpu-node-4"]
    assert placed["rdma-train"] == "gpu-node-4" and placed["scratch"] is None
    assert placed["exporter-1"] != placed["exporter-2"]
    assert placed["either-term"] == "gpu-node-3"
    assert placed["dataset-reader"] == "gpu-node-2" and placed["configured-trainer"] is None
    zones = {"gpu-node-1": "a", "gpu-node-2": "a", "gpu-node-3": "b", "gpu-node-4": "b"}
    spread = sorted(zones[node] for name, node in placed.items() if name.startswith("spread-batch") and node)
    assert spread == ["a", "a", "b", "b"]
