"""Node-pool sharding in-process: every pool's shard runs whole, and the plans are merged."""

from __future__ import annotations

import copy
from dataclasses import replace

import pytest
from builders import cluster, config
from hypothesis import HealthCheck, given, settings
from pool_clusters import POOLS, in_pool, pooled_clusters, side_by_side
from random_clusters import (
    ALL_ACTIONS,
    JobDraw,
    QueueDraw,
    plan_facts,
    running_cluster,
    scenarios,
    with_arrivals,
)

from kai_ray.api.constants import NODE_POOL_LABEL
from kai_ray.engine.cycle import schedule
from kai_ray.engine.plan import Bind, Plan
from kai_ray.engine.reasons import PendingCause
from kai_ray.model.objects import ClusterState, TaskStatus
from kai_ray.model.snapshot import compile_snapshot
from kai_ray.split.pool_runner import (
    LocalPoolRunner,
    merge_plans,
    schedule_pools,
    simulate_pools,
)

pytestmark = pytest.mark.unit

FULL = config(actions=ALL_ACTIONS)


def whole_plan(plan: Plan) -> tuple[object, ...]:
    return (*plan_facts(plan), plan.tasks, plan.problems)


def alone(state: ClusterState) -> Plan:
    return schedule(compile_snapshot(copy.deepcopy(state)), FULL)


def test_merge_concatenates_in_pool_name_order_whatever_the_input_order() -> None:
    def bind(task: str) -> Bind:
        return Bind("j", task, "n", (), 1.0)

    merged = merge_plans(
        {
            "b": Plan(binds=[bind("b1")]),
            "": Plan(binds=[bind("u1")]),
            "a": Plan(binds=[bind("a1"), bind("a2")]),
        }
    )
    assert [b.task for b in merged.binds] == ["u1", "a1", "a2", "b1"]


def test_the_local_runner_answers_every_pool_in_name_order() -> None:
    assert LocalPoolRunner().run(str.upper, {"b": "x", "": "y", "a": "z"}) == {"": "Y", "a": "Z", "b": "X"}


def two_pools_one_idle() -> ClusterState:
    """Pool a: one 2-GPU node and three 1-GPU jobs; pool b: an idle 8-GPU node and no job."""
    state = (
        cluster()
        .node("a1", gpus=2, labels={NODE_POOL_LABEL: "a"})
        .node("b1", gpus=8, labels={NODE_POOL_LABEL: "b"})
        .queue("qa", gpu_quota=-1)
        .queue("qb", gpu_quota=-1)
        .job("j1", queue="qa", gpus=1, created=1)
        .job("j2", queue="qa", gpus=1, created=2)
        .job("j3", queue="qa", gpus=1, created=3)
        .build()
    )
    state.queues = [replace(q, node_pool=q.name[1]) for q in state.queues]
    state.jobs = [replace(j, node_pool="a") for j in state.jobs]
    return state


def test_no_job_crosses_into_another_pool_even_when_that_pool_is_idle() -> None:
    plan = schedule_pools(two_pools_one_idle(), FULL)
    assert sorted((b.job, b.node) for b in plan.binds) == [("j1", "a1"), ("j2", "a1")]
    assert list(plan.pending_reasons) == ["j3"]


def test_a_job_naming_another_pools_queue_waits_with_queue_does_not_exist() -> None:
    state = two_pools_one_idle()
    state.jobs[2] = replace(state.jobs[2], queue="qb")
    plan = schedule_pools(state, FULL)
    assert plan.pending_reasons["j3"].cause == PendingCause.QUEUE_DOES_NOT_EXIST


def test_a_pod_off_its_pool_is_a_problem_of_the_merged_plan_and_held_on_its_node() -> None:
    state = two_pools_one_idle()
    running = state.jobs[0].tasks[0]
    running.status, running.node = TaskStatus.RUNNING, "b1"
    state.nodes[1] = replace(state.nodes[1], gpus=1)
    state.jobs.append(
        replace(
            state.jobs[1],
            name="jb",
            queue="qb",
            node_pool="b",
            tasks=[replace(running, name="jb-0", status=TaskStatus.PENDING, node=None)],
        )
    )
    plan = schedule_pools(state, FULL)
    assert [(p.kind, p.name, p.field) for p in plan.problems] == [("Pod", "j1-0", "spec.nodeName")]
    assert plan.pending_reasons["jb"].cause == PendingCause.NO_ROOM


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pools=pooled_clusters())
def test_the_merged_plan_is_every_pool_scheduled_alone(pools: dict[str, ClusterState]) -> None:
    """Each pool's cluster was drawn on its own; side by side and split again, every shard must
    decide exactly what its pool decides alone, and no pool's decisions may go missing."""
    state = side_by_side(list(pools.values()))
    merged = schedule_pools(copy.deepcopy(state), FULL)
    plans = [alone(pools[pool]) for pool in sorted(pools)]
    assert merged.binds == [bind for plan in plans for bind in plan.binds]
    assert merged.pipelined == [bind for plan in plans for bind in plan.pipelined]
    assert merged.evictions == [eviction for plan in plans for eviction in plan.evictions]
    assert merged.pending_reasons == {k: v for plan in plans for k, v in plan.pending_reasons.items()}
    assert merged.tasks == {k: v for plan in plans for k, v in plan.tasks.items()}
    assert merged.problems == [problem for plan in plans for problem in plan.problems]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenario=scenarios)
def test_one_unlabelled_pool_schedules_exactly_as_the_unsharded_scheduler(
    scenario: tuple[list[int], list[QueueDraw], list[JobDraw], list[JobDraw]],
) -> None:
    nodes, queues, first, later = scenario
    state = with_arrivals(running_cluster(nodes, queues, first), later)
    assert whole_plan(schedule_pools(copy.deepcopy(state), FULL)) == whole_plan(alone(state))


def test_simulating_by_pool_runs_each_pool_for_every_cycle_and_plays_its_lifecycle() -> None:
    """Binding pods start running between cycles in each pool, as the unsharded simulator plays it."""
    small = (
        cluster()
        .node("n1", gpus=2)
        .queue("q", gpu_quota=-1)
        .job("j1", queue="q", gpus=1, created=1)
        .job("j2", queue="q", gpus=1, created=2)
        .job("j3", queue="q", gpus=1, created=3)
        .build()
    )
    parts = {pool: in_pool(small, pool, f"p{i}-") for i, pool in enumerate(POOLS[1:])}
    per_pool = simulate_pools(side_by_side(list(parts.values())), FULL, cycles=2)
    assert list(per_pool) == ["pool-a", "pool-b"]
    for pool, results in per_pool.items():
        assert len(results) == 2
        last = results[-1].start.tasks
        assert sorted(state.status for state in last.values()).count(TaskStatus.RUNNING) == 2, pool
