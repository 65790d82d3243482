"""Split cycles in-process: when they split, what they decide, and what they refuse to trust.

The design's promise (kai_ray/split/cycle.py): a split cycle's plan is exactly the local
engine's, or it places every pending pod while keeping the spec's invariants. The property
test checks that promise on random clusters; the others pin each way into the local path.
"""

from __future__ import annotations

import dataclasses
from array import array

import numpy as np
import pytest
from builders import NO_LIMIT, cluster, config, pod_set, subgroup_set
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from random_clusters import ALL_ACTIONS, RACK, JobDraw, QueueDraw, running_cluster, scenarios, with_arrivals
from split_plans import assert_no_worse, assert_valid

from kai_ray.api.config import SchedulerConfig
from kai_ray.bench.runner import run_split_compare
from kai_ray.bench.shapes import build_shape
from kai_ray.engine.cycle import schedule
from kai_ray.engine.plan import Plan
from kai_ray.fairshare.usage import QueueUsage
from kai_ray.model.objects import TaskStatus
from kai_ray.model.snapshot import Snapshot, compile_snapshot
from kai_ray.split.basis import survey
from kai_ray.split.checks import SplitOutcome
from kai_ray.split.cycle import LocalParts, Meanwhile, SplitCycles
from kai_ray.split.deal import deal
from kai_ray.split.part import PartAnswer, PlacedPods, placed_pods
from kai_ray.split.replica import SplitLayout, split_layout

pytestmark = pytest.mark.unit

ALL = config(actions=ALL_ACTIONS)


def facts(plan: Plan) -> tuple[object, ...]:
    return (plan.binds, plan.pipelined, plan.evictions, plan.pending_reasons, plan.tasks)


def split_plan(snapshot: Snapshot, parts: int, runner: LocalParts | None = None) -> tuple[Plan, SplitCycles]:
    cycles = SplitCycles(parts, runner or LocalParts(), min_pods=0)
    return cycles.schedule(snapshot, ALL), cycles


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios)
def test_a_split_plan_is_the_local_plan_or_places_every_pending_pod_validly(
    drawn: tuple[list[int], list[QueueDraw], list[JobDraw], list[JobDraw]],
) -> None:
    nodes, queues, first, later = drawn
    assert_split_promise(compile_snapshot(with_arrivals(running_cluster(nodes, queues, first), later)))


def assert_split_promise(snapshot: Snapshot) -> None:
    """With two and three parts: the local plan, or a valid one no worse than it; the same twice."""
    local = schedule(snapshot, ALL)
    for parts in (2, 3):
        plan, cycles = split_plan(snapshot, parts)
        if cycles.outcomes[SplitOutcome.SPLIT]:
            assert_valid(snapshot, plan, ALL)
            assert_no_worse(snapshot, plan, local)
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
    assert_valid(snapshot, plan, ALL)
    layout = split_layout(snapshot, 2, None)
    assert [len(part.jobs) for part in layout.deal.parts] != [0, 0]
    assert all(len(part.jobs) for part in layout.deal.parts), "both parts were dealt jobs"


def test_one_part_or_too_few_pending_pods_is_the_local_cycle() -> None:
    snapshot = roomy_cluster()
    local = schedule(snapshot, ALL)
    one = SplitCycles(1, LocalParts(), min_pods=0)
    few = SplitCycles(2, LocalParts(), min_pods=1000)
    for cycles in (one, few):
        assert facts(cycles.schedule(snapshot, ALL)) == facts(local)
        assert cycles.outcomes == {SplitOutcome.NOT_SPLIT: 1}


def test_demand_no_eviction_can_make_room_for_leaves_the_cycle_local() -> None:
    """Nothing to evict and more asked than there is: a part leaves a pod pending, and who gets
    in is then a matter of queue order, which one part cannot decide for another."""
    builder = cluster().node("n0", gpus=2).node("n1", gpus=2).queue("a", gpu_quota=NO_LIMIT)
    builder.queue("b", gpu_quota=NO_LIMIT, created=1.0)
    builder.job("ja", queue="a", pods=3, gpus=1).job("jb", queue="b", pods=3, gpus=1, created=1.0)
    snapshot = compile_snapshot(builder.build())
    plan, cycles = split_plan(snapshot, 2)
    assert cycles.outcomes == {SplitOutcome.PENDING_LEFT: 1}
    assert facts(plan) == facts(schedule(snapshot, ALL))


def test_a_stale_gang_is_not_split() -> None:
    """Stale gang eviction needs the whole session: a gang below its minimum keeps a cycle local."""
    builder = cluster().node("n0", gpus=8).node("n1", gpus=8).queue("q", gpu_quota=NO_LIMIT)
    builder.job("gang", queue="q", pods=1, gpus=1, min_member=2, status=TaskStatus.RUNNING, node="n0")
    builder.job("new", queue="q", pods=2, gpus=1)
    snapshot = compile_snapshot(builder.build())
    _, cycles = split_plan(snapshot, 2)
    assert cycles.outcomes == {SplitOutcome.NOT_SPLIT: 1}


