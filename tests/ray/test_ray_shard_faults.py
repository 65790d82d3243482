"""A shard that fails in any way is caught, its rows ranked in-process, and the plan is unchanged.

Each test puts one misbehaving shard (or coordinator) from `faulty_shards` in
the path and checks three things: the fault is named, the cycle's plan is the
in-process plan (never a partial gang), and the other shards' answers were
still used. One test shows the opposite case too: a shard that lies in a way
no check can see changes the plan, which is what the equivalence tests look for.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest
from builders import cluster, config
from faulty_shards import (
    BlankShard,
    CrashingShard,
    DeafShard,
    ForgetfulCoordinator,
    HangingShard,
    SilentShard,
    StrayShard,
    ship_by_value,
)
from shard_clusters import facts, many_nodes

from kai_ray.cluster.sim.simulator import SimulatedCluster
from kai_ray.distributed.executor import CountsShardFaults
from kai_ray.distributed.ray_executor import Coordinator, NodeShard, RayExecutor
from kai_ray.distributed.shard_faults import ShardFault
from kai_ray.engine.cycle import schedule
from kai_ray.model.snapshot import compile_snapshot
from kai_ray.server.metrics import SchedulerMetrics

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("local_ray")]

Make = Callable[..., RayExecutor]


@pytest.fixture
def faulty() -> Iterator[Make]:
    ship_by_value()
    made: list[RayExecutor] = []

    def make(
        shard_class: type[NodeShard] = NodeShard,
        coordinator_class: type[Coordinator] = Coordinator,
        shard_timeout: float = 6.0,
    ) -> RayExecutor:
        made.append(
            RayExecutor(
                2, shard_class=shard_class, coordinator_class=coordinator_class, shard_timeout=shard_timeout
            )
        )
        return made[-1]

    yield make
    for executor in made:
        executor.close()


def in_process_facts() -> tuple[object, ...]:
    return facts(schedule(compile_snapshot(many_nodes()), config()))


def sharded_facts(executor: RayExecutor) -> tuple[object, ...]:
    return facts(schedule(compile_snapshot(many_nodes()), config(), executor))


def test_a_shard_that_answers_nothing_is_caught(faulty: Make) -> None:
    executor = faulty(SilentShard)
    assert sharded_facts(executor) == in_process_facts()
    assert executor.faults == {ShardFault.EMPTY: 2}
    assert executor.batches_answered == 0
    assert executor.timings[-1].local_seconds > 0
    assert isinstance(executor, CountsShardFaults)
    metrics = SchedulerMetrics()
    metrics.observe_shard_faults(executor.faults)
    assert metrics.registry.get_sample_value("kai_ray_node_shard_faults_total", {"fault": "empty"}) == 2.0


def test_a_shard_answering_from_rows_it_missed_updates_of_is_caught(faulty: Make) -> None:
    """The deaf shards take their seed and no update after it: the second cycle's digests show
    it, both are seeded afresh (the third cycle is sound again) and that batch ranks in-process."""
    executor = faulty(DeafShard)
    local = SimulatedCluster(many_nodes(), config())
    sharded = SimulatedCluster(many_nodes(), config(), executor)
    for cycle in range(3):
        assert facts(sharded.run_cycle().plan) == facts(local.run_cycle().plan)
        for simulated in (local, sharded):
            simulated.advance()
            simulated.state.jobs.extend(cluster().job(f"late-{cycle}", queue="b", gpus=1).build().jobs)
    assert executor.faults == {ShardFault.STALE: 2}
    assert executor.batches_answered == 2


def test_a_shard_naming_rows_outside_its_partition_is_caught(faulty: Make) -> None:
    executor = faulty(StrayShard)
    assert sharded_facts(executor) == in_process_facts()
    assert executor.faults == {ShardFault.FOREIGN_ROWS: 2}


def test_a_coordinator_that_drops_a_shard_is_caught(faulty: Make) -> None:
    executor = faulty(coordinator_class=ForgetfulCoordinator)
    assert sharded_facts(executor) == in_process_facts()
    assert executor.faults == {ShardFault.MISSING: 1}
    assert executor.batches_answered == 1
    assert executor.timings[-1].shard_seconds[0] > 0 == executor.timings[-1].shard_seconds[1]


def test_a_shard_killed_mid_cycle_leaves_the_cycle_complete_and_is_replaced(faulty: Make) -> None:
    executor = faulty(CrashingShard)
    expected = in_process_facts()
    assert sharded_facts(executor) == expected
    assert not executor.faults
    assert sharded_facts(executor) == expected
    assert executor.faults == {ShardFault.DIED: 2}
    assert sharded_facts(executor) == expected
    assert executor.faults == {ShardFault.DIED: 2}
    assert executor.batches_answered == 2


def test_a_stuck_shard_times_out_inside_the_lease_and_is_replaced(faulty: Make) -> None:
    executor = faulty(HangingShard, shard_timeout=1.0)
    expected = in_process_facts()
    assert sharded_facts(executor) == expected
    started = time.perf_counter()
    assert sharded_facts(executor) == expected
    assert time.perf_counter() - started < 15.0
    assert executor.faults == {ShardFault.TIMEOUT: 2}
    assert sharded_facts(executor) == expected
    assert executor.faults == {ShardFault.TIMEOUT: 2}


def test_a_shard_that_lies_undetectably_changes_the_plan(faulty: Make) -> None:
    """What the equivalence tests exist for: a blank answer with a correct digest passes every
    check, and the only sign is a plan that differs from in-process ranking."""
    executor = faulty(BlankShard)
    assert sharded_facts(executor) != in_process_facts()
    assert not executor.faults
