"""Gang rules (spec §8.3, §8.4, invariants §22.7-9) and Example 9 (§23)."""

from __future__ import annotations

import pytest
from builders import binds, cluster, find_job, find_task, open_session, pod_set, run_cycle, subgroup_set
from hypothesis import HealthCheck, given, settings
from random_clusters import JobDraw, QueueDraw, full_cycle, running_cluster, scenarios, with_arrivals

from kai_ray.engine import gang
from kai_ray.engine.gang import should_pipeline, tasks_to_allocate
from kai_ray.engine.session import Session
from kai_ray.engine.statement import Statement
from kai_ray.model.objects import ClusterState, TaskStatus

pytestmark = pytest.mark.unit

S = TaskStatus
Drawn = tuple[list[int], list[QueueDraw], list[JobDraw], list[JobDraw]]


def names_to_allocate(session: Session, job: str) -> list[str]:
    return [t.name for t in tasks_to_allocate(session, find_job(session, job))]


# ---------------------------------------------------------------------- flat gangs


def test_flat_gang_below_minimum_takes_exactly_its_minimum() -> None:
    state = cluster().node("n1", gpus=8).queue("q").job("j", queue="q", gpus=1, pods=6, min_member=4).build()
    session = open_session(state)
    assert names_to_allocate(session, "j") == ["j-0", "j-1", "j-2", "j-3"]


def test_flat_gang_at_minimum_grows_one_task_per_attempt() -> None:
    state = (
        cluster()
        .node("n1", gpus=8)
        .queue("q")
        .job("j", queue="q", gpus=1, pods=4, min_member=4, status=S.RUNNING, node="n1")
        .task()
        .task()
        .build()
    )
    session = open_session(state)
    assert names_to_allocate(session, "j") == ["j-4"]


def test_gang_grows_one_at_a_time_after_its_minimum_is_allocated_in_session() -> None:
    state = cluster().node("n1", gpus=8).queue("q").job("j", queue="q", gpus=1, pods=6, min_member=4).build()
    session = open_session(state)
    statement = Statement(session)
    for task in tasks_to_allocate(session, find_job(session, "j")):
        statement.allocate(task, 0)
    assert names_to_allocate(session, "j") == ["j-4"]


def test_remembered_gang_tasks_follow_a_rollback_and_ignore_callers_edits() -> None:
    state = cluster().node("n1", gpus=8).queue("q").job("j", queue="q", gpus=1, pods=6, min_member=4).build()
    session = open_session(state)
    job = find_job(session, "j")
    first = tasks_to_allocate(session, job)
    first.clear()  # the caller's list, not the remembered one
    statement = Statement(session)
    for task in tasks_to_allocate(session, job):
        statement.allocate(task, 0)
    assert names_to_allocate(session, "j") == ["j-4"]
    statement.discard()
    assert names_to_allocate(session, "j") == ["j-0", "j-1", "j-2", "j-3"]


def test_broken_gang_asks_only_for_what_it_is_missing() -> None:
    """Example 9: failures leave 3 of minimum 4 active; allocate tries to restore the gang with 1 task."""
    state = (
        cluster()
        .node("n1", gpus=8)
        .queue("q")
        .job("j", queue="q", gpus=1, pods=3, min_member=4, status=S.RUNNING, node="n1")
        .task(status=S.FAILED)
        .task()
        .task()
        .build()
    )
    session = open_session(state)
    assert names_to_allocate(session, "j") == ["j-4"]


def test_task_order_decides_which_pods_a_gang_attempt_takes() -> None:
    state = (
        cluster()
        .node("n1", gpus=8)
        .queue("q")
        .job("j", queue="q", gpus=1, pods=0, min_member=2)
        .task("worker-a")
        .task("worker-b", task_priority=1)
        .task("head", labels={"ray.io/node-type": "head"})
        .task("worker-c", task_priority=5)
        .build()
    )
    session = open_session(state)
    assert names_to_allocate(session, "j") == ["head", "worker-c"]


# ---------------------------------------------------------------------- subgroup trees


def tree_state(
    pods: dict[str, tuple[int, int]], minimums: dict[str, int], min_subgroups: int | None = None
) -> ClusterState:
    """A job whose root holds one pod set per name: `pods[name]` = (pending, running), `minimums[name]`."""
    tree = subgroup_set("", *(pod_set(n, m) for n, m in minimums.items()), min_subgroups=min_subgroups)
    builder = cluster().node("n1", gpus=16).queue("q").job("j", queue="q", gpus=1, pods=0, subgroups=tree)
    for name, (pending, running) in pods.items():
        for i in range(running):
            builder.task(f"{name}-run-{i}", subgroup=name, status=S.RUNNING, node="n1")
        for i in range(pending):
            builder.task(f"{name}-{i}", subgroup=name)
    return builder.build()


