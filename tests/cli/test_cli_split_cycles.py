"""`kai-ray bench --shard-by jobs` (split cycles) through the CLI, and `simulate` refusing it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kai_ray.cli import app

pytestmark = pytest.mark.unit

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "quickstart"


def test_bench_compares_split_cycles_with_the_local_engine(tmp_path: Path) -> None:
    out = tmp_path / "split.json"
    result = CliRunner().invoke(
        app,
        [
            "bench",
            *("--shape", "big-200x1600", "--repeat", "1", "--shard-by", "jobs"),
            *("--shards", "2", "--compare", "--json", str(out)),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "split-local x2 split cycle" in result.stdout
    local, split = json.loads(out.read_text())["results"]
    assert (local["executor"], split["executor"]) == ("local", "split-local")
    assert split["pods_placed"] == local["pods_placed"] == 1600
    assert split["split_cycles"]["cycles_split"] == 1.0
    assert split["split_cycles"]["critical_path_s"] > 0
    assert split["ratio_to_local"] > 0


def test_simulate_refuses_split_cycles_by_name() -> None:
    result = CliRunner().invoke(app, ["simulate", str(EXAMPLE), "--shard-by", "jobs"])
    assert result.exit_code == 2
    assert "--shard-by jobs" in result.output and "bench" in result.output
