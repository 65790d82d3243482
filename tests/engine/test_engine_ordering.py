"""Job order within a queue (§5.3) and queue order across queues (§5.1, §5.2).

Each test builds a one-node cluster where exactly one of the competing jobs
fits, and names/ages things so that the fallback order would pick the *other*
job: the bind proves the rule under test decided.
"""

from __future__ import annotations

import pytest
from builders import binds, cluster, config, run_cycle

from kai_ray.model.objects import TaskStatus

pytestmark = pytest.mark.unit

S = TaskStatus


def only_bound_job(plan_binds: dict[str, str]) -> str:
    assert len(plan_binds) == 1, plan_binds
    (task,) = plan_binds
    return task.rsplit("-", 1)[0]


# ---------------------------------------------------------------------- job order (§5.3)


def test_higher_priority_job_goes_first_within_a_queue() -> None:
    state = (
        cluster()
        .node("n1", gpus=1)
        .queue("q")
        .job("a-old-low", queue="q", gpus=1, priority=50, created=0)
        .job("b-new-high", queue="q", gpus=1, priority=75, created=100)
        .build()
    )
    assert only_bound_job(binds(run_cycle(state))) == "b-new-high"


def test_without_the_priority_plugin_the_older_job_goes_first() -> None:
    state = (
        cluster()
        .node("n1", gpus=1)
        .queue("q")
        .job("b-old-low", queue="q", gpus=1, priority=50, created=0)
        .job("a-new-high", queue="q", gpus=1, priority=75, created=100)
        .build()
    )
    assert only_bound_job(binds(run_cycle(state, config(drop=["priority"])))) == "b-old-low"


def test_older_job_first_then_name_when_priorities_tie() -> None:
    builder = cluster().node("n1", gpus=1).queue("q")
    older = builder.job("z-older", queue="q", gpus=1, created=0).job("a-newer", queue="q", gpus=1, created=5)
    assert only_bound_job(binds(run_cycle(older.build()))) == "z-older"
    same_age = cluster().node("n1", gpus=1).queue("q").job("b", queue="q", gpus=1).job("a", queue="q", gpus=1)
    assert only_bound_job(binds(run_cycle(same_age.build()))) == "a"


def test_job_below_its_gang_minimum_goes_before_one_that_would_grow() -> None:
    state = (
        cluster()
        .node("n1", gpus=3)
        .queue("q")
        .job("a-growing", queue="q", gpus=1, pods=2, min_member=1, status=S.RUNNING, node="n1")
        .task()
        .job("b-starting", queue="q", gpus=1, created=50)
        .build()
    )
    assert only_bound_job(binds(run_cycle(state))) == "b-starting"


def test_job_exactly_at_its_minimum_goes_before_one_above_it() -> None:
    state = (
        cluster()
        .node("n1", gpus=6)
        .queue("q")
        .job("a-above", queue="q", gpus=1, pods=3, min_member=2, status=S.RUNNING, node="n1")
        .task()
        .job("b-at-min", queue="q", gpus=1, pods=2, min_member=2, status=S.RUNNING, node="n1", created=50)
        .task()
        .build()
    )
    assert only_bound_job(binds(run_cycle(state))) == "b-at-min"


# ---------------------------------------------------------------------- queue order (§5.2)


def test_queue_below_its_fair_share_goes_first() -> None:
    """Fair shares of a 4-GPU node: busy 3, idle 1. busy is at its share, idle far below: idle's job binds.

    With no fairness the older queue (and the older job, in the alphabetically first queue) would win.
    """
    state = (
        cluster()
        .node("n1", gpus=4)
        .queue("a-busy", created=0)
        .queue("b-idle", created=10)
        .job("running", queue="a-busy", gpus=1, pods=3, status=S.RUNNING, node="n1")
        .job("busy-more", queue="a-busy", gpus=1, created=0)
        .job("idle-first", queue="b-idle", gpus=1, created=100)
        .build()
    )
    assert only_bound_job(binds(run_cycle(state))) == "idle-first"


def test_starved_queue_goes_before_a_queue_over_its_quota() -> None:
    state = (
        cluster()
        .node("n1", gpus=4)
        .queue("a-over", gpu_quota=1, created=0)
        .queue("b-starved", gpu_quota=2, created=10)
        .job("running", queue="a-over", gpus=1, pods=3, status=S.RUNNING, node="n1")
        .job("over-more", queue="a-over", gpus=1)
        .job("starved-first", queue="b-starved", gpus=1)
        .build()
    )
    assert only_bound_job(binds(run_cycle(state))) == "starved-first"


def test_higher_queue_priority_wins_among_equally_placed_queues() -> None:
    state = (
        cluster()
        .node("n1", gpus=1)
        .queue("a-normal", priority=100)
        .queue("b-important", priority=200, created=10)
        .job("normal", queue="a-normal", gpus=1)
        .job("important", queue="b-important", gpus=1, created=100)
        .build()
    )
    assert only_bound_job(binds(run_cycle(state))) == "important"


def test_queue_order_is_judged_between_siblings_at_each_level() -> None:
    """Department d2 is below its share, d1 at it: d2's project wins although p1 in d1 is empty."""
    state = (
        cluster()
        .node("n1", gpus=4)
        .queue("d1", created=0)
        .queue("d2", created=10)
        .queue("p0", parent="d1", created=0)
        .queue("p1", parent="d1", created=1)
        .queue("p2", parent="d2")
        .job("running", queue="p0", gpus=1, pods=3, status=S.RUNNING, node="n1")
        .job("d1-empty-project", queue="p1", gpus=1, created=0)
        .job("d2-project", queue="p2", gpus=1, created=100)
        .build()
    )
    assert only_bound_job(binds(run_cycle(state))) == "d2-project"


def test_queue_order_is_re_evaluated_after_every_allocation() -> None:
    """Two equal queues with two jobs each on 2 GPUs: one job each, not two of the first queue."""
    state = (
        cluster()
        .node("n1", gpus=2)
        .queue("a")
        .queue("b")
        .job("a1", queue="a", gpus=1)
        .job("a2", queue="a", gpus=1)
        .job("b1", queue="b", gpus=1)
        .job("b2", queue="b", gpus=1)
        .build()
    )
    assert sorted(binds(run_cycle(state))) == ["a1-0", "b1-0"]
