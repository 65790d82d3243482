"""`kai-ray bench --compare`: both executors in one run, with the time split and the projection."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kai_ray.cli import app

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("local_ray")]


def test_compare_times_local_and_ray_on_one_shape_and_projects_from_the_ray_runs(tmp_path: Path) -> None:
    out = tmp_path / "compare.json"
    result = CliRunner().invoke(
        app,
        ["bench", "--shape", "fill-4x20", "--repeat", "2", "--compare", "--shards", "2", "--json", str(out)],
        env={"COLUMNS": "160"},
    )
    assert result.exit_code == 0, result.output
    assert "x local" in result.stdout
    assert "K=8" in result.stdout
    assert "sharded batches" in result.stdout
    document = json.loads(out.read_text())
    assert document["shape"] == "fill-4x20"
    rows = document["results"]
    assert [(r["executor"], r["shards"]) for r in rows] == [("local", 1), ("ray", 1), ("ray", 2)]
    local, one, two = rows
    assert local["ratio_to_local"] == 1.0
    assert local["projected_cycle_seconds"] == {
        k: local["median_cycle_seconds"] for k in ("1", "2", "4", "8")
    }
    for row in (one, two):
        assert row["pods_placed"] == local["pods_placed"] == 20
        assert row["ratio_to_local"] == pytest.approx(
            row["median_cycle_seconds"] / local["median_cycle_seconds"]
        )
        split = row["time_split"]
        assert split["batches"] >= 1
        assert len(split["shard_compute_s"]) == row["shards"]
        assert all(seconds > 0 for seconds in split["shard_compute_s"])
        assert split["transfer_s"] > 0
        assert 0 < split["driver_serial_s"] < split["cycle_s"]
        assert set(row["projected_cycle_seconds"]) == {"1", "2", "4", "8"}
    assert "1 and 2 shards" in two["projection_basis"]
    # The projection passes through what was measured at the measured shard count.
    assert two["projected_cycle_seconds"]["2"] == pytest.approx(two["time_split"]["cycle_s"], rel=0.05)
