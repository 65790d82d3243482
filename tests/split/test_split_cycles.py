"""Split cycles in-process: when they split, what they decide, and what they refuse to trust.

The design's promise (kai_ray/split/cycle.py): a split cycle's plan is exactly the local
engine's, or it places every pending pod while keeping the spec's invariants. The property
test checks that promise on random clusters; the others pin each way into the local path.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest
from builders import NO_LIMIT, cluster, config
from hypothesis import HealthCheck, given, settings
from random_clusters import ALL_ACTIONS, RACK, JobDraw, QueueDraw, running_cluster, scenarios, with_arrivals

from kai_ray.api.config import SchedulerConfig
from kai_ray.bench.runner import run_split_compare
from kai_ray.bench.shapes import build_shape
from kai_ray.engine.cycle import schedule
from kai_ray.engine.plan import Plan
from kai_ray.fairshare.usage import QueueUsage
from kai_ray.model.objects import ACTIVE_ALLOCATED, QUEUE_CHARGING, TaskStatus
from kai_ray.model.snapshot import Snapshot, compile_snapshot
from kai_ray.split.checks import SplitOutcome
from kai_ray.split.cycle import LocalParts, SplitCycles
from kai_ray.split.deal import cluster_load, deal
from kai_ray.split.part import PartAnswer
from kai_ray.split.replica import split_layout

pytestmark = pytest.mark.unit

ALL = config(actions=ALL_ACTIONS)


def facts(plan: Plan) -> tuple[object, ...]:
    return (plan.binds, plan.pipelined, plan.evictions, plan.pending_reasons, plan.tasks)


def split_plan(snapshot: Snapshot, parts: int, runner: LocalParts | None = None) -> tuple[Plan, SplitCycles]:
    cycles = SplitCycles(parts, runner or LocalParts(), min_pending_pods=0)
    return cycles.schedule(snapshot, ALL), cycles


def assert_valid(snapshot: Snapshot, plan: Plan) -> None:
    """The spec's invariants that a plan made of placements alone can break (§22: 5, 7, 14, 15,
    28, 30, 31), read off the plan's final pod states."""
    table = snapshot.nodes
    jobs = {job.key: job for job in snapshot.jobs}
    before = {(job.key, task.name): task for job in snapshot.jobs for task in job.tasks}
    placed = [(bind.job, bind.task) for bind in (*plan.binds, *plan.pipelined)]
    assert len(placed) == len(set(placed)), "a pod placed twice"
    for key in placed:
        assert before[key].status == TaskStatus.PENDING, f"{key} was not pending"
    whole: dict[str, float] = defaultdict(float)
    shared: dict[str, set[str]] = defaultdict(set)
    for (job_key, name), state in plan.tasks.items():
        if state.node is None or state.status not in ACTIVE_ALLOCATED:
            continue
        spec = before[(job_key, name)]
        if spec.is_shared_gpu:
            shared[state.node].update(state.gpu_groups)
        else:
            whole[state.node] += spec.gpu
    for bind in plan.binds:
        row = table.index[bind.node]
        assert table.schedulable[row], f"{bind.task} bound on unschedulable {bind.node}"
        gpus = table.allocatable[row, 2]
        assert whole[bind.node] + len(shared[bind.node]) <= gpus, f"{bind.node} holds more than its GPUs"
    for job in snapshot.jobs:
        states = [plan.tasks[(job.key, t.name)] for t in job.tasks]
        if any((job.key, t.name) in set(placed) for t in job.tasks):
            for pod_set in job.subgroups.all_pod_sets():
                active = sum(
                    1
                    for t, s in zip(job.tasks, states, strict=True)
                    if t.subgroup == pod_set.name and s.status in ACTIVE_ALLOCATED
                )
                assert active >= pod_set.min_available, f"{job.key} placed below its gang minimum"
        root = job.subgroups.topology
        if root is not None and root.required_level == RACK:
            racks = {
                table.specs[table.index[s.node]].labels[RACK]
                for s in states
                if s.node is not None and s.status in ACTIVE_ALLOCATED
            }
            assert len(racks) <= 1, f"{job.key} spans racks {sorted(racks)}"
    charged: dict[str, float] = defaultdict(float)
    for (job_key, _), state in plan.tasks.items():
        if state.status in QUEUE_CHARGING or state.status in (TaskStatus.ALLOCATED, TaskStatus.PIPELINED):
            for queue in snapshot.ancestry(jobs[job_key].queue):
                charged[queue] += state.accepted_gpus
    for name, queue in snapshot.queues.items():
        if queue.gpu.limit != NO_LIMIT:
            assert charged[name] <= queue.gpu.limit + 1e-9, f"queue {name} above its GPU limit"


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios)
def test_a_split_plan_is_the_local_plan_or_places_every_pending_pod_validly(
    drawn: tuple[list[int], list[QueueDraw], list[JobDraw], list[JobDraw]],
) -> None:
    nodes, queues, first, later = drawn
    snapshot = compile_snapshot(with_arrivals(running_cluster(nodes, queues, first), later))
    local = schedule(snapshot, ALL)
    for parts in (2, 3):
        plan, cycles = split_plan(snapshot, parts)
        if cycles.outcomes[SplitOutcome.SPLIT]:
            pending = sum(t.status == TaskStatus.PENDING for job in snapshot.jobs for t in job.tasks)
            assert len(plan.binds) + len(plan.pipelined) == pending
            assert not plan.evictions
            assert_valid(snapshot, plan)
        else:
            assert facts(plan) == facts(local)
        again, _ = split_plan(snapshot, parts)
        assert facts(again) == facts(plan), "the same snapshot gave a different split plan"


