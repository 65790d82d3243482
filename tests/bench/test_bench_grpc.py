"""`kai-ray bench --grpc` at a tiny size: the whole pipeline runs (server, client process, cycles)
and the JSON has the shape the docs and a reader of results rely on.  No timing is asserted:
this machine's speed is not what the test is about."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kai_ray.cli import app

pytestmark = pytest.mark.grpc

LATENCY_KEYS = {"calls", "p50_ms", "p99_ms", "max_ms"}
CYCLE_KEYS = {"cycles", "median_engine_s", "median_total_s", "max_total_s"}


def test_bench_grpc_runs_at_a_tiny_size_and_writes_its_json(tmp_path: Path) -> None:
    out = tmp_path / "grpc.json"
    # 2 nodes × 8 GPUs hold two gangs of 4 × 2 GPUs; the third waits, so Explain answers both ways.
    arguments = ["--nodes", "2", "--pods", "12", "--clients", "2", "--repeat", "1", "--json", str(out)]
    result = CliRunner().invoke(app, ["bench", "--grpc", *arguments])
    assert result.exit_code == 0, result.output
    assert "submits/s" in result.output and "Explain p50/p99 ms" in result.output
    data = json.loads(out.read_text())
    assert {
        "nodes": data["nodes"],
        "workloads": data["workloads"],
        "pods": data["pods"],
        "clients": data["clients"],
        "running": data["workloads_running"],
        "pending": data["workloads_pending"],
    } == {"nodes": 2, "workloads": 3, "pods": 12, "clients": 2, "running": 2, "pending": 1}
    assert data["errors"] == []
    assert set(data["submit"]) == LATENCY_KEYS and data["submit"]["calls"] == 3
    assert set(data["explain"]) == LATENCY_KEYS and data["explain"]["calls"] == 3
    assert data["explain_pending"]["calls"] == 1
    assert set(data["full_cycle"]) == CYCLE_KEYS and data["full_cycle"]["cycles"] == 1
    assert set(data["cycles_during_submits"]) == CYCLE_KEYS
    assert data["targets"] == {"submits_per_second": 500.0, "explain_p99_ms": 50.0}
    assert isinstance(data["targets_met"], bool)
    for key in ("submit_seconds", "submits_per_second", "pods_per_second", "settle_seconds", "peak_rss_mb"):
        assert isinstance(data[key], float) and data[key] >= 0, key


def test_bench_grpc_refuses_fewer_pods_than_one_gang() -> None:
    result = CliRunner().invoke(app, ["bench", "--grpc", "--nodes", "1", "--pods", "3"])
    assert result.exit_code == 2
    assert "--pods must be at least 4" in result.output
