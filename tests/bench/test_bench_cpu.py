"""The bench's CPU split per cycle, its one-snapshot mode, and KAI's figures printed beside ours."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kai_ray.bench import runner
from kai_ray.bench.kai_reference import KAI_SECONDS_PER_OP, TARGET_FRACTION
from kai_ray.bench.runner import run_shape
from kai_ray.bench.shapes import Shape, build_shape
from kai_ray.cli import app

pytestmark = pytest.mark.unit


@pytest.fixture
def builds(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the shapes the runner builds, in order."""
    built: list[str] = []

    def counting(name: str) -> Shape:
        built.append(name)
        return build_shape(name)

    monkeypatch.setattr(runner, "build_shape", counting)
    return built


def test_same_snapshot_builds_the_shape_once_and_places_what_a_fresh_one_does(builds: list[str]) -> None:
    kept = run_shape("kai-allocate-2x10", repeat=3, same_snapshot=True)
    assert builds == ["kai-allocate-2x10"]
    fresh = run_shape("kai-allocate-2x10", repeat=3)
    assert builds == ["kai-allocate-2x10"] * 4
    assert kept.same_snapshot and not fresh.same_snapshot
    assert kept.pods_placed == fresh.pods_placed == 10
    assert len(kept.runs) == 3


def test_cpu_split_has_the_opening_and_the_actions_of_every_cycle() -> None:
    result = run_shape("kai-full-cycle-4x20", repeat=3)
    cpu = result.cpu_seconds
    assert cpu is not None and set(cpu) == {"opening", "actions_and_plan", "cycle"}
    assert cpu["opening"] > 0 and cpu["actions_and_plan"] > 0
    # Every cycle's sum exceeds its actions, so the medians keep that order.
    assert cpu["cycle"] > cpu["actions_and_plan"]
    assert cpu["cycle"] > cpu["opening"]


def test_a_shape_kai_benchmarks_is_set_against_kais_figure() -> None:
    result = run_shape("kai-allocate-10x50", repeat=1)
    cpu, kai = result.cpu_seconds, result.against_kai
    assert cpu is not None and kai is not None
    assert kai["kai_seconds_per_op"] == KAI_SECONDS_PER_OP["kai-allocate-10x50"] == 0.003
    assert kai["target_seconds"] == pytest.approx(0.003 * TARGET_FRACTION)
    assert kai["actions_and_plan_ratio"] == pytest.approx(cpu["actions_and_plan"] / 0.003)
    assert kai["whole_cycle_ratio"] == pytest.approx(cpu["cycle"] / 0.003)
    assert run_shape("kai-allocate-2x10", repeat=1).against_kai is None


def test_bench_command_writes_the_cpu_split_and_prints_kais_figure(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    result = CliRunner().invoke(
        app,
        ["bench", "--shape", "kai-allocate-10x50", "--repeat", "2", "--same-snapshot", "--json", str(out)],
    )
    assert result.exit_code == 0, result.output
    assert "CPU per cycle (medians, ms; one snapshot, compiled once)" in result.stdout
    assert "against KAI's benchmark (3 ms per op" in result.stdout
    document = json.loads(out.read_text())
    assert document["same_snapshot"] is True
    assert set(document["cpu_seconds"]) == {"opening", "actions_and_plan", "cycle"}
    assert document["against_kai"]["target_seconds"] == pytest.approx(0.0015)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--shape", "churn-4x8"], "churn-4x8: churn shapes change their cluster every cycle"),
        (["--shape", "pools-2x2x10", "--shard-by", "node-pool"], "--same-snapshot: node-pool runs"),
    ],
)
def test_same_snapshot_is_refused_where_every_cycle_needs_its_own_cluster(
    arguments: list[str], message: str
) -> None:
    result = CliRunner().invoke(app, ["bench", *arguments, "--same-snapshot"])
    assert result.exit_code == 2
    assert message in result.stderr
