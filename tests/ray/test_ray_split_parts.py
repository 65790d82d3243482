"""Split cycles over Ray replica actors: the plan is the in-process parts' plan, whatever a part does.

The reference is `LocalParts`, every part computed in this process from the same snapshot. The
Ray runner must give byte-identical plans while its actors really answer (`parts_answered`), and
a part whose actor died, hung, answered from another snapshot version or missed a delta is
computed in-process, counted in `faults`, and its actor replaced or sent the whole snapshot
again, so the next cycle is answered by actors once more. A split cycle whose parts cannot place
every pending pod is the local engine's cycle.
"""

from __future__ import annotations

import collections
import os
import time
from collections.abc import Callable, Iterator

import pytest
import ray
from builders import cluster, config
from faulty_replicas import (
    GATE,
    CrashingReplica,
    DeafReplica,
    Gate,
    GatedReplica,
    HangingReplica,
    LaterPartsGatedReplica,
    MisaddressedReplica,
    SyncsOnceReplica,
    WrongTokenReplica,
    ship_by_value,
)

from kai_ray.api.config import SchedulerConfig
from kai_ray.api.constants import NODE_POOL_LABEL
from kai_ray.bench.shapes import Shape, build_shape, gpu_job
from kai_ray.distributed.shard_faults import ShardFault
from kai_ray.engine.cycle import open_session, run_actions, schedule
from kai_ray.engine.plan import Plan
from kai_ray.fairshare.usage import QueueUsage
from kai_ray.model.objects import QUEUE_CHARGING, ClusterState
from kai_ray.model.snapshot import Snapshot, SnapshotCompiler, compile_snapshot
from kai_ray.split.checks import SplitOutcome
from kai_ray.split.cycle import Groundwork, LocalParts, Meanwhile, SplitCycles
from kai_ray.split.part import PartAnswer
from kai_ray.split.ray_parts import RayParts
from kai_ray.split.replica import Replica

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("local_ray")]

SHAPE = "big-200x1600"
"""1600 pods of mixed gangs, singles and GPU fractions on 200 nodes: every pod fits."""
TIMEOUT = 2.0

Make = Callable[..., tuple[SplitCycles, RayParts]]


@pytest.fixture(scope="module")
def shape() -> Shape:
    return build_shape(SHAPE)


@pytest.fixture
def ray_split() -> Iterator[Make]:
    """Makes split cycles over Ray parts (with the given replica class) and closes them after."""
    ship_by_value()
    made: list[SplitCycles] = []

    def make(
        count: int = 2, replica_class: type[Replica] = Replica, pool_label: str | None = None
    ) -> tuple[SplitCycles, RayParts]:
        runner = RayParts(count, pool_label=pool_label, replica_class=replica_class, timeout=TIMEOUT)
        made.append(SplitCycles(count, runner, min_pods=0))
        return made[-1], runner

    yield make
    for split in made:
        split.close()


def facts(plan: Plan) -> tuple[object, ...]:
    return (plan.binds, plan.pipelined, plan.evictions, plan.pending_reasons, plan.tasks)


def local_parts_facts(
    snapshot: Snapshot, count: int, config: SchedulerConfig, pool_label: str | None = None
) -> tuple[object, ...]:
    """The plan of the same split cycle with every part computed in this process."""
    split = SplitCycles(count, LocalParts(pool_label), min_pods=0)
    try:
        plan = split.schedule(snapshot, config)
        assert split.outcomes == {SplitOutcome.SPLIT: 1}
        return facts(plan)
    finally:
        split.close()


def pods(snapshot: Snapshot) -> int:
    return sum(len(job.tasks) for job in snapshot.jobs)


def placed(plan: Plan) -> int:
    return len(plan.binds) + len(plan.pipelined)


def fallbacks(split: SplitCycles) -> int:
    """Split cycles whose plan is the local engine's (a pod left pending, or answers not trusted)."""
    return split.outcomes[SplitOutcome.PENDING_LEFT] + split.outcomes[SplitOutcome.UNTRUSTED]


def gpus_within_nodes(plan: Plan, snapshot: Snapshot) -> bool:
    """No node is granted more GPUs than it has, counting the pods already on it."""
    used: dict[str, float] = collections.defaultdict(float)
    for state in plan.tasks.values():
        if state.node is not None and state.status in QUEUE_CHARGING:
            used[state.node] += state.accepted_gpus
    return all(used[spec.name] <= spec.gpus + 1e-9 for spec in snapshot.nodes.specs)