def test_pods_with_rules_that_read_other_pods_are_not_split() -> None:
    """A part does not see what another places: a shape whose pods repel each other stays local."""
    snapshot = compile_snapshot(build_shape("affinity-12x64").state)
    _, cycles = split_plan(snapshot, 2)
    assert cycles.outcomes == {SplitOutcome.NOT_SPLIT: 1}
    _, plain = split_plan(compile_snapshot(build_shape("fill-12x64").state), 2)
    assert SplitOutcome.NOT_SPLIT not in plain.outcomes


def test_a_limit_two_parts_break_together_refuses_a_job_and_the_cycle_is_local() -> None:
    """Each part stays within the queue's limit of 3 GPUs; together they would place 4."""
    builder = cluster().node("n0", gpus=4).node("n1", gpus=4).queue("q", gpu_quota=NO_LIMIT, gpu_limit=3)
    builder.job("a", queue="q", pods=2, gpus=1, priority=60).job("b", queue="q", pods=2, gpus=1, created=1.0)
    snapshot = compile_snapshot(builder.build())
    layout = split_layout(snapshot, 2, None)
    assert [[job.name for job in part.jobs] for part in layout.deal.parts] == [["a"], ["b"]]
    plan, cycles = split_plan(snapshot, 2)
    assert cycles.outcomes == {SplitOutcome.REFUSED: 1}
    assert facts(plan) == facts(schedule(snapshot, ALL))
    assert len(plan.binds) == 2


class SilentParts(LocalParts):
    """Answers every part with nothing placed: a part that lost its work."""

    def answers(
        self, token: int, count: int, config: SchedulerConfig, usage: QueueUsage | None, meanwhile: Meanwhile
    ) -> list[PartAnswer]:
        return [PartAnswer(part, token) for part in range(count)]


class StrayParts(LocalParts):
    """Swaps the parts' answers: each names the other part's pods and nodes."""

    def answers(
        self, token: int, count: int, config: SchedulerConfig, usage: QueueUsage | None, meanwhile: Meanwhile
    ) -> list[PartAnswer]:
        found = super().answers(token, count, config, usage, meanwhile)
        return [PartAnswer(index, token, a.placed) for index, a in enumerate(reversed(found))]


class LastFirstParts(LocalParts):
    """Answers the parts in reverse order, as parts working elsewhere may come in."""

    def answers(
        self, token: int, count: int, config: SchedulerConfig, usage: QueueUsage | None, meanwhile: Meanwhile
    ) -> list[PartAnswer]:
        return list(reversed(super().answers(token, count, config, usage, meanwhile)))


def corrupted(placed: PlacedPods, how: str, layout: SplitLayout) -> PlacedPods:
    """`placed` broken in one way a part's answer could come in broken."""
    jobs, tasks, rows = array("q", placed.jobs), array("q", placed.tasks), array("q", placed.rows)
    if how == "a job past the last":
        jobs[0] = len(layout.snapshot.jobs)
    elif how == "a negative job":
        jobs[0] = -1
    elif how == "a task past its job's":
        tasks[0] = len(layout.snapshot.jobs[jobs[0]].tasks) + int(layout.positions.offsets[-1])
    elif how == "a row past the last":
        rows[0] = len(layout.snapshot.nodes)
    elif how == "another part's row":
        rows[0] = int(layout.deal.parts[1].rows[0])
    elif how == "another part's job":
        jobs[0] = layout.deal.parts[1].positions[0]
        tasks[0] = 0
    elif how == "a pod twice":
        pods = list(zip(jobs, tasks, rows, placed.groups, placed.gpus, placed.actions, strict=True))
        return placed_pods([*pods, pods[-1]], placed.bound)
    elif how == "a column short":
        return dataclasses.replace(placed, gpus=placed.gpus[:-1])
    elif how == "floats for positions":
        return dataclasses.replace(placed, jobs=array("d", placed.jobs))
    elif how == "more bound than placed":
        return dataclasses.replace(placed, bound=len(placed) + 1)
    return dataclasses.replace(placed, jobs=jobs, tasks=tasks, rows=rows)


BROKEN_ANSWERS = [
    "a job past the last",
    "a negative job",
    "a task past its job's",
    "a row past the last",
    "another part's row",
    "another part's job",
    "a pod twice",
    "a column short",
    "floats for positions",
    "more bound than placed",
]