def roomy_cluster() -> Snapshot:
    """Four 8-GPU nodes in two racks, half of one rack busy, and pending jobs that all fit."""
    builder = cluster(now=100.0).topology("racks", RACK)
    for index in range(4):
        builder.node(f"n{index}", gpus=8, labels={RACK: f"r{index // 2}"})
    builder.queue("team", gpu_quota=NO_LIMIT)
    builder.job("busy", queue="team", pods=2, gpus=4, status=TaskStatus.RUNNING, node="n0")
    for index in range(6):
        builder.job(f"p{index}", queue="team", pods=2, gpus=1, created=float(index))
    builder.job("frac", queue="team", pods=2, gpus=0.5, created=9.0)
    return compile_snapshot(builder.build())


def test_a_roomy_cluster_is_split_and_every_pod_placed() -> None:
    snapshot = roomy_cluster()
    plan, cycles = split_plan(snapshot, 2)
    assert cycles.outcomes == {SplitOutcome.SPLIT: 1}
    assert len(plan.binds) == 14
    assert_valid(snapshot, plan)
    layout = split_layout(snapshot, 2, None)
    assert [len(part.jobs) for part in layout.deal.parts] != [0, 0]
    assert all(len(part.jobs) for part in layout.deal.parts), "both parts were dealt jobs"


def test_one_part_or_too_few_pending_pods_is_the_local_cycle() -> None:
    snapshot = roomy_cluster()
    local = schedule(snapshot, ALL)
    one = SplitCycles(1, LocalParts(), min_pending_pods=0)
    few = SplitCycles(2, LocalParts(), min_pending_pods=1000)
    for cycles in (one, few):
        assert facts(cycles.schedule(snapshot, ALL)) == facts(local)
        assert cycles.outcomes == {SplitOutcome.NOT_SPLIT: 1}


def test_demand_over_free_capacity_is_not_split() -> None:
    """Who gets in is then a matter of queue order, which one part cannot decide for another."""
    builder = cluster().node("n0", gpus=2).node("n1", gpus=2).queue("a", gpu_quota=NO_LIMIT)
    builder.queue("b", gpu_quota=NO_LIMIT, created=1.0)
    builder.job("ja", queue="a", pods=3, gpus=1).job("jb", queue="b", pods=3, gpus=1, created=1.0)
    snapshot = compile_snapshot(builder.build())
    plan, cycles = split_plan(snapshot, 2)
    assert cycles.outcomes == {SplitOutcome.NOT_SPLIT: 1}
    assert facts(plan) == facts(schedule(snapshot, ALL))


def test_a_stale_gang_is_not_split() -> None:
    """Stale gang eviction needs the whole session: a gang below its minimum keeps a cycle local."""
    builder = cluster().node("n0", gpus=8).node("n1", gpus=8).queue("q", gpu_quota=NO_LIMIT)
    builder.job("gang", queue="q", pods=1, gpus=1, min_member=2, status=TaskStatus.RUNNING, node="n0")
    builder.job("new", queue="q", pods=2, gpus=1)
    snapshot = compile_snapshot(builder.build())
    _, cycles = split_plan(snapshot, 2)
    assert cycles.outcomes == {SplitOutcome.NOT_SPLIT: 1}


