"""`kai-ray simulate --shard-by node-pool` and `bench --shard-by node-pool`, on examples/node-pools."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from kai_ray.cli import app

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "node-pools"
SCENARIOS = ROOT.parent / "shared" / "conformance" / "scenarios"
CORPUS_SAMPLE = sorted(
    path
    for family in ("allocate", "reclaim", "preempt", "consolidation", "integration-stalegangeviction")
    for path in sorted((SCENARIOS / family).glob("*.yaml"))[:2]
)


def simulate(*args: str) -> str:
    result = CliRunner().invoke(app, ["simulate", *args])
    assert result.exit_code == 0, result.output
    return result.stdout


def placements(document: dict[str, Any]) -> dict[str, tuple[str, str | None]]:
    """Workload pod name → (status, node); PodGroup names (pg-<workload>-<uuid>) are dropped."""
    return {key.rsplit("/", 1)[1]: (task["status"], task["node"]) for key, task in document["tasks"].items()}


def test_each_pool_keeps_its_jobs_on_its_own_nodes() -> None:
    document = json.loads(simulate(str(EXAMPLE), "--shard-by", "node-pool", "--output", "json"))
    assert placements(document) == {
        "resnet-0": ("Allocated", "a100-1"),
        "resnet-1": ("Allocated", "a100-2"),
        "resnet-extra-0": ("Pending", None),
        "finetune-0": ("Allocated", "h100-1"),
        "notebook-0": ("Allocated", "shared-1"),
    }
    assert document["counts"] == {"binds": 4, "evictions": 0, "pipelined": 0}


def test_without_sharding_the_same_job_takes_an_idle_node_of_another_pool() -> None:
    """The contrast that shows the option at work: one scheduler over every node ignores pools."""
    document = json.loads(simulate(str(EXAMPLE), "--output", "json"))
    status, node = placements(document)["resnet-extra-0"]
    assert status == "Allocated" and node is not None and node.startswith("h100-")


def test_the_table_has_a_section_per_pool_and_the_invisible_queue() -> None:
    output = simulate(str(EXAMPLE), "--shard-by", "node-pool")
    sections = [line for line in output.splitlines() if "node pool '" in line]
    assert [s.split("node pool ")[1].split()[0] for s in sections] == ["''", "'a100'", "'h100'"]
    assert "queue 'llm' does not exist" in output


@pytest.mark.parametrize("scenario", CORPUS_SAMPLE, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_a_cluster_without_pools_prints_the_unsharded_bytes(scenario: Path) -> None:
    sharded = simulate(str(scenario), "--output", "json", "--shard-by", "node-pool")
    assert sharded == simulate(str(scenario), "--output", "json")


def test_time_based_fair_share_is_refused_per_pool() -> None:
    example = ROOT / "examples" / "time-based-fairshare" / "example-7.yaml"
    result = CliRunner().invoke(app, ["simulate", str(example), "--shard-by", "node-pool"])
    assert result.exit_code == 2
    assert "--shard-by node-pool" in result.output and "usage" in result.output


def test_bench_by_pool_reports_the_whole_cluster_and_the_pools_in_turn(tmp_path: Path) -> None:
    out = tmp_path / "pools.json"
    result = CliRunner().invoke(
        app,
        ["bench", "--shape", "pools-2x2x8", "--repeat", "1", "--shard-by", "node-pool", "--json", str(out)],
    )
    assert result.exit_code == 0, result.output
    assert "2 node pools" in result.stdout
    document = json.loads(out.read_text())
    assert [row["mode"] for row in document["rows"]] == [
        "whole cluster, in-process",
        "pools, in-process in turn",
    ]
    assert document["rows"][1]["pods_placed"] == 8
