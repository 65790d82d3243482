"""The clocks a plan hands its backend to keep with each job (`Plan.started`, `Plan.stale_marks`).

A backend that opens every cycle afresh (`serve`) keeps them on the PodGroup; if the plan did
not say when they start and stop, a stale gang's grace period and a gang's guaranteed runtime
would start again every cycle.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from builders import cluster

from kai_ray.api.config import SchedulerConfig
from kai_ray.engine.cycle import schedule
from kai_ray.engine.reasons import StaleMark
from kai_ray.model.objects import TaskStatus
from kai_ray.model.snapshot import compile_snapshot

pytestmark = pytest.mark.unit


def test_a_gang_first_seen_stale_is_marked_and_a_marked_one_keeps_its_mark() -> None:
    state = (
        cluster()
        .node("n1", gpus=8)
        .queue("q")
        .job("fresh", queue="q", gpus=1, min_member=2, status=TaskStatus.RUNNING, node="n1")
        .job("marked", queue="q", gpus=1, min_member=2, status=TaskStatus.RUNNING, node="n1")
        .build()
    )
    fresh, marked = state.jobs
    marked.stale_since = state.now - 5
    plan = schedule(compile_snapshot(state), SchedulerConfig())
    assert plan.stale_marks == {fresh.key: StaleMark(state.now, 1, 2)}
    assert plan.evictions == []  # 60 s of grace by default


def test_a_mark_is_cleared_once_the_gang_is_whole_and_a_start_is_reported_where_min_runtime_reads_it() -> (
    None
):
    state = (
        cluster()
        .node("n1", gpus=8)
        .queue("q")
        .job("whole", queue="q", gpus=1, pods=2, status=TaskStatus.RUNNING, node="n1")
        .job("new", queue="q", gpus=1, pods=2)
        .build()
    )
    whole, new = state.jobs
    whole.stale_since = state.now - 5
    plan = schedule(compile_snapshot(state), SchedulerConfig())
    assert plan.stale_marks == {whole.key: StaleMark(None, 2, 2)}
    assert plan.started == {}  # no min-runtime anywhere: nothing reads a start, none is kept
    state.queues[0] = replace(state.queues[0], reclaim_min_runtime=600.0)
    assert schedule(compile_snapshot(state), SchedulerConfig()).started == {new.key: state.now}