def test_gang_phase_collects_the_missing_part_of_every_unsatisfied_member() -> None:
    state = tree_state({"a": (3, 0), "b": (2, 0)}, {"a": 2, "b": 1})
    session = open_session(state)
    assert sorted(names_to_allocate(session, "j")) == ["a-0", "a-1", "b-0"]


def test_gang_phase_skips_members_that_are_already_satisfied() -> None:
    state = tree_state({"a": (2, 2), "b": (2, 1)}, {"a": 2, "b": 3})
    session = open_session(state)
    assert names_to_allocate(session, "j") == ["b-0", "b-1"]


def test_gang_phase_with_min_subgroups_takes_only_the_first_k_members() -> None:
    state = tree_state({"a": (2, 0), "b": (1, 0)}, {"a": 2, "b": 1}, min_subgroups=1)
    session = open_session(state)
    # both unsatisfied members order equal, so by name: only "a" is attempted
    assert names_to_allocate(session, "j") == ["a-0", "a-1"]


def test_elastic_phase_returns_one_task_of_the_first_member() -> None:
    state = tree_state({"a": (2, 2), "b": (2, 2)}, {"a": 2, "b": 1})
    session = open_session(state)
    # a is at 2/2, b at 2/1: lower allocated/threshold ratio first (§5.4) -> a
    assert names_to_allocate(session, "j") == ["a-0"]


def test_elastic_phase_places_an_unsatisfied_optional_member_as_one_sub_gang() -> None:
    """§8.3/§22.9: inside a satisfied set, a member still below its own minimum yields all it misses."""
    state = tree_state({"a": (0, 1), "b": (3, 0)}, {"a": 1, "b": 2}, min_subgroups=1)
    session = open_session(state)
    assert names_to_allocate(session, "j") == ["b-0", "b-1"]


def test_nested_sets_recurse_in_the_gang_phase() -> None:
    tree = subgroup_set("", subgroup_set("x", pod_set("x1", 1), pod_set("x2", 2)), pod_set("y", 1))
    state = (
        cluster()
        .node("n1", gpus=16)
        .queue("q")
        .job("j", queue="q", gpus=1, pods=0, subgroups=tree)
        .task("x1-0", subgroup="x1")
        .task("x1-1", subgroup="x1")
        .task("x2-0", subgroup="x2")
        .task("x2-1", subgroup="x2")
        .task("y-0", subgroup="y")
        .build()
    )
    session = open_session(state)
    assert sorted(names_to_allocate(session, "j")) == ["x1-0", "x2-0", "x2-1", "y-0"]


# ---------------------------------------------------------------------- should_pipeline (§8.4)


def pipelining_session(min_member: int) -> Session:
    state = (
        cluster()
        .node("n1", gpus=1)
        .node("n2", gpus=1)
        .queue("q")
        .job("old", queue="q", gpus=1, status=S.RELEASING, node="n2")
        .job("j", queue="q", gpus=1, pods=2, min_member=min_member)
        .build()
    )
    return open_session(state)


def test_gang_relying_on_a_pipelined_task_must_pipeline() -> None:
    session = pipelining_session(min_member=2)
    statement = Statement(session)
    job = find_job(session, "j")
    statement.allocate(find_task(session, "j-0"), 0)
    assert not should_pipeline(job)
    statement.pipeline(find_task(session, "j-1"), 1)
    assert should_pipeline(job)


def test_elastic_extra_that_is_pipelined_does_not_hold_back_the_gang() -> None:
    session = pipelining_session(min_member=1)
    statement = Statement(session)
    statement.allocate(find_task(session, "j-0"), 0)
    statement.pipeline(find_task(session, "j-1"), 1)
    assert not should_pipeline(find_job(session, "j"))


# ---------------------------------------------------------------------- Example 9 end to end


@pytest.mark.parametrize(("free_gpus", "bound"), [(8, 6), (5, 5), (4, 4), (3, 0)])
def test_example_9_minimum_is_all_or_nothing_and_growth_is_elastic(free_gpus: int, bound: int) -> None:
    state = (
        cluster()
        .node("n1", gpus=free_gpus)
        .queue("q")
        .job("j", queue="q", gpus=1, pods=6, min_member=4)
        .build()
    )
    plan = run_cycle(state)
    assert len(plan.binds) == bound
    if bound < 6:
        assert "j" in plan.pending_reasons


