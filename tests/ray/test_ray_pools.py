"""Node pools scheduled in Ray tasks give the in-process plans, whatever happens to a task."""

from __future__ import annotations

import copy
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import ray.cloudpickle
from builders import config
from hypothesis import HealthCheck, given, settings
from pool_clusters import pooled_clusters, side_by_side
from typer.testing import CliRunner

from kai_ray.api.constants import NODE_POOL_LABEL
from kai_ray.bench.shapes import build_shape
from kai_ray.cli import app
from kai_ray.engine.plan import Plan
from kai_ray.model.objects import ClusterState
from kai_ray.model.pools import split_by_pool
from kai_ray.split.pool_runner import (
    LocalPoolRunner,
    PoolCycle,
    RayPoolRunner,
    merge_plans,
    schedule_pool,
    schedule_pools,
)

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("local_ray")]

ALL_ACTIONS = ("allocate", "consolidation", "reclaim", "preempt", "stalegangeviction")
FULL = config(actions=ALL_ACTIONS)

# The workers cannot import this test module: the misbehaving callables below travel by value.
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])


def facts(plan: Plan) -> tuple[object, ...]:
    return (plan.binds, plan.pipelined, plan.evictions, plan.pending_reasons, plan.tasks, plan.problems)


def cycle_inputs(state: ClusterState) -> dict[str, PoolCycle]:
    return {pool: PoolCycle(part, FULL) for pool, part in split_by_pool(state, NODE_POOL_LABEL).items()}


def in_pool(given: PoolCycle, pool: str) -> bool:
    return any(node.labels.get(NODE_POOL_LABEL) == pool for node in given.state.nodes)


@dataclass(frozen=True)
class RaisesAwayFromDriver:
    """Schedules the pool, except that in a worker process it raises for one pool."""

    driver: int
    pool: str

    def __call__(self, given: PoolCycle) -> Plan:
        if os.getpid() != self.driver and in_pool(given, self.pool):
            raise RuntimeError(f"pool {self.pool} fails in its Ray task")
        return schedule_pool(given)


@dataclass(frozen=True)
class HangsAwayFromDriver:
    """As `RaisesAwayFromDriver`, but the pool's Ray task never answers in time."""

    driver: int
    pool: str

    def __call__(self, given: PoolCycle) -> Plan:
        if os.getpid() != self.driver and in_pool(given, self.pool):
            time.sleep(600)  # a hung shard: the runner's deadline must end the wait, not this
        return schedule_pool(given)


def test_the_pools_shape_plans_alike_in_ray_tasks_and_in_process() -> None:
    state = build_shape("pools-3x4x40").state
    runner = RayPoolRunner()
    remote = schedule_pools(copy.deepcopy(state), FULL, runner)
    local = schedule_pools(copy.deepcopy(state), FULL, LocalPoolRunner())
    assert facts(remote) == facts(local)
    assert runner.fallbacks == []
    pools_placed = {bind.node.rsplit("-node-", 1)[0] for bind in remote.binds}
    assert pools_placed == {"pool-0", "pool-1", "pool-2"}


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pools=pooled_clusters())
def test_random_pooled_clusters_plan_alike_in_ray_tasks_and_in_process(
    pools: dict[str, ClusterState],
) -> None:
    state = side_by_side(list(pools.values()))
    runner = RayPoolRunner()
    remote = schedule_pools(copy.deepcopy(state), FULL, runner)
    assert facts(remote) == facts(schedule_pools(copy.deepcopy(state), FULL, LocalPoolRunner()))
    assert runner.fallbacks == []


def test_a_pool_whose_task_raises_is_scheduled_in_process_and_its_plan_kept() -> None:
    inputs = cycle_inputs(build_shape("pools-3x4x40").state)
    runner = RayPoolRunner()
    answers = runner.run(RaisesAwayFromDriver(os.getpid(), "pool-1"), inputs)
    assert runner.fallbacks == ["pool-1"]
    assert list(answers) == ["pool-0", "pool-1", "pool-2"]
    expected = LocalPoolRunner().run(schedule_pool, copy.deepcopy(inputs))
    assert facts(merge_plans(answers)) == facts(merge_plans(expected))
    assert answers["pool-1"].binds != []


def test_a_pool_whose_task_outlasts_the_deadline_is_scheduled_in_process() -> None:
    inputs = cycle_inputs(build_shape("pools-2x2x8").state)
    runner = RayPoolRunner()
    runner.run(schedule_pool, inputs)  # workers started, so only the hung task can miss the deadline
    runner.timeout_seconds = 5.0
    started = time.monotonic()
    answers = runner.run(HangsAwayFromDriver(os.getpid(), "pool-0"), inputs)
    assert time.monotonic() - started < 60.0
    assert "pool-0" in runner.fallbacks
    expected = LocalPoolRunner().run(schedule_pool, copy.deepcopy(inputs))
    assert facts(merge_plans(answers)) == facts(merge_plans(expected))


EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "node-pools"


def test_simulate_by_pool_prints_the_same_json_in_ray_tasks(tmp_path: Path) -> None:
    args = ["simulate", str(EXAMPLE), "--shard-by", "node-pool", "--output", "json", "--cycles", "2"]
    local = CliRunner().invoke(app, args)
    remote = CliRunner().invoke(app, [*args, "--executor", "ray"])
    assert local.exit_code == 0 and remote.exit_code == 0, remote.output
    assert remote.stdout == local.stdout


def test_bench_by_pool_in_ray_checks_its_plan_against_the_in_process_one(tmp_path: Path) -> None:
    out = tmp_path / "pools.json"
    args = ["bench", "--shape", "pools-2x2x8", "--repeat", "1", "--shard-by", "node-pool", "--json", str(out)]
    result = CliRunner().invoke(app, [*args, "--executor", "ray"])
    assert result.exit_code == 0, result.output
    document = json.loads(out.read_text())
    assert [row["mode"] for row in document["rows"]][-1] == "pools, one Ray task each"
    assert document["plans_identical"] is True and document["ray_fallbacks"] == 0
