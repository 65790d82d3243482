"""Benchmark shapes are reproducible data and the runner reports what it placed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kai_ray.bench.runner import run_shape
from kai_ray.bench.shapes import build_shape
from kai_ray.cli import app

pytestmark = pytest.mark.unit


def test_fill_shape_has_the_named_size_and_equal_queues() -> None:
    state = build_shape("fill-20x100")
    assert len(state.nodes) == 20
    assert len(state.jobs) == 100
    leaves = [q for q in state.queues if q.parent is not None]
    assert len(leaves) == 10
    assert {q.gpu.quota for q in leaves} == {16.0}


def test_same_shape_name_builds_the_same_cluster() -> None:
    assert build_shape("fill-5x7") == build_shape("fill-5x7")


def test_unknown_shape_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="unknown shape 'nope'"):
        build_shape("nope")


def test_runner_places_everything_that_fits() -> None:
    result = run_shape("fill-4x40", repeat=2)
    assert result.pods_placed == 32
    assert len(result.runs) == 2
    assert result.median_cycle_seconds > 0
    assert result.pods_per_second == pytest.approx(32 / result.median_cycle_seconds)


def test_bench_command_prints_a_table_and_writes_json(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    result = CliRunner().invoke(app, ["bench", "--shape", "fill-2x10", "--repeat", "1", "--json", str(out)])
    assert result.exit_code == 0
    assert "pods/s" in result.stdout
    document = json.loads(out.read_text())
    assert document["shape"] == "fill-2x10"
    assert document["pods_placed"] == 10
    assert set(document) >= {
        "executor",
        "shards",
        "runs",
        "median_cycle_seconds",
        "pods_per_second",
        "peak_rss_mb",
    }


def test_bench_command_rejects_unknown_shape() -> None:
    result = CliRunner().invoke(app, ["bench", "--shape", "mystery"])
    assert result.exit_code == 2
    assert "unknown shape" in result.stderr