class BrokenParts(LocalParts):
    """Part 0's placements broken one way (`corrupted`)."""

    def __init__(self, how: str) -> None:
        super().__init__()
        self.how = how

    def answers(
        self, token: int, count: int, config: SchedulerConfig, usage: QueueUsage | None, meanwhile: Meanwhile
    ) -> list[PartAnswer]:
        first, *rest = super().answers(token, count, config, usage, meanwhile)
        assert len(first.placed) and rest[0].placed, "both parts place pods in this cluster"
        broken = corrupted(first.placed, self.how, self.layout(count))
        return [dataclasses.replace(first, placed=broken), *rest]


@pytest.mark.parametrize("how", BROKEN_ANSWERS)
def test_an_answer_naming_pods_it_may_not_place_leaves_the_plan_local(how: str) -> None:
    """Answers name pods by position (`PlacedPods`): a position out of range, another part's pod
    or row, a pod placed twice or columns that do not line up are not trusted, never indexed."""
    snapshot = roomy_cluster()
    plan, cycles = split_plan(snapshot, 2, BrokenParts(how))
    assert cycles.outcomes == {SplitOutcome.UNTRUSTED: 1}
    assert facts(plan) == facts(schedule(snapshot, ALL))


@pytest.mark.parametrize("shape", ["roomy", "kai-reclaim-large-16"])
def test_the_order_answers_come_in_does_not_change_the_plan(shape: str) -> None:
    """Placements, and (in the reclaim) evictions and victims placed again, from either order."""
    snapshot = roomy_cluster() if shape == "roomy" else compile_snapshot(build_shape(shape).state)
    in_order, cycles = split_plan(snapshot, 2)
    last_first, reversed_cycles = split_plan(snapshot, 2, LastFirstParts())
    assert cycles.outcomes == reversed_cycles.outcomes == {SplitOutcome.SPLIT: 1}
    assert facts(last_first) == facts(in_order)
    assert in_order.binds if shape == "roomy" else in_order.pipelined and in_order.evictions


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
    dealt = deal(snapshot, [np.array([0, 1]), np.array([2, 3])], survey(snapshot)[1])
    home, other = dealt.parts
    assert [job.name for job in home.jobs] == ["spread"] and not other.jobs
    assert home.foreign_rows.tolist() == [3], "its pod on n3 comes along as a row home may not use"
    assert [pod.task.node for pod in other.held] == ["n3"], "n3's part holds that pod's GPUs"


def test_bench_compare_times_split_cycles_against_local() -> None:
    local, split = run_split_compare("big-100x800", 1, SplitCycles(2, LocalParts(), min_pods=0))
    assert local.executor == "local" and split.executor == "split-local"
    assert split.ratio_to_local is not None and split.ratio_to_local > 0
    assert split.split_cycles is not None and split.split_cycles["cycles_split"] == 1.0
    assert split.pods_placed == local.pods_placed == 800


def test_bench_shape_big_is_split_and_placed_whole_in_process() -> None:
    snapshot = compile_snapshot(build_shape("big-100x800").state)
    plan, cycles = split_plan(snapshot, 2)
    assert cycles.outcomes == {SplitOutcome.SPLIT: 1}
    assert len(plan.binds) == 800
    assert_valid(snapshot, plan, ALL)


@st.composite
def crowded_clusters(draw: st.DrawFn) -> Snapshot:
    """Nodes full of running pods of queue `v`; pending jobs of queue `r` (entitled to some of the
    cluster: reclaim) and higher-priority ones of `v` (preemption), small enough to fit once
    pods are evicted, so parts often place them all by evicting."""
    nodes = draw(st.integers(2, 6))
    builder = cluster(now=10_000.0).topology("racks", RACK)
    for index in range(nodes):
        builder.node(f"n{index}", gpus=4, labels={RACK: f"r{index % 2}"})
    total = 4.0 * nodes
    builder.queue("d1", gpu_quota=NO_LIMIT).queue("d2", gpu_quota=NO_LIMIT, created=1)
    builder.queue(
        "v",
        parent="d1",
        gpu_quota=draw(st.sampled_from([0.0, 2.0])),
        gpu_weight=draw(st.sampled_from([0.0, 1.0])),
    )
    builder.queue(
        "r", parent="d2", created=1, gpu_quota=draw(st.sampled_from([total / 2, total])), gpu_weight=0.0
    )
    for index in range(nodes):
        used = 0
        while used < 4:
            size = min(draw(st.sampled_from([1, 2])), 4 - used)
            name = f"run-{index}-{used}"
            priority = draw(st.sampled_from([10, 20, 30]))
            builder.job(
                name,
                queue="v",
                gpus=size,
                priority=priority,
                preemptible=True,
                created=float(used),
                status=TaskStatus.RUNNING,
                node=f"n{index}",
            )
            used += size
    for index in range(draw(st.integers(1, 3))):
        pods = draw(st.integers(1, 4))
        queue, priority = draw(st.sampled_from([("r", 50), ("r", 50), ("v", 80)]))
        # Sometimes a leader pod set of one beside the workers', as a PyTorchJob's master and workers.
        leader = pods >= 2 and draw(st.booleans())
        sets = subgroup_set("", pod_set("leader", 1), pod_set("workers", pods - 1)) if leader else None
        builder.job(
            f"new-{index}",
            queue=queue,
            pods=0 if leader else pods,
            gpus=1,
            min_member=draw(st.integers(1, pods)),
            priority=priority,
            preemptible=True,
            created=100.0 + index,
            subgroups=sets,
        )
        if leader:
            builder.task(subgroup="leader")
            for _ in range(pods - 1):
                builder.task(subgroup="workers")
    return compile_snapshot(builder.build())


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(crowded_clusters())
def test_split_evictions_are_valid_and_take_no_more_gpus_than_the_local_plan(snapshot: Snapshot) -> None:
    assert_split_promise(snapshot)