def test_example_9_elastic_growth_competes_with_other_gangs() -> None:
    """After its minimum, a job is re-queued; a gang still below its minimum goes first (§5.3 elastic)."""
    state = (
        cluster()
        .node("n1", gpus=4)
        .queue("q")
        .job("a-elastic", queue="q", gpus=1, pods=4, min_member=2, created=0)
        .job("b-gang", queue="q", gpus=1, pods=2, min_member=2, created=10)
        .build()
    )
    placed = binds(run_cycle(state))
    assert sorted(placed) == ["a-elastic-0", "a-elastic-1", "b-gang-0", "b-gang-1"]


def test_gang_that_relies_on_releasing_resources_is_pipelined_whole() -> None:
    """§8.4/§22.8: two pods fit in Idle, two only in Releasing -> all four pipelined, none bound."""
    state = (
        cluster()
        .node("n1", gpus=2)
        .node("n2", gpus=2)
        .queue("q")
        .job("old", queue="q", gpus=1, pods=2, status=S.RELEASING, node="n2")
        .job("j", queue="q", gpus=1, pods=4, min_member=4)
        .build()
    )
    plan = run_cycle(state)
    assert plan.binds == []
    assert sorted(b.task for b in plan.pipelined) == ["j-0", "j-1", "j-2", "j-3"]
    assert {b.node for b in plan.pipelined} == {"n1", "n2"}


def test_elastic_pod_that_waits_for_releases_does_not_stop_the_gang_binding() -> None:
    state = (
        cluster()
        .node("n1", gpus=2)
        .node("n2", gpus=1)
        .queue("q")
        .job("old", queue="q", gpus=1, status=S.RELEASING, node="n2")
        .job("j", queue="q", gpus=1, pods=3, min_member=2)
        .build()
    )
    plan = run_cycle(state)
    assert binds(plan) == {"j-0": "n1", "j-1": "n1"}
    assert [(b.task, b.node) for b in plan.pipelined] == [("j-2", "n2")]


# ------------------------------------------------------ readiness (§8.1) and subgroup order (§5.4)


def test_gated_pods_do_not_make_a_gang_ready() -> None:
    state = (
        cluster()
        .node("n1", gpus=8)
        .queue("q")
        .job("j", queue="q", gpus=1, pods=1, min_member=2)
        .task(status=S.GATED)
        .build()
    )
    plan = run_cycle(state)
    assert plan.binds == []
    assert "not enough pods" in plan.pending_reasons["j"].message


def test_optional_member_with_fewer_pods_grows_first() -> None:
    state = tree_state({"a": (1, 2), "b": (1, 1)}, {"a": 0, "b": 0})
    assert names_to_allocate(open_session(state), "j") == ["b-0"]


def test_required_member_grows_before_an_optional_one() -> None:
    state = tree_state({"a-optional": (1, 0), "b-required": (1, 1)}, {"a-optional": 0, "b-required": 1})
    assert names_to_allocate(open_session(state), "j") == ["b-required-0"]


# ---------------------------------------------------------------------- a lone pod set, the short way


@pytest.mark.parametrize("min_subgroups", [None, 0, 1, 2])
@pytest.mark.parametrize(
    ("pending", "running", "minimum"), [(3, 0, 2), (2, 2, 2), (1, 3, 2), (0, 2, 1), (2, 0, 0)]
)
def test_a_lone_pod_set_takes_what_the_walk_over_members_takes(
    min_subgroups: int | None, pending: int, running: int, minimum: int
) -> None:
    """`gang._lone_pod_set` (a group of one pod set, most jobs) answers as `gang._walk` does,
    with and without evicted tasks that may be placed again. A minimum of two members, which a
    snapshot turns away for a group of one, is set on the session's job."""
    session = open_session(tree_state({"a": (pending, running)}, {"a": minimum}))
    job = session.jobs[0]
    job.root.min_subgroups = min_subgroups
    for extra in (gang.NO_EXTRA, frozenset(t.uid for t in job.tasks)):
        assert gang._collect(session, job.root, extra) == gang._walk(session, job.root, extra)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios)
def test_lone_pod_sets_take_what_the_walk_takes_after_a_cycle(drawn: Drawn) -> None:
    """After whole cycles on random clusters (pods pending, placed, pipelined, evicted), every job's
    collection by the short way is the walk's."""
    nodes, queues, first, later = drawn
    session = full_cycle(with_arrivals(running_cluster(nodes, queues, first), later)).session
    releasing = frozenset(t.uid for job in session.jobs for t in job.tasks if t.status == S.RELEASING)
    for job in session.jobs:
        for extra in (gang.NO_EXTRA, releasing):
            assert gang._collect(session, job.root, extra) == gang._walk(session, job.root, extra)