@pytest.mark.parametrize("count", [2, 3])
def test_ray_parts_plan_is_the_in_process_parts_plan(ray_split: Make, shape: Shape, count: int) -> None:
    snapshot = compile_snapshot(shape.state)
    expected = local_parts_facts(snapshot, count, shape.config)
    split, runner = ray_split(count)
    for cycle, given in enumerate((snapshot, snapshot, compile_snapshot(shape.state))):
        plan = split.schedule(given, shape.config)
        assert facts(plan) == expected
        assert runner.parts_answered == count * (cycle + 1)
    assert not runner.faults
    assert split.outcomes == {SplitOutcome.SPLIT: 3}
    assert fallbacks(split) == 0
    assert placed(plan) == pods(snapshot)
    assert gpus_within_nodes(plan, snapshot)


def test_the_coordinator_does_its_groundwork_while_the_parts_work(
    ray_split: Make, shape: Shape, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The parts answer only after a gate the coordinator opens from its groundwork: had the
    runner waited for their answers first, every part would have timed out and been computed in
    process (a fault)."""
    gate = Gate.options(name=GATE).remote()  # type: ignore[attr-defined]
    try:
        split, runner = ray_split(2, GatedReplica)
        groundwork = split._groundwork

        def opening_the_gate(snapshot: Snapshot) -> Groundwork:
            ray.get(gate.open.remote(), timeout=TIMEOUT)
            return groundwork(snapshot)

        monkeypatch.setattr(split, "_groundwork", opening_the_gate)
        snapshot = compile_snapshot(shape.state)
        expected = local_parts_facts(snapshot, 2, shape.config)
        for _ in range(2):
            assert facts(split.schedule(snapshot, shape.config)) == expected
        assert not runner.faults
        assert runner.parts_answered == 4
    finally:
        ray.kill(gate)


def test_parts_run_no_lower_in_priority_than_the_coordinator() -> None:
    """Ray starts its workers at niceness 15 unless told otherwise (`LOCAL_RAY_SYSTEM_CONFIG`): a
    part would then wait for every process at the default priority, the coordinator's groundwork
    among them, while a local cycle would not."""

    def niceness() -> int:
        return os.nice(0)

    worker = ray.get(ray.remote(num_cpus=0)(niceness).remote(), timeout=TIMEOUT)
    assert worker <= os.nice(0)


class OpeningTheGateOnTheFirstAnswer(RayParts):
    """Opens the `GATE` actor once the coordinator asks for the answer after the first, that is,
    once it has taken the first in."""

    def answers(
        self, token: int, count: int, config: SchedulerConfig, usage: QueueUsage | None, meanwhile: Meanwhile
    ) -> Iterator[PartAnswer]:
        for taken, answer in enumerate(super().answers(token, count, config, usage, meanwhile)):
            yield answer
            if taken == 0:
                ray.get(ray.get_actor(GATE).open.remote(), timeout=TIMEOUT)


def test_the_coordinator_takes_each_answer_in_while_the_later_parts_work(shape: Shape) -> None:
    """Part 1 answers only once the coordinator has taken part 0's answer in: a runner that held
    the answers back until every part had answered would time part 1 out (a fault)."""
    ship_by_value()
    gate = Gate.options(name=GATE).remote()  # type: ignore[attr-defined]
    runner = OpeningTheGateOnTheFirstAnswer(2, replica_class=LaterPartsGatedReplica, timeout=TIMEOUT)
    split = SplitCycles(2, runner, min_pods=0)
    try:
        snapshot = compile_snapshot(shape.state)
        assert facts(split.schedule(snapshot, shape.config)) == local_parts_facts(snapshot, 2, shape.config)
        assert not runner.faults
        assert runner.parts_answered == 2
        assert [answer_seconds > 0 for answer_seconds in split.timings[-1].taking] == [True, True]
    finally:
        split.close()
        ray.kill(gate)


def test_ray_parts_deal_nodes_by_pool_as_the_driver_does(ray_split: Make) -> None:
    """Three pools over two parts: by pool, the parts hold 40 and 20 nodes, not 30 each; a
    replica dealing otherwise than the driver would name nodes outside its part."""
    shape = build_shape("pools-3x20x30")
    snapshot = compile_snapshot(shape.state)
    expected = local_parts_facts(snapshot, 2, shape.config, NODE_POOL_LABEL)
    assert expected != facts(schedule(snapshot, shape.config))
    split, runner = ray_split(2, pool_label=NODE_POOL_LABEL)
    assert facts(split.schedule(snapshot, shape.config)) == expected
    assert split.outcomes == {SplitOutcome.SPLIT: 1}
    assert runner.parts_answered == 2
    assert not runner.faults


def test_a_second_cycle_on_the_same_snapshot_sends_the_replicas_nothing(
    ray_split: Make, shape: Shape
) -> None:
    """Each replica's process ends on the second snapshot it is sent: none is sent again."""
    snapshot = compile_snapshot(shape.state)
    expected = local_parts_facts(snapshot, 2, shape.config)
    split, runner = ray_split(2, SyncsOnceReplica)
    split.prepare(snapshot)
    for _ in range(2):
        assert facts(split.schedule(snapshot, shape.config)) == expected
    assert not runner.faults
    assert runner.parts_answered == 4


def test_a_replica_dying_while_taking_in_a_snapshot_is_computed_in_process_and_replaced(
    ray_split: Make, shape: Shape
) -> None:
    first, second = compile_snapshot(shape.state), compile_snapshot(shape.state)
    split, runner = ray_split(2, SyncsOnceReplica)
    assert facts(split.schedule(first, shape.config)) == local_parts_facts(first, 2, shape.config)
    assert runner.parts_answered == 2
    expected = local_parts_facts(second, 2, shape.config)
    assert facts(split.schedule(second, shape.config)) == expected
    assert runner.faults == {ShardFault.DIED: 2}
    assert runner.parts_answered == 2
    assert facts(split.schedule(second, shape.config)) == expected
    assert runner.faults == {ShardFault.DIED: 2}
    assert runner.parts_answered == 4
    assert split.outcomes == {SplitOutcome.SPLIT: 3}


def test_a_part_killed_mid_cycle_is_computed_in_process_and_replaced(ray_split: Make, shape: Shape) -> None:
    snapshot = compile_snapshot(shape.state)
    expected = local_parts_facts(snapshot, 3, shape.config)
    split, runner = ray_split(3, CrashingReplica)
    assert facts(split.schedule(snapshot, shape.config)) == expected
    assert not runner.faults
    assert facts(split.schedule(snapshot, shape.config)) == expected
    assert runner.faults == {ShardFault.DIED: 1}
    assert runner.parts_answered == 3 + 2
    assert facts(split.schedule(snapshot, shape.config)) == expected
    assert runner.faults == {ShardFault.DIED: 1}
    assert runner.parts_answered == 3 + 2 + 3
    assert fallbacks(split) == 0


def test_a_stuck_part_times_out_and_is_replaced(ray_split: Make, shape: Shape) -> None:
    snapshot = compile_snapshot(shape.state)
    expected = local_parts_facts(snapshot, 2, shape.config)
    split, runner = ray_split(2, HangingReplica)
    assert facts(split.schedule(snapshot, shape.config)) == expected
    started = time.perf_counter()
    assert facts(split.schedule(snapshot, shape.config)) == expected
    assert time.perf_counter() - started < TIMEOUT + 8.0
    assert runner.faults == {ShardFault.TIMEOUT: 1}
    assert runner.parts_answered == 2 + 1
    assert facts(split.schedule(snapshot, shape.config)) == expected
    assert runner.faults == {ShardFault.TIMEOUT: 1}
    assert runner.parts_answered == 2 + 1 + 2


def test_a_part_naming_another_snapshot_version_is_computed_in_process(ray_split: Make, shape: Shape) -> None:
    snapshot = compile_snapshot(shape.state)
    split, runner = ray_split(2, WrongTokenReplica)
    assert facts(split.schedule(snapshot, shape.config)) == local_parts_facts(snapshot, 2, shape.config)
    assert runner.faults == {ShardFault.STALE: 1}
    assert runner.parts_answered == 1
    assert fallbacks(split) == 0


def test_a_replica_that_missed_a_delta_is_caught_and_sent_the_whole_snapshot(
    ray_split: Make, shape: Shape
) -> None:
    """The deaf replicas take the first snapshot whole and ignore the delta of the next (one new
    job, the rest by position): both parts are computed in-process from the new snapshot, and
    the snapshot resent whole the cycle after is taken in and answered from."""
    state = build_shape(SHAPE).state
    compiler = SnapshotCompiler()
    first = compiler.compile(state)
    state.jobs.append(gpu_job("late-job", "queue-0", 0, pods=2))
    second = compiler.compile(state)
    split, runner = ray_split(2, DeafReplica)
    assert facts(split.schedule(first, shape.config)) == local_parts_facts(first, 2, shape.config)
    assert runner.parts_answered == 2
    expected = local_parts_facts(second, 2, shape.config)
    plan = split.schedule(second, shape.config)
    assert facts(plan) == expected
    assert runner.faults == {ShardFault.STALE: 2}
    assert runner.parts_answered == 2
    assert {bind.job for bind in plan.binds} >= {"late-job"}
    assert facts(split.schedule(second, shape.config)) == expected
    assert runner.faults == {ShardFault.STALE: 2}
    assert runner.parts_answered == 4


def test_a_part_answering_another_parts_cycle_never_yields_a_partial_plan(
    ray_split: Make, shape: Shape
) -> None:
    """Versions all match, so no fault is counted; the answers leave some jobs unplaced and place
    others twice. The plan must then be the local engine's, never the parts' answers."""
    snapshot = compile_snapshot(shape.state)
    split, runner = ray_split(2, MisaddressedReplica)
    plan = split.schedule(snapshot, shape.config)
    assert not runner.faults
    assert runner.parts_answered == 2
    assert facts(plan) == facts(schedule(snapshot, shape.config))
    assert split.outcomes == {SplitOutcome.UNTRUSTED: 1}


def test_a_gang_no_part_holds_is_reclaimed_by_the_ray_parts_as_in_process(ray_split: Make) -> None:
    """KAI's large-job reclaim, small: the gang is divided between the parts, each reclaims room
    for its share in its actor, and the plan is the in-process parts' (victims chosen per part)."""
    shape = build_shape("kai-reclaim-large-10")
    snapshot = compile_snapshot(shape.state)
    split, runner = ray_split(2)
    plan = split.schedule(snapshot, shape.config)
    assert split.outcomes == {SplitOutcome.SPLIT: 1}
    assert runner.parts_answered == 2
    reference = SplitCycles(2, LocalParts(), min_pods=0)
    assert facts(plan) == facts(reference.schedule(snapshot, shape.config))
    assert len(plan.pipelined) == 5 and len(plan.evictions) == 40


def four_nodes_of_four_gpus() -> ClusterState:
    """Two jobs of 1-GPU pods, and a gang of three 4-GPU pods: 14 of 16 GPUs, but no part of
    two nodes has the gang's 12 free, so it is kept for the whole-cluster pass."""
    builder = cluster()
    for index in range(4):
        builder.node(f"n{index}", gpus=4)
    return (
        builder.queue("a", gpu_quota=16)
        .job("spread", queue="a", gpus=4, pods=3)
        .job("singles", queue="a", gpus=1, pods=2, min_member=1)
        .build()
    )


def a_pod_no_node_holds() -> ClusterState:
    """An 8-GPU pod on 4-GPU nodes: its GPUs fit the cluster's and a part's free GPUs, so the
    cycle is split, but its part leaves it pending (as would the whole cluster)."""
    builder = cluster()
    for index in range(4):
        builder.node(f"n{index}", gpus=4)
    return (
        builder.queue("a", gpu_quota=16)
        .job("wide", queue="a", gpus=8)
        .job("singles", queue="a", gpus=1, pods=2, min_member=1)
        .build()
    )


@pytest.mark.parametrize(
    ("state", "every_pod_placed"), [(four_nodes_of_four_gpus(), True), (a_pod_no_node_holds(), False)]
)
def test_a_split_cycle_whose_parts_leave_a_pod_pending_is_the_local_engines(
    ray_split: Make, state: ClusterState, every_pod_placed: bool
) -> None:
    snapshot = compile_snapshot(state)
    split, runner = ray_split(2)
    plan = split.schedule(snapshot, config())
    assert facts(plan) == facts(schedule(snapshot, config()))
    assert (placed(plan) == pods(snapshot)) is every_pod_placed
    assert runner.parts_answered == 2
    assert not runner.faults
    assert split.outcomes == {SplitOutcome.PENDING_LEFT: 1}


def test_a_cycle_given_queue_usage_is_the_local_engines_with_that_usage(ray_split: Make) -> None:
    """Two 8-GPU jobs for one 8-GPU node: a part leaves one pending, so the cycle is the local
    engine's. Queue a used the GPUs lately, so time-based fair share lets queue b's job in."""
    state = (
        cluster()
        .node("n0", gpus=8)
        .queue("a")
        .queue("b", created=1.0)
        .job("ja", queue="a", gpus=8)
        .job("jb", queue="b", gpus=8)
        .build()
    )
    snapshot = compile_snapshot(state)
    usage = {"a": {"gpu": 0.9}, "b": {"gpu": 0.0}}
    expected = run_actions(open_session(snapshot, config(), usage=usage))
    assert [bind.job for bind in expected.binds] == ["jb"]
    split, _ = ray_split(2)
    plan = split.schedule(snapshot, config(), usage)
    assert split.outcomes == {SplitOutcome.PENDING_LEFT: 1}
    assert facts(plan) == facts(expected)
