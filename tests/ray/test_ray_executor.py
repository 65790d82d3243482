"""Sharded ranking over Ray gives the plans of in-process ranking, for any shard count."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from builders import cluster, config
from hypothesis import HealthCheck, given, settings
from random_clusters import (
    JobDraw,
    QueueDraw,
    full_cycle,
    plan_facts,
    running_cluster,
    scenarios,
    with_arrivals,
)
from shard_clusters import facts, many_nodes
from typer.testing import CliRunner

from kai_ray.api.constants import NODE_POOL_LABEL
from kai_ray.bench.shapes import build_shape
from kai_ray.cli import app
from kai_ray.cluster.sim.scenario import load_scenario
from kai_ray.cluster.sim.simulator import SimulatedCluster
from kai_ray.distributed.ray_executor import RayExecutor
from kai_ray.distributed.shard_faults import ShardFault
from kai_ray.engine.cycle import schedule
from kai_ray.model.objects import ClusterState
from kai_ray.model.snapshot import compile_snapshot
from kai_ray.report.scenario_json import render_json

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("local_ray")]

SCENARIOS = Path(__file__).resolve().parents[2].parent / "shared" / "conformance" / "scenarios"
ALL_ACTIONS = ("allocate", "consolidation", "reclaim", "preempt", "stalegangeviction")


@pytest.fixture
def sharded() -> Iterator[Callable[[int], RayExecutor]]:
    """Makes Ray executors for one test and ends their actors afterwards."""
    made: list[RayExecutor] = []

    def make(shards: int) -> RayExecutor:
        made.append(RayExecutor(shards))
        return made[-1]

    yield make
    for executor in made:
        executor.close()


def test_the_public_corpus_prints_the_same_json_with_three_shards(
    sharded: Callable[[int], RayExecutor],
) -> None:
    executor = sharded(3)
    differing = []
    for path in sorted(SCENARIOS.rglob("*.yaml")):
        sharded, local = load_scenario(path), load_scenario(path)
        with_shards = render_json(
            SimulatedCluster(sharded.state, sharded.config, executor).run(sharded.cycles)
        )
        in_process = render_json(SimulatedCluster(local.state, local.config).run(local.cycles))
        if with_shards != in_process:
            differing.append(path.name)
    assert differing == []
    assert executor.fallbacks == 0
    assert not executor.faults
    assert executor.batches_answered > 0


@pytest.mark.parametrize("shards", [1, 2, 3, 4])
def test_plans_match_in_process_ranking_for_any_shard_count(
    shards: int, sharded: Callable[[int], RayExecutor]
) -> None:
    state = many_nodes()
    local = schedule(compile_snapshot(copy.deepcopy(state)), config(actions=ALL_ACTIONS))
    executor = sharded(shards)
    sharded = schedule(compile_snapshot(copy.deepcopy(state)), config(actions=ALL_ACTIONS), executor)
    assert facts(sharded) == facts(local)
    assert local.binds
    assert executor.batches_answered == 1
    assert not executor.faults


@pytest.mark.parametrize("shape", ["affinity-12x64", "spread-12x64"])
def test_pod_rules_give_the_in_process_plan_with_shards(
    shape: str, sharded: Callable[[int], RayExecutor]
) -> None:
    built = build_shape(shape)
    local = schedule(compile_snapshot(copy.deepcopy(built.state)), built.config)
    executor = sharded(2)
    with_shards = schedule(compile_snapshot(copy.deepcopy(built.state)), built.config, executor)
    assert facts(with_shards) == facts(local)
    assert len(local.binds) == 64
    assert not executor.faults


def test_shards_receive_only_changed_rows_after_the_first_batch(
    sharded: Callable[[int], RayExecutor],
) -> None:
    executor = sharded(2)
    simulated = SimulatedCluster(many_nodes(), config(), executor)
    first = simulated.run_cycle()
    assert executor.rows_sent == [6, 6]
    touched = {bind.node for bind in first.plan.binds}
    simulated.advance()
    simulated.state.jobs.extend(cluster().job("late", queue="b", gpus=1).build().jobs)
    simulated.run_cycle()
    assert 0 < sum(executor.rows_sent) == len(touched) < 12


def test_a_dead_shard_is_ranked_in_process_for_one_batch_then_replaced(
    sharded: Callable[[int], RayExecutor],
) -> None:
    executor = sharded(2)
    expected = schedule(compile_snapshot(many_nodes()), config())
    assert facts(schedule(compile_snapshot(many_nodes()), config(), executor)) == facts(expected)
    executor.kill_shard(1)
    assert facts(schedule(compile_snapshot(many_nodes()), config(), executor)) == facts(expected)
    assert executor.faults == {ShardFault.DIED: 1}
    assert executor.fallbacks == 0
    assert facts(schedule(compile_snapshot(many_nodes()), config(), executor)) == facts(expected)
    assert executor.faults == {ShardFault.DIED: 1}
    assert executor.rows_sent == [0, 6]
    assert executor.batches_answered == 3


@pytest.fixture(scope="module")
def executors() -> Iterator[dict[int, RayExecutor]]:
    """One executor per shard count, reused across examples so shards keep state between them."""
    made = {shards: RayExecutor(shards) for shards in (1, 2, 3, 4)}
    yield made
    for executor in made.values():
        executor.close()


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(scenarios)
def test_random_clusters_plan_alike_for_one_to_four_shards(
    executors: dict[int, RayExecutor], drawn: tuple[list[int], list[QueueDraw], list[JobDraw], list[JobDraw]]
) -> None:
    nodes, queues, first, later = drawn
    state = with_arrivals(running_cluster(nodes, queues, first), later)
    expected = plan_facts(full_cycle(state).plan)
    for executor in executors.values():
        assert plan_facts(full_cycle(state, executor).plan) == expected
        assert not executor.faults


def test_zero_shards_is_rejected() -> None:
    with pytest.raises(ValueError, match="shards must be at least 1"):
        RayExecutor(0)


def test_cli_simulate_with_ray_shards_prints_what_local_prints() -> None:
    scenario = str(SCENARIOS / "gang" / "job-reclaims-from-job-on-two-nodes.yaml")
    runner = CliRunner()
    sharded = runner.invoke(
        app, ["simulate", scenario, "--output", "json", "--executor", "ray", "--shards", "3"]
    )
    local = runner.invoke(app, ["simulate", scenario, "--output", "json"])
    assert sharded.exit_code == 0
    assert sharded.stdout == local.stdout


def test_cli_bench_reports_the_ray_executor_and_shards() -> None:
    result = CliRunner().invoke(
        app, ["bench", "--shape", "fill-4x20", "--repeat", "2", "--executor", "ray", "--shards", "2"]
    )
    assert result.exit_code == 0
    row = next(line for line in result.stdout.splitlines() if line.startswith("│") and " ray " in line)
    assert "20" in row
    assert "sharded batches" in result.stdout


def racks_interleaved() -> ClusterState:
    """Six nodes whose racks alternate by name, so a contiguous split would cut both racks."""
    builder = cluster().topology("racks", "zone", "rack")
    for index in range(6):
        labels = {"zone": "z1", "rack": f"r{index % 2}"}
        builder.node(f"n{index:02d}", gpus=8, labels=labels)
    return (
        builder.queue("a", gpu_quota=48)
        .job("gang", queue="a", gpus=4, pods=4)
        .job("singles", queue="a", gpus=1, pods=5, min_member=1)
        .build()
    )


def test_shards_hold_whole_racks_and_plan_as_in_process(sharded: Callable[[int], RayExecutor]) -> None:
    executor = sharded(2)
    local = schedule(compile_snapshot(racks_interleaved()), config())
    assert facts(schedule(compile_snapshot(racks_interleaved()), config(), executor)) == facts(local)
    assert [part.tolist() for part in executor.partitions] == [[0, 2, 4], [1, 3, 5]]
    assert executor.batches_answered == 1


def test_shards_keep_node_pools_apart() -> None:
    builder = cluster()
    for index in range(6):
        builder.node(f"n{index:02d}", gpus=8, labels={NODE_POOL_LABEL: "a" if index in (0, 4, 5) else "b"})
    state = builder.queue("q", gpu_quota=48).job("singles", queue="q", gpus=1, pods=3, min_member=1).build()
    executor = RayExecutor(2, pool_label=NODE_POOL_LABEL)
    try:
        local = schedule(compile_snapshot(copy.deepcopy(state)), config())
        assert facts(schedule(compile_snapshot(state), config(), executor)) == facts(local)
        assert [part.tolist() for part in executor.partitions] == [[0, 4, 5], [1, 2, 3]]
    finally:
        executor.close()
