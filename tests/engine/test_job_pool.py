"""Session jobs kept between cycles (`JobPool`, through `CyclePlanner`) never change a decision.

Each test plans a state with a planner that keeps jobs, then a state that reuses some of the
same objects (as `LiveCluster` hands back what did not change), and compares the plan with
the plan of a fresh session.
"""

from __future__ import annotations

import operator

import numpy as np
import pytest
from builders import binds, cluster

from kai_ray.api.config import SchedulerConfig
from kai_ray.cluster.kube.planner import CyclePlanner
from kai_ray.engine.booking import SumBounds
from kai_ray.engine.cycle import open_session, schedule
from kai_ray.engine.session import Session
from kai_ray.model.objects import ClusterState, TaskStatus
from kai_ray.model.snapshot import compile_snapshot

pytestmark = pytest.mark.unit


def fresh_plan(state: ClusterState) -> object:
    return schedule(compile_snapshot(state), SchedulerConfig())


def test_a_job_its_session_moved_is_built_again_so_an_unapplied_plan_is_made_again() -> None:
    state = cluster().node("n1", gpus=8).queue("q").job("train", queue="q", gpus=2, pods=2).build()
    planner = CyclePlanner(SchedulerConfig())
    first = planner.decide(state)[1]
    again = planner.decide(state)[1]  # the binds were never applied: the same pods are pending
    assert binds(first) == {"train-0": "n1", "train-1": "n1"}
    assert again == first == fresh_plan(state)


def test_a_kept_job_that_moves_in_a_later_session_is_judged_and_reported_afresh() -> None:
    """A gang below its minimum, kept while it waits, then completed when a blocker leaves:
    past its grace period it must not be evicted as the stale gang it was, and its new pod
    must be reported bound (both answers were remembered with the kept job)."""
    state = (
        cluster()
        .node("n1", gpus=8)
        .queue("q")
        .job("gang", queue="q", gpus=4, pods=1, status=TaskStatus.RUNNING, node="n1")
        .task()
        .job("blocker", queue="q", gpus=4, status=TaskStatus.RUNNING, node="n1")
        .build()
    )
    gang = state.jobs[0]
    gang.stale_since, gang.staleness_grace = 0.0, 60.0
    planner = CyclePlanner(SchedulerConfig())
    waiting = planner.decide(state)[1]
    assert binds(waiting) == {} and waiting.evictions == []
    later = ClusterState(nodes=state.nodes, queues=state.queues, jobs=[gang], now=100.0)
    plan = planner.decide(later)[1]
    assert binds(plan) == {"gang-1": "n1"} and plan.evictions == []
    assert plan == fresh_plan(later)


def test_once_sessions_are_read_after_the_next_one_opens_no_job_is_shared_between_them() -> None:
    running = (
        cluster().node("n1", gpus=8).queue("q").job("web", queue="q", status=TaskStatus.RUNNING, node="n1")
    )
    planner = CyclePlanner(SchedulerConfig())
    built = running.build()
    first = planner.decide(built)[0]
    assert planner.decide(built)[0].jobs[0] is first.jobs[0]  # untouched: kept
    planner.share_sessions()  # as the gRPC API's Kubernetes backend asks
    read_later = planner.decide(built)[0]
    assert planner.decide(built)[0].jobs[0] is not read_later.jobs[0]


def test_a_session_whose_jobs_are_all_the_last_ones_opens_to_the_books_of_a_fresh_one() -> None:
    """An idle cycle: nothing moved, nothing changed; the pool's whole opening is reused and
    must book nodes (shared GPUs included) and queues exactly as a fresh session does."""
    state = (
        cluster()
        .node("n1", gpus=8)
        .queue("q")
        .job("whole", queue="q", gpus=2, pods=2, status=TaskStatus.RUNNING, node="n1")
        .job("half", queue="q", gpus=0.5, status=TaskStatus.RUNNING, node="n1", gpu_groups=("g1",))
        .job("too-big", queue="q", gpus=16)
        .build()
    )
    planner = CyclePlanner(SchedulerConfig())
    first = planner.decide(state)[0]
    second, plan = planner.decide(state)
    fresh = open_session(compile_snapshot(state), SchedulerConfig())
    assert all(map(operator.is_, second.jobs, first.jobs))
    for books in (lambda s: s.nodes.idle, lambda s: s.nodes.releasing, lambda s: s.queues.allocated):
        assert np.array_equal(books(second), books(fresh))
    assert np.array_equal(second.queues.request, fresh.queues.request)
    assert second.nodes.groups == fresh.nodes.groups
    assert [job.name for job in second.jobs_with_pending_tasks()] == ["too-big"]
    assert plan == fresh_plan(state)


