"""`examples/reclaim-blocked` through `kai-ray simulate`: the reclaim allocate would undo is not made."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kai_ray.cli import app

pytestmark = pytest.mark.unit

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "reclaim-blocked"


def test_no_cycle_evicts_for_a_reclaimer_queued_behind_a_job_that_cannot_fit() -> None:
    result = CliRunner().invoke(app, ["simulate", str(EXAMPLE), "--cycles", "3", "--output", "json"])
    assert result.exit_code == 0, result.output
    cycles = json.loads(result.output)["cycles"]
    assert [cycle["counts"] for cycle in cycles] == [{"binds": 0, "evictions": 0, "pipelined": 0}] * 3
    statuses = {key.rsplit("/", 1)[1]: task["status"] for key, task in cycles[-1]["end"]["tasks"].items()}
    assert statuses == {"b1": "Running", "b2": "Running", "big": "Pending", "small": "Pending"}
