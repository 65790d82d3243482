"""The Plan as plain data (ARCHITECTURE.md "One scheduling cycle", step 5)."""

from __future__ import annotations

import pytest
from builders import cluster, config, owner_and_borrower, run_cycle
from hypothesis import HealthCheck, given, settings
from random_clusters import JobDraw, QueueDraw, full_cycle, running_cluster, scenarios, with_arrivals

from kai_ray.engine.plan import task_state
from kai_ray.engine.reasons import EvictionCause
from kai_ray.model.objects import TaskStatus

pytestmark = pytest.mark.unit

S = TaskStatus
Drawn = tuple[list[int], list[QueueDraw], list[JobDraw], list[JobDraw]]


def test_plan_reports_every_task_and_only_changes_as_binds() -> None:
    state = (
        cluster()
        .node("n1", gpus=2)
        .queue("q")
        .job("running", queue="q", gpus=1, status=S.RUNNING, node="n1")
        .job("new", queue="q", gpus=1)
        .job("finished", queue="q", gpus=1, status=S.SUCCEEDED, node="n1")
        .job("lost", queue="missing", gpus=1)
        .build()
    )
    plan = run_cycle(state)
    assert set(plan.tasks) == {("running", "running-0"), ("new", "new-0"), ("finished", "finished-0")}
    assert [(b.job, b.task, b.node) for b in plan.binds] == [("new", "new-0", "n1")]
    assert plan.tasks[("running", "running-0")].status == S.RUNNING
    assert plan.tasks[("new", "new-0")].status == S.ALLOCATED
    assert plan.tasks[("new", "new-0")].accepted_gpus == 1
    assert plan.tasks[("finished", "finished-0")].accepted_gpus == 0
    assert [(p.kind, p.name) for p in plan.problems] == [("PodGroup", "lost")]
    assert plan.evictions == [] and plan.pipelined == []


def test_pending_pod_keeps_its_node_hint_in_the_plan() -> None:
    """FORMAT.md: a Pending task's `node` is reported back unchanged while it stays Pending."""
    state = cluster().node("n1", gpus=1).queue("q").job("hinted", queue="q", gpus=2, node="n1").build()
    plan = run_cycle(state)
    assert plan.tasks[("hinted", "hinted-0")].status == S.PENDING
    assert plan.tasks[("hinted", "hinted-0")].node == "n1"


def test_same_job_name_in_two_namespaces_stays_two_jobs_in_the_plan() -> None:
    state = (
        cluster()
        .node("n1", gpus=1)
        .queue("q")
        .job("train", namespace="team-a", queue="q", gpus=1, created=0)
        .job("train", namespace="team-b", queue="q", gpus=1, created=1)
        .build()
    )
    plan = run_cycle(state)
    assert len(plan.tasks) == 2
    statuses = sorted(task.status for task in plan.tasks.values())
    assert statuses == sorted([S.ALLOCATED, S.PENDING])
    assert [key for key in plan.pending_reasons if "team-b" in str(key)]


def test_reclaim_records_its_cause_the_preemptor_and_the_placing_action() -> None:
    """Backends read the eviction's cause and preemptor and the bind's action, never message text."""
    state = owner_and_borrower()
    plan = run_cycle(state, config(actions=("allocate", "reclaim")))
    assert [(e.job, e.reason.cause, e.reason.preemptor) for e in plan.evictions] == [
        ("borrowed", EvictionCause.RECLAIM, "rightful")
    ]
    assert [(b.job, b.action) for b in plan.pipelined] == [("rightful", "reclaim")]


def test_allocate_is_named_as_the_action_of_its_binds() -> None:
    plan = run_cycle(cluster().node("n1", gpus=1).queue("q").job("j", queue="q", gpus=1).build())
    assert [(b.job, b.action) for b in plan.binds] == [("j", "allocate")]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios)
def test_shared_task_states_are_each_tasks_own(drawn: Drawn) -> None:
    """Tasks that stand alike share one state in the plan (`task_state`'s `alike`): each is the
    state made for the task alone, and prints as it does."""
    nodes, queues, first, later = drawn
    result = full_cycle(with_arrivals(running_cluster(nodes, queues, first), later))
    for job in result.session.jobs:
        for task in job.tasks:
            state = result.plan.tasks[(job.key, task.name)]
            assert state == task_state(result.session, task)
            assert repr(state) == repr(task_state(result.session, task))


def test_task_states_that_print_differently_are_not_shared() -> None:
    """A whole GPU given as an int prints otherwise than one given as a float: not shared."""
    state = (
        cluster()
        .node("n1", gpus=2)
        .queue("q")
        .job("as-float", queue="q", gpus=1.0)
        .job("as-int", queue="q", gpus=1)
        .build()
    )
    plan = run_cycle(state)
    assert repr(plan.tasks[("as-float", "as-float-0")].accepted_gpus) == "1.0"
    assert repr(plan.tasks[("as-int", "as-int-0")].accepted_gpus) == "1"
