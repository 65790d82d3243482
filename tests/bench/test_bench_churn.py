"""The churn shape: a busy cluster fed watch events, read through the scheduler's own path."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kai_ray.bench.churn import run_churn
from kai_ray.bench.churn_objects import ChurnCluster
from kai_ray.cli import app

pytestmark = pytest.mark.unit


def test_each_cycle_places_the_pods_that_arrived_in_the_room_the_ended_ones_left() -> None:
    """A full cluster (8 pods per node): only the ended pods' GPUs are free, and every cycle's new
    pods take exactly those, with the models kept or rebuilt alike."""
    kept = run_churn(10, 80, repeat=3)
    rebuilt = run_churn(10, 80, repeat=3, rebuild=True)
    assert kept.pods_placed == rebuilt.pods_placed == 1  # 1 % of 80, at least one
    assert len(kept.runs) == len(rebuilt.runs) == 3


def test_churn_ends_running_pods_and_adds_pending_ones_with_fresh_versions() -> None:
    cluster = ChurnCluster(25, 200)
    initial = list(cluster.initial())
    assert [e.kind for e in initial].count("Pod") == 200
    events = cluster.churn()
    deleted = [e.obj["metadata"]["name"] for e in events if e.type == "DELETED" and e.kind == "Pod"]
    added = [e.obj for e in events if e.type == "ADDED" and e.kind == "Pod"]
    assert deleted == ["pod-0000000", "pod-0000001"]
    assert [p["metadata"]["name"] for p in added] == ["pod-0000200", "pod-0000201"]
    assert all("nodeName" not in p["spec"] for p in added)
    versions = [int(e.obj["metadata"]["resourceVersion"]) for e in [*initial, *events]]
    assert versions == sorted(set(versions))
    with pytest.raises(ValueError, match="churn-1x9: 9 pods do not fit on 1 8-GPU nodes"):
        ChurnCluster(1, 9)


def test_bench_command_reports_the_churn_shape_and_its_full_rebuild(tmp_path: Path) -> None:
    out = tmp_path / "churn.json"
    result = CliRunner().invoke(app, ["bench", "--shape", "churn-10x80", "--repeat", "2", "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert "rebuilt from the cache every cycle" in result.stdout
    document = json.loads(out.read_text())
    assert document["shape"] == "churn-10x80" and len(document["runs"]) == 2
    assert document["pods_placed"] == 1 and document["peak_rss_mb"] > 0
    rebuilt = document["full_rebuild"]
    assert len(rebuilt["runs"]) == 2 and rebuilt["ratio"] > 0
