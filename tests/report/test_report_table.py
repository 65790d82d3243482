"""The table a person reads: statuses, queue numbers and reasons come from the plan."""

from __future__ import annotations

import io

import pytest
from builders import cluster, config
from rich.console import Console

from kai_ray.cluster.sim.simulator import SimulatedCluster
from kai_ray.report.table import job_status, render_table

pytestmark = pytest.mark.unit


def render(cycles: int = 1) -> str:
    state = (
        cluster()
        .node("n1", gpus=2)
        .queue("team", gpu_quota=2)
        .job("fits", queue="team", gpus=1)
        .job("gang", queue="team", gpus=1, pods=3, min_member=3)
        .build()
    )
    results = SimulatedCluster(state, config()).run(cycles)
    buffer = io.StringIO()
    render_table(results, Console(file=buffer, width=200))
    return buffer.getvalue()


def test_table_shows_bound_and_pending_jobs_with_the_gang_reason() -> None:
    text = render()
    fits = next(line for line in text.splitlines() if " fits " in line)
    gang = next(line for line in text.splitlines() if " gang " in line)
    assert "Bound" in fits and "n1" in fits
    assert "Pending" in gang and "gang needs 3" in gang
    assert "1 pods bound" in text


def test_bound_pods_read_running_in_the_next_cycle() -> None:
    fits = next(line for line in render(cycles=2).splitlines() if " fits " in line)
    assert "Running" in fits


def test_job_status_words() -> None:
    state = (
        cluster()
        .node("n1", gpus=1)
        .queue("q", gpu_quota=1)
        .job("j", queue="q", gpus=1, pods=2, min_member=1)
        .build()
    )
    result = SimulatedCluster(state, config()).run_cycle()
    job = result.session.jobs[0]
    assert job_status(job) == "Bound 1/2"
