"""The engine's per-pod shortcuts decide exactly what the long way decides.

Each shortcut skips work whose answer is known (a queue choice no charge or
push has touched since, a capacity check no limit or quota can fail, a
per-task answer given before): the tests run full cycles over random clusters
once with the shortcut and once with it turned off and ask for the same plan,
task by task, or compare each remembered answer with one asked afresh.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from unittest import mock

import numpy as np
import pytest
from builders import cluster, config
from hypothesis import HealthCheck, given, settings
from random_clusters import JobDraw, QueueDraw, full_cycle, running_cluster, scenarios, with_arrivals

from kai_ray.cluster.sim.simulator import SimulatedCluster
from kai_ray.engine.cycle import open_session
from kai_ray.engine.job_queue import Best, JobQueue
from kai_ray.engine.node_finder import shape_key, shape_of
from kai_ray.engine.plugins.predicates import PredicatesPlugin
from kai_ray.engine.plugins.proportion import ProportionPlugin
from kai_ray.engine.reasons import PendingCause
from kai_ray.model.snapshot import compile_snapshot

pytestmark = pytest.mark.unit

JOB_QUEUE_USERS = (
    "kai_ray.engine.actions.allocate.JobQueue",
    "kai_ray.engine.actions.victim_action.JobQueue",
    "kai_ray.engine.solver.JobQueue",
)


class FreshWalkQueue(JobQueue):
    """Walks the whole queue tree on every pop, remembering no parent's choice."""

    def _best_in(self, queue: str) -> Best | None:
        self._choices.clear()
        return super()._best_in(queue)


@contextmanager
def fresh_walks() -> Iterator[None]:
    with ExitStack() as stack:
        for user in JOB_QUEUE_USERS:
            stack.enter_context(mock.patch(user, FreshWalkQueue))
        yield


def whole_plan(drawn: tuple[list[int], list[QueueDraw], list[JobDraw], list[JobDraw]]) -> tuple[object, ...]:
    nodes, queues, first, later = drawn
    plan = full_cycle(with_arrivals(running_cluster(nodes, queues, first), later)).plan
    return (plan.binds, plan.pipelined, plan.evictions, plan.pending_reasons, plan.tasks)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios)
def test_remembered_queue_choices_pop_jobs_as_a_fresh_walk_does(
    drawn: tuple[list[int], list[QueueDraw], list[JobDraw], list[JobDraw]],
) -> None:
    with fresh_walks():
        walked = whole_plan(drawn)
    assert whole_plan(drawn) == walked


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios)
def test_skipped_capacity_checks_are_the_ones_that_pass(
    drawn: tuple[list[int], list[QueueDraw], list[JobDraw], list[JobDraw]],
) -> None:
    with mock.patch.object(ProportionPlugin, "_unchecked", lambda self, job: False):
        checked = whole_plan(drawn)
    assert whole_plan(drawn) == checked


def test_a_limit_on_a_parent_queue_still_stops_a_preemptible_job() -> None:
    """The shortcut looks at the whole chain: a leaf without a limit under a limited parent."""
    state = (
        cluster()
        .node("n0", gpus=8)
        .queue("dept", gpu_limit=2.0)
        .queue("team", parent="dept")
        .job("small", queue="team", gpus=2.0)
        .job("more", queue="team", gpus=1.0, created=1.0)
        .build()
    )
    result = SimulatedCluster(state, config(actions=("allocate",))).run_cycle()
    assert [bind.job for bind in result.plan.binds] == ["small"]
    assert result.plan.pending_reasons["more"].cause == PendingCause.OVER_LIMIT


def test_a_remembered_choice_is_dropped_when_a_charge_alone_changes_the_subtree() -> None:
    """An eviction charges a queue without any push or pop: the parent must choose again."""
    state = (
        cluster()
        .node("n0", gpus=8)
        .queue("dept", gpu_quota=8.0)
        .queue("b", parent="dept", gpu_quota=4.0)
        .queue("c", parent="dept", gpu_quota=4.0, created=1.0)
        .job("in-b", queue="b", gpus=1.0)
        .job("in-c", queue="c", gpus=1.0)
        .build()
    )
    session = open_session(compile_snapshot(state), config())
    queue = JobQueue(session, list(session.jobs))
    first = queue._best_in("dept")
    assert first is not None and first[0] == "b"  # equal queues: the older one
    session.queues.charge("b", np.array([0.0, 0.0, 3.0]), non_preemptible=False)
    again = queue._best_in("dept")
    assert again is not None and again[0] == "c"


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios)
def test_answers_remembered_per_task_are_the_ones_asked_afresh(
    drawn: tuple[list[int], list[QueueDraw], list[JobDraw], list[JobDraw]],
) -> None:
    """The node finder's shape keys and the predicates' size verdicts, after a whole cycle."""
    nodes, queues, first, later = drawn
    session = full_cycle(with_arrivals(running_cluster(nodes, queues, first), later)).session
    finder = session.node_finder
    predicates = next(p for p in session.plugins if isinstance(p, PredicatesPlugin))
    tasks = {task.uid: task for job in session.jobs for task in job.tasks}
    for uid, key in finder._keys.items():
        assert key == shape_key(shape_of(tasks[uid]))
    for request, too_big in predicates._too_big.items():
        vector = np.frombuffer(request)
        assert too_big == bool((vector > predicates._max_allocatable + 1e-9).any())
    assert set(predicates._too_big) <= {task.request.tobytes() for task in tasks.values()}
