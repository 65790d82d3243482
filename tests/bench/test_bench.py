"""The runner times the shape's own actions and reports what it placed and evicted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kai_ray.bench.runner import run_shape
from kai_ray.cli import app

pytestmark = pytest.mark.unit

REQUIRED_KEYS = {
    "shape",
    "executor",
    "shards",
    "runs",
    "median_cycle_seconds",
    "pods_placed",
    "pods_per_second",
    "peak_rss_mb",
    "evictions",
}


def test_runner_places_everything_that_fits() -> None:
    result = run_shape("fill-4x40", repeat=2)
    assert result.pods_placed == 32
    assert result.evictions == 0
    assert len(result.runs) == 2
    assert result.median_cycle_seconds > 0
    assert result.pods_per_second == pytest.approx(32 / result.median_cycle_seconds)


def test_runner_counts_pipelined_pods_and_evictions() -> None:
    result = run_shape("kai-reclaim-large-4", repeat=1)
    assert result.pods_placed == 2
    assert result.evictions == 16


def test_bench_command_prints_a_table_and_writes_json(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    result = CliRunner().invoke(
        app, ["bench", "--shape", "kai-allocate-2x10", "--repeat", "2", "--json", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert "pods/s" in result.stdout
    document = json.loads(out.read_text())
    assert set(document) >= REQUIRED_KEYS
    assert document["shape"] == "kai-allocate-2x10"
    assert document["executor"] == "local"
    assert document["shards"] == 1
    assert len(document["runs"]) == 2
    assert document["pods_placed"] == 10


def test_bench_command_rejects_unknown_shape() -> None:
    result = CliRunner().invoke(app, ["bench", "--shape", "mystery"])
    assert result.exit_code == 2
    assert "unknown shape" in result.stderr
