"""The deal's own rules: which gangs are divided, how, and what any plan must take from running pods."""

from __future__ import annotations

import random

import numpy as np
import pytest
from builders import NO_LIMIT, cluster, config, pod_set, subgroup_set
from hypothesis import given, settings
from hypothesis import strategies as st
from random_clusters import RACK

from kai_ray.engine.actions.stale_gang import is_stale
from kai_ray.engine.cycle import open_session
from kai_ray.engine.requests import DEFAULT_GPU_MEMORY_MIB
from kai_ray.model.objects import (
    OCCUPYING,
    QUEUE_CHARGING,
    HeldPod,
    JobSpec,
    TaskSpec,
    TaskStatus,
    TopologyConstraintSpec,
)
from kai_ray.model.snapshot import Snapshot, compile_snapshot
from kai_ray.split.basis import survey
from kai_ray.split.deal import (
    RELEASING,
    deal,
    dealing_order,
    divide,
    divisible,
    must_free,
    pod_counts,
    taken_gpus,
)

pytestmark = pytest.mark.unit


def test_pods_are_divided_in_proportion_by_largest_remainder_ties_to_the_lower_part() -> None:
    assert divide(500, [4000.0, 4000.0]) == [250, 250]
    assert divide(5, [8.0, 8.0]) == [3, 2]
    assert divide(7, [8.0, 16.0, 8.0]) == [2, 3, 2]
    assert divide(3, [0.0, 8.0]) == [0, 3]
    assert sum(divide(11, [3.0, 5.0, 7.0])) == 11


def full_cluster(*jobs: str) -> Snapshot:
    """Four 8-GPU nodes full of running one-GPU pods, and the pending jobs named."""
    builder = cluster(now=100.0).topology("racks", RACK)
    for index in range(4):
        builder.node(f"n{index}", gpus=8, labels={RACK: f"r{index // 2}"})
    builder.queue("v", gpu_quota=0.0, gpu_weight=0.0).queue("r", gpu_quota=NO_LIMIT, created=1)
    for index in range(4):
        builder.job(f"run-{index}", queue="v", pods=8, gpus=1, status=TaskStatus.RUNNING, node=f"n{index}")
    if "plain" in jobs:
        builder.job("plain", queue="r", pods=4, gpus=8, created=10.0)
    if "two-sets" in jobs:
        sets = subgroup_set("", pod_set("a", 1), pod_set("b", 2))
        builder.job("two-sets", queue="r", pods=0, gpus=8, subgroups=sets, created=11.0)
        builder.task(subgroup="a").task(subgroup="b").task(subgroup="b")
    if "nested" in jobs:
        inner = subgroup_set("inner", pod_set("c", 1))
        builder.job("nested", queue="r", pods=0, gpus=8, subgroups=subgroup_set("", inner), created=13.0)
        builder.task(subgroup="c").task(subgroup="c")
    if "in-a-rack" in jobs:
        rack = TopologyConstraintSpec("racks", required_level=RACK)
        builder.job("in-a-rack", queue="r", pods=2, gpus=8, topology=rack, created=12.0)
    return compile_snapshot(builder.build())


def test_only_a_plain_gang_no_part_has_room_for_is_divided() -> None:
    snapshot = full_cluster("plain", "two-sets", "in-a-rack", "nested")
    by_name = {job.name: job for job in snapshot.jobs}
    assert divisible(by_name["plain"]) and divisible(by_name["two-sets"])
    assert not divisible(by_name["nested"]), "a nested set: how its members combine is the tree's"
    assert not divisible(by_name["in-a-rack"]), "a topology constraint binds its pods together"
    assert not divisible(by_name["run-0"]), "its pods run"
    dealt = deal(snapshot, [np.array([0, 1]), np.array([2, 3])], survey(snapshot)[1])
    shares = [
        {
            snapshot.jobs[at].name: {snapshot.jobs[at].tasks[i].name for i in members}
            for at, members in part.share_tasks.items()
        }
        for part in dealt.parts
    ]
    assert [len(share["plain"]) for share in shares] == [2, 2]
    assert set().union(*(share["plain"] for share in shares)) == {f"plain-{i}" for i in range(4)}
    assert [sorted(share["two-sets"]) for share in shares] == [["two-sets-0", "two-sets-1"], ["two-sets-2"]]
    for part in dealt.parts:
        for name in ("plain", "two-sets"):
            (share,) = [job for job in part.jobs if job.name == name]
            for kept_set in share.subgroups.pod_sets:
                members = [task for task in share.tasks if task.subgroup == kept_set.name]
                assert kept_set.min_available == len(members) > 0, "each pod set's share a gang"
        assert all(snapshot.jobs[at].name not in ("in-a-rack", "nested") for at in part.share_tasks)
    assert sorted(job.name for part in dealt.parts for job in part.jobs if job.queue == "r") == [
        "in-a-rack",
        "nested",
        "plain",
        "plain",
        "two-sets",
        "two-sets",
    ]
    assert not dealt.kept


