"""Each shape family builds the cluster its name promises, the same way every time."""

from __future__ import annotations

from collections import Counter

import pytest

from kai_ray.api.config import DEFAULT_ACTIONS
from kai_ray.bench.shapes import build_shape
from kai_ray.engine.cycle import schedule
from kai_ray.model.objects import UNLIMITED, ClusterState, JobSpec, TaskStatus
from kai_ray.model.snapshot import compile_snapshot

pytestmark = pytest.mark.unit

SMALL_SHAPES = (
    "kai-allocate-4x10",
    "kai-gang-4x6x3",
    "kai-full-cycle-4x10",
    "kai-reclaim-large-4",
    "fill-5x7",
    "reclaim-4x2",
    "gang-3",
    "big-4x320",
)


def _leaves(state: ClusterState) -> dict[str, str | None]:
    parents = {q.parent for q in state.queues}
    return {q.name: q.parent for q in state.queues if q.name not in parents}


def _statuses(job: JobSpec) -> set[TaskStatus]:
    return {t.status for t in job.tasks}


def test_every_queue_spells_out_its_limits() -> None:
    """An unset KAI limit is 0, so an uncapped queue must say -1 on every resource."""
    for name in SMALL_SHAPES:
        for queue in build_shape(name).state.queues:
            for resource in (queue.gpu, queue.cpu, queue.memory):
                assert resource.limit == UNLIMITED, (name, queue.name)


def test_nodes_have_eight_gpus_and_their_type_label() -> None:
    state = build_shape("kai-allocate-4x10").state
    assert len(state.nodes) == 4
    assert {n.gpus for n in state.nodes} == {8}
    assert all(n.labels == {"kai.scheduler/type": n.name} for n in state.nodes)


def test_kai_allocate_deals_one_gpu_jobs_over_two_departments_of_two_leaves() -> None:
    shape = build_shape("kai-allocate-4x10")
    state = shape.state
    assert shape.actions == ("allocate",)
    assert shape.config.actions == ("allocate",)
    departments = [q for q in state.queues if q.parent is None]
    assert [(q.name, q.gpu.quota, q.gpu.over_quota_weight) for q in departments] == [
        ("dept-0", 16.0, 1.0),
        ("dept-1", 16.0, 1.0),
    ]
    assert _leaves(state) == {
        "queue-0": "dept-0",
        "queue-1": "dept-0",
        "queue-2": "dept-1",
        "queue-3": "dept-1",
    }
    assert {(q.gpu.quota, q.gpu.over_quota_weight) for q in state.queues if q.parent} == {(8.0, 1.0)}
    assert len(state.jobs) == 10
    assert [j.queue for j in state.jobs[:5]] == ["queue-0", "queue-1", "queue-2", "queue-3", "queue-0"]
    for job in state.jobs:
        assert job.priority == 50
        assert _statuses(job) == {TaskStatus.PENDING}
        assert [(t.gpu, t.name) for t in job.tasks] == [(1.0, f"{job.name}-0")]


def test_kai_gang_jobs_are_whole_gangs_of_one_gpu_pods() -> None:
    shape = build_shape("kai-gang-4x6x3")
    assert shape.actions == ("allocate",)
    assert len(shape.state.jobs) == 6
    for job in shape.state.jobs:
        assert [t.gpu for t in job.tasks] == [1.0, 1.0, 1.0]
        assert job.subgroups.pod_sets[0].min_available == 3


def test_kai_full_cycle_runs_the_older_half_round_robin_over_nodes() -> None:
    shape = build_shape("kai-full-cycle-4x10")
    assert shape.actions == DEFAULT_ACTIONS
    jobs = shape.state.jobs
    running = [j for j in jobs if _statuses(j) == {TaskStatus.RUNNING}]
    pending = [j for j in jobs if _statuses(j) == {TaskStatus.PENDING}]
    assert len(running) == len(pending) == 5
    assert [j.tasks[0].node for j in running] == [f"node-{i % 4:05d}" for i in range(5)]
    assert all(j.last_start is not None for j in running)
    assert all(j.last_start is None for j in pending)


