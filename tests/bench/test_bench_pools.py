"""The pools-PxNxJ shape and `bench --shard-by node-pool`, in-process."""

from __future__ import annotations

import pytest

from kai_ray.api.constants import NODE_POOL_LABEL
from kai_ray.bench.pools import POOLS_LOCAL, WHOLE, run_pool_shape
from kai_ray.bench.shapes import build_shape
from kai_ray.model.pools import off_pool_tasks, split_by_pool

pytestmark = pytest.mark.unit


def test_each_pool_is_a_kai_full_cycle_of_its_own_labelled_with_the_pool() -> None:
    state = build_shape("pools-3x2x8").state
    split = split_by_pool(state, NODE_POOL_LABEL)
    assert list(split) == ["pool-0", "pool-1", "pool-2"]
    reference = build_shape("kai-full-cycle-2x8").state
    for pool, part in split.items():
        assert [n.name for n in part.nodes] == [f"{pool}-{n.name}" for n in reference.nodes]
        assert [q.name for q in part.queues] == [f"{pool}-{q.name}" for q in reference.queues]
        assert [(j.name, j.queue) for j in part.jobs] == [
            (f"{pool}-{j.name}", f"{pool}-{j.queue}") for j in reference.jobs
        ]
        running = [t.node for j in part.jobs for t in j.tasks if t.node is not None]
        assert len(running) == 4 and all(node.startswith(f"{pool}-") for node in running)
    assert off_pool_tasks(state, NODE_POOL_LABEL) == []


def test_the_pool_bench_times_the_whole_cluster_and_the_pools_in_turn() -> None:
    result = run_pool_shape("pools-2x2x8", repeat=2)
    assert result.pools == 2
    assert [row.mode for row in result.rows] == [WHOLE, POOLS_LOCAL]
    assert all(len(row.runs) == 2 and row.median_cycle_seconds > 0 for row in result.rows)
    # Each pool: 4 running pods, 4 pending ones placed on its 16 GPUs.
    assert result.rows[1].pods_placed == 8
    assert result.plans_identical is None