def test_gpus_to_free_are_what_pending_pods_ask_beyond_free_and_releasing() -> None:
    builder = cluster(now=100.0).node("n0", gpus=8).node("n1", gpus=8)
    builder.queue("q", gpu_quota=NO_LIMIT)
    builder.job("runs", queue="q", pods=6, gpus=1, status=TaskStatus.RUNNING, node="n0")
    builder.job("leaves", queue="q", pods=2, gpus=1, status=TaskStatus.RELEASING, node="n1")
    builder.job("runs-too", queue="q", pods=4, gpus=1, status=TaskStatus.RUNNING, node="n1")
    builder.job("wants", queue="q", pods=7, gpus=1, created=10.0)
    snapshot = compile_snapshot(builder.build())
    # 2 GPUs free on n0, 2 on n1, 2 more releasing on n1: 7 asked, so 1 must be taken.
    assert must_free(snapshot, survey(snapshot)[1]) == 1.0


STATUSES = (
    TaskStatus.PENDING,
    TaskStatus.RUNNING,
    TaskStatus.BOUND,
    TaskStatus.RELEASING,
    TaskStatus.STUCK_IN_RELEASING,
    TaskStatus.SUCCEEDED,
)
pod_draws = st.lists(
    st.tuples(
        st.integers(0, 4),
        st.sampled_from(STATUSES),
        st.integers(0, 3),
        st.sampled_from([0.0, 0.25, 0.5, 1.0, 2.0]),
        st.sampled_from([0, 300]),
        st.sampled_from([100.0, 333.3, 1000.1]),
    ),
    min_size=1,
    max_size=24,
)


def drawn_cluster(pods: list[tuple[int, TaskStatus, int, float, int, float]], held: bool) -> Snapshot:
    """Four nodes with unlike GPU memories, five jobs in two leaf queues, the pods drawn."""
    builder = cluster(now=100.0)
    for index in range(4):
        builder.node(f"n{index}", gpus=8, gpu_memory_mib=1000 * (index + 1))
    builder.queue("d", gpu_quota=NO_LIMIT).queue("a", parent="d", gpu_quota=NO_LIMIT)
    builder.queue("b", parent="d", gpu_quota=NO_LIMIT)
    for job in range(5):
        builder.job(f"j{job}", queue="ab"[job % 2], pods=0, preemptible=job < 3, created=float(job))
        for _, status, node, gpus, memory, cpu in (pod for pod in pods if pod[0] == job):
            placed = None if status == TaskStatus.PENDING else f"n{node}"
            builder.task(status=status, node=placed, gpu=gpus, gpu_memory_mib=memory, cpu_millis=cpu)
    snapshot = compile_snapshot(builder.build())
    if held:
        snapshot.held = [HeldPod("", task, foreign=True) for job in snapshot.jobs[:2] for task in job.tasks]
    return snapshot


@settings(max_examples=150, deadline=None)
@given(pod_draws, st.booleans())
def test_one_pass_over_the_pods_gathers_what_a_pass_per_purpose_does(
    pods: list[tuple[int, TaskStatus, int, float, int, float]], held: bool
) -> None:
    """The survey's sums and load, and the deal's homes, against a plain pod-by-pod reading."""
    snapshot = drawn_cluster(pods, held)
    opening, load = survey(snapshot)
    table, names = snapshot.nodes, sorted(snapshot.queues)
    minimum = min(float(memory) for memory in table.gpu_memory if memory > DEFAULT_GPU_MEMORY_MIB)
    sums = np.zeros((3, len(names), 3))
    used, releasing = np.zeros((len(table), 2)), np.zeros(len(table))
    for job in snapshot.jobs:
        for task in job.tasks:
            if task.status == TaskStatus.PENDING:
                sums[2, names.index(job.queue)] += (task.cpu_millis, task.memory, task.accepted_gpus(minimum))
                continue
            if task.status not in OCCUPYING:
                continue
            row = table.index[task.node]
            np.add.at(used, row, (task.cpu_millis, taken_gpus(task)))
            releasing[row] += taken_gpus(task) if task.status in RELEASING else 0.0
            if task.status in QUEUE_CHARGING:
                charge = (task.cpu_millis, task.memory, task.accepted_gpus(float(table.gpu_memory[row])))
                for column in (0, 2) if job.preemptible else (0, 1, 2):
                    sums[column, names.index(job.queue)] += charge
    for pod in (pod for pod in snapshot.held if pod.task.node is not None):
        row = table.index[pod.task.node]
        np.add.at(used, row, (pod.task.cpu_millis, taken_gpus(pod.task)))
        releasing[row] += taken_gpus(pod.task) if pod.task.status in RELEASING else 0.0
    sums[:, names.index("d")] = sums[:, names.index("a")] + sums[:, names.index("b")]
    found = (opening.allocated, opening.allocated_non_preemptible, opening.requested)
    assert all(np.array_equal(mine, theirs) for mine, theirs in zip(found, sums, strict=True))
    assert np.array_equal(load.used, used) and np.array_equal(load.releasing, releasing)
    assert [demand[2] for demand in load.demand] == [
        sum(task.status == TaskStatus.PENDING for task in job.tasks) for job in snapshot.jobs
    ]
    dealt = deal(snapshot, [np.array([0, 1]), np.array([2, 3])], load)
    for job in snapshot.jobs:
        rows = [table.index[t.node] for t in job.tasks if t.status in OCCUPYING]
        if rows:
            home = int(sum(row >= 2 for row in rows) > sum(row < 2 for row in rows))
            assert job in dealt.parts[home].jobs, f"{job.name}: not in the part holding most of its pods"
            placed = {task.name for task in job.tasks if task.status in OCCUPYING}
            strays = {
                task.name for task in job.tasks if task.name in placed and table.index[task.node] // 2 != home
            }
            held_there = {pod.task.name for pod in dealt.parts[1 - home].held if not pod.foreign}
            assert strays == held_there & placed, f"{job.name}: its pods on the other part's nodes"