def test_kai_full_cycle_refuses_more_running_pods_than_gpus() -> None:
    with pytest.raises(ValueError, match="do not fit"):
        build_shape("kai-full-cycle-1x20")


def test_kai_reclaim_large_fills_the_cluster_from_the_zero_quota_queue() -> None:
    shape = build_shape("kai-reclaim-large-4")
    state = shape.state
    assert shape.actions == DEFAULT_ACTIONS
    quotas = {q.name: (q.gpu.quota, q.gpu.over_quota_weight) for q in state.queues if q.parent}
    assert quotas == {"queue-0": (0.0, 0.0), "queue-1": (32.0, 0.0)}
    running = [j for j in state.jobs if _statuses(j) == {TaskStatus.RUNNING}]
    assert len(running) == 32
    assert {j.queue for j in running} == {"queue-0"}
    assert Counter(j.tasks[0].node for j in running) == {f"node-{i:05d}": 8 for i in range(4)}
    (large,) = [j for j in state.jobs if _statuses(j) == {TaskStatus.PENDING}]
    assert large.queue == "queue-1"
    assert [t.gpu for t in large.tasks] == [8.0, 8.0]


def test_kai_reclaim_large_gives_reclaim_something_to_do() -> None:
    """The zero-quota queue holds the GPUs, so the large job gets half the cluster through reclaim."""
    shape = build_shape("kai-reclaim-large-4")
    plan = schedule(compile_snapshot(shape.state), shape.config)
    assert len(plan.binds) + len(plan.pipelined) == 2
    assert len(plan.evictions) == 16


def test_fill_shape_has_the_named_size_and_equal_queues() -> None:
    state = build_shape("fill-20x100").state
    assert len(state.nodes) == 20
    assert len(state.jobs) == 100
    leaves = [q for q in state.queues if q.parent is not None]
    assert len(leaves) == 10
    assert {q.gpu.quota for q in leaves} == {16.0}


def test_gang_shape_is_one_job_of_one_full_node_pod_per_node() -> None:
    state = build_shape("gang-3").state
    assert len(state.nodes) == 3
    (job,) = state.jobs
    assert [t.gpu for t in job.tasks] == [8.0, 8.0, 8.0]
    assert job.subgroups.pod_sets[0].min_available == 3


def test_big_shape_mixes_singles_and_gangs_with_a_fifth_fractional() -> None:
    state = build_shape("big-4x320").state
    departments = [q.name for q in state.queues if q.parent is None]
    assert len(departments) == 4
    leaves = _leaves(state)
    assert len(leaves) == 20
    assert Counter(leaves.values()) == {d: 5 for d in departments}
    tasks = [t for j in state.jobs for t in j.tasks]
    assert len(tasks) == 320
    assert all(t.status == TaskStatus.PENDING for t in tasks)
    assert Counter(len(j.tasks) for j in state.jobs) == {64: 2, 8: 8, 1: 128}
    assert sum(t.gpu == 0.5 for t in tasks) == 64
    assert {j.queue for j in state.jobs} == set(leaves)


def test_big_shape_tail_stays_exact_in_single_pods() -> None:
    state = build_shape("big-4x100").state
    assert sum(len(j.tasks) for j in state.jobs) == 100
    assert {len(j.tasks) for j in state.jobs} <= {1, 8, 64}


@pytest.mark.parametrize("name", SMALL_SHAPES)
def test_same_shape_name_builds_the_same_cluster(name: str) -> None:
    assert build_shape(name) == build_shape(name)


def test_sizes_must_be_positive() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        build_shape("kai-allocate-0x5")


def test_unknown_shape_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match=r"unknown shape 'nope'.*kai-reclaim-large-N"):
        build_shape("nope")