def test_a_limit_two_parts_break_together_refuses_a_job_and_the_cycle_is_local() -> None:
    """Each part stays within the queue's limit of 3 GPUs; together they would place 4."""
    builder = cluster().node("n0", gpus=4).node("n1", gpus=4).queue("q", gpu_quota=NO_LIMIT, gpu_limit=3)
    builder.job("a", queue="q", pods=2, gpus=1, priority=60).job("b", queue="q", pods=2, gpus=1, created=1.0)
    snapshot = compile_snapshot(builder.build())
    layout = split_layout(snapshot, 2, None)
    assert [[job.name for job in part.jobs] for part in layout.deal.parts] == [["a"], ["b"]]
    plan, cycles = split_plan(snapshot, 2)
    assert cycles.outcomes == {SplitOutcome.PENDING_LEFT: 1}
    assert facts(plan) == facts(schedule(snapshot, ALL))
    assert len(plan.binds) == 2


class SilentParts(LocalParts):
    """Answers every part with nothing placed: a part that lost its work."""

    def answers(
        self, token: int, count: int, config: SchedulerConfig, usage: QueueUsage | None
    ) -> list[PartAnswer]:
        return [PartAnswer(part, token, [], []) for part in range(count)]


class StrayParts(LocalParts):
    """Swaps the parts' answers: each names the other part's pods and nodes."""

    def answers(
        self, token: int, count: int, config: SchedulerConfig, usage: QueueUsage | None
    ) -> list[PartAnswer]:
        found = super().answers(token, count, config, usage)
        return [PartAnswer(index, token, a.binds, a.pipelined) for index, a in enumerate(reversed(found))]


def test_parts_that_answer_nothing_or_about_others_leave_the_plan_local() -> None:
    snapshot = roomy_cluster()
    local = schedule(snapshot, ALL)
    silent, cycles = split_plan(snapshot, 2, SilentParts())
    assert cycles.outcomes == {SplitOutcome.PENDING_LEFT: 1}
    assert facts(silent) == facts(local)
    stray, cycles = split_plan(snapshot, 2, StrayParts())
    assert cycles.outcomes == {SplitOutcome.UNTRUSTED: 1}
    assert facts(stray) == facts(local)


def test_a_running_job_across_parts_is_dealt_whole_and_held_where_it_is_not_home() -> None:
    builder = cluster().node("n0", gpus=8).node("n1", gpus=8).node("n2", gpus=8).node("n3", gpus=8)
    builder.queue("q", gpu_quota=NO_LIMIT)
    builder.job("spread", queue="q", pods=0, gpus=2)
    for node in ("n0", "n1", "n3"):
        builder.task(status=TaskStatus.RUNNING, node=node)
    snapshot = compile_snapshot(builder.build())
    dealt = deal(snapshot, [np.array([0, 1]), np.array([2, 3])], cluster_load(snapshot))
    home, other = dealt.parts
    assert [job.name for job in home.jobs] == ["spread"] and not other.jobs
    assert home.foreign_rows.tolist() == [3], "its pod on n3 comes along as a row home may not use"
    assert [pod.task.node for pod in other.held] == ["n3"], "n3's part holds that pod's GPUs"


def test_bench_compare_times_split_cycles_against_local() -> None:
    local, split = run_split_compare("big-100x800", 1, SplitCycles(2, LocalParts(), min_pending_pods=0))
    assert local.executor == "local" and split.executor == "split-local"
    assert split.ratio_to_local is not None and split.ratio_to_local > 0
    assert split.split_cycles is not None and split.split_cycles["cycles_split"] == 1.0
    assert split.pods_placed == local.pods_placed == 800


def test_bench_shape_big_is_split_and_placed_whole_in_process() -> None:
    snapshot = compile_snapshot(build_shape("big-100x800").state)
    plan, cycles = split_plan(snapshot, 2)
    assert cycles.outcomes == {SplitOutcome.SPLIT: 1}
    assert len(plan.binds) == 800
    assert_valid(snapshot, plan)