SHAPES = (
    subgroup_set("", pod_set("default", 1)),
    subgroup_set("", pod_set("default", 3)),
    subgroup_set("", pod_set("a", 1), pod_set("b", 2)),
    subgroup_set("", subgroup_set("inner", pod_set("a", 2)), pod_set("b", 1)),
)
"""A job's pod sets: one with a minimum of one or three, two side by side, one nested."""
gang_draws = st.lists(
    st.tuples(
        st.sampled_from(range(len(SHAPES))),
        st.lists(
            st.tuples(
                st.sampled_from(
                    [TaskStatus.PENDING, TaskStatus.RUNNING, TaskStatus.BOUND, TaskStatus.SUCCEEDED]
                ),
                st.sampled_from(["default", "a", "b"]),
            ),
            max_size=4,
        ),
    ),
    min_size=1,
    max_size=6,
)


@settings(max_examples=300, deadline=None)
@given(gang_draws, st.lists(st.booleans(), min_size=6, max_size=6))
def test_pod_counts_find_a_stale_gang_as_stale_gang_eviction_does(
    jobs: list[tuple[int, list[tuple[TaskStatus, str]]]], strays: list[bool]
) -> None:
    """Against the engine's own `is_stale`, and, with a running pod of a subgroup its job does not
    have (no compiled snapshot holds one), against a count per subgroup."""
    builder = cluster(now=100.0).node("n0", gpus=8).queue("q", gpu_quota=NO_LIMIT)
    for index, (shape, pods) in enumerate(jobs):
        builder.job(f"j{index}", queue="q", pods=0, subgroups=SHAPES[shape])
        for status, subgroup in pods:
            builder.task(
                status=status, node=None if status == TaskStatus.PENDING else "n0", subgroup=subgroup
            )
    snapshot = compile_snapshot(builder.build())
    stale = any(is_stale(job) for job in open_session(snapshot, config()).jobs)
    assert stale == stale_by_subgroup(snapshot)
    assert pod_counts(snapshot) == (None if stale else counts_of(snapshot))
    for job, stray in zip(snapshot.jobs, strays, strict=False):
        if stray:
            job.tasks.append(TaskSpec("stray", TaskStatus.RUNNING, "n0", subgroup="elsewhere"))
    stale = stale_by_subgroup(snapshot)
    assert pod_counts(snapshot) == (None if stale else counts_of(snapshot))


def stale_by_subgroup(snapshot: Snapshot) -> bool:
    for job in snapshot.jobs:
        active = [task.subgroup for task in job.tasks if task.status in OCCUPYING]
        if not active or any(task.status == TaskStatus.SUCCEEDED for task in job.tasks):
            continue
        if any(
            active.count(pod_set.name) < pod_set.min_available for pod_set in job.subgroups.all_pod_sets()
        ):
            return True
    return False


def counts_of(snapshot: Snapshot) -> tuple[int, int]:
    tasks = [task for job in snapshot.jobs for task in job.tasks]
    return sum(task.status == TaskStatus.PENDING for task in tasks), sum(
        task.status in OCCUPYING for task in tasks
    )


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from([50, 75, 100]),
            st.sampled_from([0.0, -0.0, 1.0, 2.5, float("inf"), float("-inf"), float("nan")]),
            st.sampled_from(["a", "b", "c"]),
            st.sampled_from(["", "ns"]),
        ),
        max_size=12,
    ),
    st.randoms(),
)
def test_jobs_are_dealt_by_priority_then_age_then_key_then_position(
    drawn: list[tuple[int, float, str, str]], shuffle: random.Random
) -> None:
    jobs = [
        JobSpec(name, "q", namespace=namespace, priority=priority, created=created)
        for priority, created, name, namespace in drawn
    ]
    positions = list(range(len(jobs)))
    shuffle.shuffle(positions)
    chosen = sorted(positions[: len(positions) * 2 // 3])
    expected = [
        position
        for *_, position in sorted(
            (-jobs[position].priority, jobs[position].created, jobs[position].key, position)
            for position in chosen
        )
    ]
    assert dealing_order(jobs, chosen) == expected