def test_a_gang_no_part_holds_is_divided_and_reclaims_in_every_part() -> None:
    """KAI's large-job reclaim, small: 16 nodes full of one-GPU pods, a gang of eight 8-GPU pods."""
    snapshot = compile_snapshot(build_shape("kai-reclaim-large-16").state)
    layout = split_layout(snapshot, 2, None)
    assert [[len(members) for members in part.share_tasks.values()] for part in layout.deal.parts] == [
        [4],
        [4],
    ]
    plan, cycles = split_plan(snapshot, 2)
    assert cycles.outcomes == {SplitOutcome.SPLIT: 1}
    assert len(plan.pipelined) == 8 and len(plan.evictions) == 64
    assert_valid(snapshot, plan, ALL)
    assert_no_worse(snapshot, plan, schedule(snapshot, ALL))


def two_parts_reclaiming_past_a_fair_share() -> Snapshot:
    """Two 8-GPU nodes full of queue v's pods; queue r deserves 8 GPUs and asks for 16: each part
    alone may reclaim 8 for its job, the two together may not."""
    builder = cluster(now=100.0).node("n0", gpus=8).node("n1", gpus=8)
    builder.queue("v", gpu_quota=0.0, gpu_weight=0.0).queue("r", gpu_quota=8.0, gpu_weight=0.0, created=1)
    for node in ("n0", "n1"):
        builder.job(f"run-{node}", queue="v", pods=0, gpus=8, priority=10, preemptible=True)
        builder.task(status=TaskStatus.RUNNING, node=node)
    builder.job("r0", queue="r", gpus=8, created=10.0).job("r1", queue="r", gpus=8, created=11.0)
    return compile_snapshot(builder.build())


def test_reclaims_two_parts_make_past_a_fair_share_are_refused_and_the_cycle_is_local() -> None:
    snapshot = two_parts_reclaiming_past_a_fair_share()
    layout = split_layout(snapshot, 2, None)
    assert [[job.name for job in part.jobs if job.queue == "r"] for part in layout.deal.parts] == [
        ["r0"],
        ["r1"],
    ]
    runner = LocalParts()
    answers = runner.answers(runner.prepare(snapshot), 2, ALL, None, lambda: None)
    assert all(answer.evictions for answer in answers), "each part reclaims for its own job"
    plan, cycles = split_plan(snapshot, 2)
    assert cycles.outcomes == {SplitOutcome.REFUSED: 1}
    local = schedule(snapshot, ALL)
    assert facts(plan) == facts(local)
    assert len(local.pipelined) == 1, "the local engine reclaims for one job only"


class GreedyParts(LocalParts):
    """Part 0 also evicts a running pod nothing needed: more GPUs taken than placing every pending
    pod needs."""

    def answers(
        self, token: int, count: int, config: SchedulerConfig, usage: QueueUsage | None, meanwhile: Meanwhile
    ) -> list[PartAnswer]:
        found = super().answers(token, count, config, usage, meanwhile)
        part = self.layout(count).deal.parts[0]
        taken = {(pod[0], pod[1]) for pod in found[0].evictions}
        spare = next(
            (job, task)
            for job in part.jobs
            for task in job.tasks
            if task.status == TaskStatus.RUNNING and (job.key, task.name) not in taken
        )
        job, task = spare
        extra = (job.key, task.name, task.node or "", task.gpu_groups, "reclaim", "not needed", None)
        return [dataclasses.replace(found[0], evictions=[*found[0].evictions, extra]), *found[1:]]


def test_parts_that_evict_more_than_needed_are_refused() -> None:
    snapshot = compile_snapshot(build_shape("kai-reclaim-large-16").state)
    plan, cycles = split_plan(snapshot, 2, GreedyParts())
    assert cycles.outcomes == {SplitOutcome.REFUSED: 1}
    assert facts(plan) == facts(schedule(snapshot, ALL))