def assert_books_as_fresh(session: Session, state: ClusterState) -> None:
    fresh = open_session(compile_snapshot(state), SchedulerConfig())
    for books in (
        lambda s: s.nodes.idle,
        lambda s: s.nodes.releasing,
        lambda s: s.queues.allocated,
        lambda s: s.queues.allocated_non_preemptible,
        lambda s: s.queues.request,
    ):
        assert np.array_equal(books(session), books(fresh))  # equal floats, not close ones
    assert session.queues.versions == fresh.queues.versions
    assert group_books(session) == group_books(fresh)
    assert [job.name for job in session.jobs_with_pending_tasks()] == [
        job.name for job in fresh.jobs_with_pending_tasks()
    ]


def group_books(session: Session) -> list[dict[str, tuple[float, list[tuple[float, TaskStatus]]]]]:
    """Each node's shared GPU groups: memory and what members hold (uids differ between a
    pool's sessions and a fresh one)."""
    return [
        {name: (group.memory, sorted(group.members.values())) for name, group in groups.items()}
        for groups in session.nodes.groups
    ]


def churned(fraction: float) -> tuple[ClusterState, ClusterState]:
    """A cluster, and the same one after a job went and two came (the rest the same objects)."""
    state = (
        cluster()
        .node("n1", gpus=8)
        .node("n2", gpus=8)
        .queue("parent")
        .queue("q", parent="parent")
        .job("a", queue="q", gpus=2, pods=2, status=TaskStatus.RUNNING, node="n1")
        .job("b", queue="q", gpus=1, status=TaskStatus.RELEASING, node="n2", priority=200)
        .job("c", queue="q", gpus=1, status=TaskStatus.RUNNING, node="n2")
        .job("shared", queue="q", gpus=fraction, status=TaskStatus.RUNNING, node="n2", gpu_groups=("g",))
        .job("wait", queue="q", gpus=16)
        .build()
    )
    arrivals = (
        cluster()
        .node("n1", gpus=8)
        .queue("q")
        .job("d", queue="q", gpus=1, status=TaskStatus.PIPELINED, node="n2")
        .job("e", queue="q", gpus=32)
        .build()
    )
    kept = [job for job in state.jobs if job.name != "c"]
    jobs = sorted([*kept, *arrivals.jobs], key=lambda job: job.name)
    return state, ClusterState(nodes=state.nodes, queues=state.queues, jobs=jobs, now=state.now)


@pytest.mark.parametrize("fraction", [0.5, 0.3])
def test_a_session_some_of_whose_jobs_came_and_went_opens_to_the_books_of_a_fresh_one(
    fraction: float,
) -> None:
    """The pool updates the last opening with the jobs that came and went (whole GPUs and half
    ones add up exactly); a 0.3 GPU charge could round, so that opening is added up afresh."""
    state, later = churned(fraction)
    planner = CyclePlanner(SchedulerConfig())
    first = planner.decide(state)[0]
    assert_books_as_fresh(first, state)
    second, plan = planner.decide(later)
    assert second.jobs[0] is first.jobs[0]  # "a", kept
    assert_books_as_fresh(second, later)
    assert plan == fresh_plan(later)


def test_sums_are_exact_while_every_value_is_a_multiple_of_a_unit_they_count_below_2_to_52() -> None:
    whole = np.array([[1000.0, 2.0**33, 1.0, 1.0], [250.0, 2.0**20, 0.5, 1.0]])
    assert SumBounds.of(whole).exact
    assert not SumBounds.of(np.array([[0.1, 0.0, 0.0, 0.0], [0.2, 0.0, 0.0, 0.0]])).exact
    assert not SumBounds.of(np.array([[2.0**52 + 1, 0.0, 0.0, 0.0]])).exact
    assert SumBounds.of(np.array([[2.0**60, 0.0, 0.0, 0.0]])).exact  # a multiple of 2**60, once
    assert not SumBounds.of(np.array([[np.inf, 0.0, 0.0, 0.0]])).exact
    assert not (SumBounds.of(whole) + SumBounds.of(np.array([[2.0**-60, 0.0, 0.0]]))).exact
