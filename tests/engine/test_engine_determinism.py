"""Determinism (ARCHITECTURE.md "Determinism and errors", spec §22.29 ties by name).

The same cluster must give the same plan, whatever order the backend listed
its nodes, queues and jobs in.
"""

from __future__ import annotations

import copy
import random

import pytest
from builders import cluster, config, run_cycle

from kai_ray.api.config import DEFAULT_ACTIONS
from kai_ray.engine.plan import Plan
from kai_ray.model.objects import ClusterState, TaskStatus

pytestmark = pytest.mark.unit

S = TaskStatus


def busy_cluster() -> ClusterState:
    """Enough contention that order matters: ties between nodes, queues and jobs, gangs, fractions."""
    builder = cluster()
    for i in range(6):
        builder.node(f"n{i}", gpus=4, gpu_memory_mib=40_000, labels={"rack": f"r{i % 2}"})
    builder.queue("dept-a").queue("dept-b")
    for team in ("a1", "a2"):
        builder.queue(team, parent="dept-a", gpu_quota=3)
    builder.queue("b1", parent="dept-b", gpu_quota=6, gpu_limit=10)
    builder.job("run-a1", queue="a1", gpus=1, pods=3, status=S.RUNNING, node="n0")
    builder.job("run-b1", queue="b1", gpus=2, pods=2, status=S.RUNNING, node="n3")
    builder.job("leaving", queue="a2", gpus=1, pods=2, status=S.RELEASING, node="n5")
    builder.job("shared-run", queue="a2", gpus=0.5, status=S.RUNNING, node="n1", gpu_groups=("g1",))
    for i in range(4):
        builder.job(f"gang-{i}", queue=("a1", "a2", "b1")[i % 3], gpus=1, pods=3, min_member=2)
        builder.job(f"frac-{i}", queue=("b1", "a2")[i % 2], gpus=0.25 * (1 + i % 2))
        builder.job(f"rack-{i}", queue="a1", gpus=1, node_selector={"rack": f"r{i % 2}"}, priority=75)
    builder.job("too-big", queue="b1", gpus=4, pods=4)
    return builder.build()


def busy_cluster_with_a_preemptor() -> ClusterState:
    """`busy_cluster` plus a queue whose high-priority job must preempt a low one on the only
    node it may use.  (`busy_cluster`'s own pending jobs no longer evict anything: its queues
    that reclaim have a job too big to fit at their head, so KAI's victim simulation gives the
    victims their GPUs back first.)"""
    state = busy_cluster()
    extra = (
        cluster()
        .node("n6", gpus=4, gpu_memory_mib=40_000, labels={"rack": "r2"})
        .queue("c1", gpu_quota=4)
        .job("low", queue="c1", gpus=1, pods=4, min_member=1, status=S.RUNNING, node="n6")
        .job("high", queue="c1", gpus=1, pods=2, priority=75, node_selector={"rack": "r2"})
        .build()
    )
    state.nodes.extend(extra.nodes)
    state.queues.extend(extra.queues)
    state.jobs.extend(extra.jobs)
    return state


def shuffled(state: ClusterState, seed: int) -> ClusterState:
    rng = random.Random(seed)
    copied = copy.deepcopy(state)
    for items in (copied.nodes, copied.queues, copied.jobs):
        rng.shuffle(items)
    return copied


def signature(plan: Plan) -> tuple[object, ...]:
    return (
        sorted((b.job, b.task, b.node, b.gpu_groups, b.accepted_gpus) for b in plan.binds),
        sorted((b.job, b.task, b.node, b.gpu_groups) for b in plan.pipelined),
        sorted((e.job, e.task, e.node, e.reason) for e in plan.evictions),
        sorted(plan.pending_reasons.items()),
        plan.tasks,
    )


def test_the_busy_cluster_really_contends() -> None:
    plan = run_cycle(busy_cluster())
    assert plan.binds and plan.pipelined and plan.pending_reasons


def test_scheduling_twice_gives_identical_plans() -> None:
    state = busy_cluster()
    assert run_cycle(state) == run_cycle(state)


@pytest.mark.parametrize("seed", range(8))
def test_input_order_does_not_change_the_plan(seed: int) -> None:
    expected = signature(run_cycle(busy_cluster()))
    assert signature(run_cycle(shuffled(busy_cluster(), seed))) == expected


@pytest.mark.parametrize("seed", range(4))
def test_input_order_does_not_change_a_spread_plan(seed: int) -> None:
    cfg = config(gpu_placement="spread", gpu_sharing="spread")
    expected = signature(run_cycle(busy_cluster(), cfg))
    assert signature(run_cycle(shuffled(busy_cluster(), seed), cfg)) == expected


@pytest.mark.parametrize("seed", range(4))
def test_input_order_does_not_change_the_plan_of_all_default_actions(seed: int) -> None:
    cfg = config(actions=DEFAULT_ACTIONS)
    plan = run_cycle(busy_cluster_with_a_preemptor(), cfg)
    assert {e.reason.cause.value for e in plan.evictions} >= {"preempt"}  # the victim actions have work
    assert signature(run_cycle(shuffled(busy_cluster_with_a_preemptor(), seed), cfg)) == signature(plan)
