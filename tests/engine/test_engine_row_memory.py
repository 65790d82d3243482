"""The node finder's memory of row states scores a row exactly as scoring it afresh does.

A whole-GPU pod's score from our own node plugins reads only a row's allocatable, idle and
releasing vectors and the node filters, so the node finder scores each such row state once
per pod shape (`NodeFinder._remembering`), and scores the states a row filling with such pods
goes through ahead of it (`NodeFinder._scored_ahead`). These tests run whole cycles with the memory
and without it and ask for the same plan, check every remembered state against scoring a row in
it, and check where the memory must stay off.
"""

from __future__ import annotations

from unittest import mock

import numpy as np
import pytest
from builders import ClusterBuilder, cluster, open_session
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from random_clusters import (
    JobDraw,
    QueueDraw,
    full_cycle,
    job_draws,
    running_cluster,
    scenarios,
    with_arrivals,
)

from kai_ray.distributed.kernels import NodeRanking
from kai_ray.engine.cycle import run_actions
from kai_ray.engine.jobs import Task
from kai_ray.engine.node_finder import NodeFinder, forget_shared_row_scores, score_rows, shared_row_scores
from kai_ray.engine.plugins.registry import PLUGINS
from kai_ray.engine.plugins.scoring import NodePlacementPlugin
from kai_ray.engine.session import Session

pytestmark = pytest.mark.unit


@pytest.fixture(autouse=True)
def no_shared_row_scores() -> None:
    """Each test starts from no row state remembered by an earlier session (`shared_row_scores`)."""
    forget_shared_row_scores()


Drawn = tuple[list[int], list[QueueDraw], list[JobDraw], list[JobDraw]]

alike_nodes = st.tuples(
    st.lists(st.sampled_from([4, 8]), min_size=2, max_size=6),
    st.lists(
        st.builds(QueueDraw, quota=st.just(-1.0), limit=st.just(-1.0), weight=st.just(1.0)),
        min_size=3,
        max_size=3,
    ),
    st.lists(job_draws, min_size=2, max_size=10),
    st.lists(job_draws, min_size=1, max_size=8),
)
"""Nodes of two sizes only, so rows often reach a state another row was in."""


def whole_plan(drawn: Drawn, *, forget: bool = True) -> tuple[object, ...]:
    """`forget`: start from no row state remembered by an earlier session."""
    if forget:
        forget_shared_row_scores()
    nodes, queues, first, later = drawn
    plan = full_cycle(with_arrivals(running_cluster(nodes, queues, first), later)).plan
    return (plan.binds, plan.pipelined, plan.evictions, plan.pending_reasons, plan.tasks)


def without_memory() -> mock._patch[object]:
    return mock.patch.object(NodeFinder, "_remembering", lambda self, frontier, task: frontier)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(scenarios, alike_nodes))
def test_remembered_row_scores_give_the_plan_fresh_scores_give(drawn: Drawn) -> None:
    with without_memory():
        fresh = whole_plan(drawn)
    assert whole_plan(drawn) == fresh


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(scenarios, alike_nodes))
def test_every_remembered_state_scores_as_a_row_in_it_does(drawn: Drawn) -> None:
    """After a whole cycle, each state a shape's memory holds, those scored ahead of any row
    reaching them included (`NodeFinder._scored_ahead`), has the (feasible, score) that scoring a
    row put in that state gives."""
    forget_shared_row_scores()  # only states of rows of this cluster, found below by allocatable
    nodes, queues, first, later = drawn
    session = full_cycle(with_arrivals(running_cluster(nodes, queues, first), later)).session
    finder = session.node_finder
    by_key = {
        finder.key_of(task): task
        for job in session.jobs
        for task in job.tasks
        if task.facts.shape_key is not None
    }
    allocatable = [row.tobytes() for row in session.nodes.table.allocatable]
    for key, frontier in finder._frontiers.items():
        if frontier.scored is None:
            continue
        assert frontier.passes_filters is not None
        task = by_key[key]
        for (passes, row_allocatable, idle, releasing), remembered in frontier.scored.items():
            row = next(
                r
                for r in range(len(allocatable))
                if frontier.passes_filters[r] == passes and allocatable[r] == row_allocatable
            )
            session.nodes.idle_rows[row] = np.frombuffer(idle).tolist()
            session.nodes.releasing_rows[row] = np.frombuffer(releasing).tolist()
            session.nodes.changed_rows.append(row)
            feasible, scores = score_rows(session, task, np.array([row]))
            assert (bool(feasible[0]), float(scores[0])) == remembered


def test_the_first_row_to_fill_scores_the_states_ahead_of_it() -> None:
    """Eight alike nodes: the full scan, then one pass for the states the first row goes through."""
    session = open_session(eight_alike_nodes().build())
    with mock.patch("kai_ray.engine.node_finder.score_rows", wraps=score_rows) as scored:
        finder = session.node_finder
        for pod in session.jobs[0].tasks:
            row = finder.best(pod)
            assert row is not None
            take(session, row, pod)
            session.nodes.changed_rows.append(row)
    assert scored.call_count == 1  # the full scan; the states after it were scored ahead
    frontier = finder._frontiers[finder.key_of(session.jobs[0].tasks[0])]
    assert frontier.scored is not None and len(frontier.scored) == 9  # 8 free GPUs (the scan) to 0


def take(session: Session, row: int, pod: Task) -> None:
    """Take the pod's request from the row's idle floats, as booking it there would."""
    idle = session.nodes.idle_rows[row]
    session.nodes.idle_rows[row] = [
        free - wanted for free, wanted in zip(idle, pod.request.tolist(), strict=True)
    ]


def eight_alike_nodes() -> ClusterBuilder:
    builder = cluster()
    for index in range(8):
        builder.node(f"n{index}", gpus=8)
    return builder.queue("q").job("gang", queue="q", gpus=1.0, pods=20, min_member=20)


def test_rows_in_a_state_seen_before_are_not_scored_again() -> None:
    """Twenty pods on eight alike nodes: each row state is scored once, and as scoring it now gives."""
    session = open_session(eight_alike_nodes().build())
    task = session.jobs[0].tasks[0]
    finder = session.node_finder
    chosen = []
    for pod in session.jobs[0].tasks:
        row = finder.best(pod)
        assert row is not None
        chosen.append(row)
        take(session, row, pod)
        session.nodes.changed_rows.append(row)
    assert finder.best(task) == 2  # takes in the last placement
    frontier = finder._frontiers[finder.key_of(task)]
    assert frontier.scored is not None
    assert chosen == [0] * 8 + [1] * 8 + [2] * 4
    assert len(frontier.scored) == 9  # 8 free GPUs (the full scan) down to 0
    for row in (0, 2, 3):
        feasible, scores = score_rows(session, task, np.array([row]))
        assert row in frontier.current or not feasible[0]
        if feasible[0]:
            assert frontier.current[row] == -float(scores[0])


def test_shared_gpu_pods_are_scored_afresh() -> None:
    """Shared GPU groups change a row's score without changing its vectors."""
    state = (
        cluster().node("n0", gpus=2).node("n1", gpus=2).queue("q").job("half", queue="q", gpus=0.5).build()
    )
    session = open_session(state)
    task = session.jobs[0].tasks[0]
    finder = session.node_finder
    assert next(finder.ordered(task), None) is not None
    assert finder._frontiers[finder.key_of(task)].scored is None


def test_a_subclassed_node_plugin_turns_the_memory_off() -> None:
    """A plugin of ours with a changed score may read more of a row than its vectors."""

    class SwappedPlacement(NodePlacementPlugin):
        """Scores as ours does: only its class tells the node finder it might not."""

    with mock.patch.dict(PLUGINS, {"nodeplacement": SwappedPlacement}):
        session = open_session(eight_alike_nodes().build())
    task = session.jobs[0].tasks[0]
    finder = session.node_finder
    assert finder.best(task) == 0
    assert finder._frontiers[finder.key_of(task)].scored is None


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(scenarios, alike_nodes), st.one_of(scenarios, alike_nodes))
def test_row_states_remembered_by_earlier_sessions_give_the_plan_fresh_scores_give(
    drawn: Drawn, earlier: Drawn
) -> None:
    """What sessions remember across cycles (`shared_row_scores`) changes no plan: a cluster's
    cycle after another cluster's, and after its own, plans as with no memory at all."""
    with without_memory():
        fresh = whole_plan(drawn)
    whole_plan(earlier)
    assert whole_plan(drawn, forget=False) == fresh
    assert whole_plan(drawn, forget=False) == fresh


def test_a_cycle_like_the_last_scores_no_row() -> None:
    """The second session over the same cluster reads every row state the first one scored."""
    state = eight_alike_nodes().build()
    first = run_actions(open_session(state))
    with (
        mock.patch("kai_ray.engine.node_finder.score_rows", wraps=score_rows) as scanned,
        mock.patch.object(NodeFinder, "_scored_ahead", side_effect=AssertionError("scored")) as ahead,
    ):
        again = run_actions(open_session(state))
    assert scanned.call_count == 0 and ahead.call_count == 0
    assert (again.binds, again.pipelined, again.tasks) == (first.binds, first.pipelined, first.tasks)


def test_the_shared_memory_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """A shape's memory at its bound starts again empty, and so does the set of shapes."""
    monkeypatch.setattr("kai_ray.engine.node_finder.SHARED_STATES", 4)
    monkeypatch.setattr("kai_ray.engine.node_finder.SHARED_SHAPES", 1)
    state = eight_alike_nodes().build()
    plan = run_actions(open_session(state))
    session = open_session(state)
    assert run_actions(session).binds == plan.binds
    frontier = session.node_finder._frontiers[session.node_finder.key_of(session.jobs[0].tasks[0])]
    assert frontier.scored is not None and len(frontier.scored) <= 4
    first = shared_row_scores(NodeRanking(), b"a")
    assert shared_row_scores(NodeRanking(), b"a") is first
    shared_row_scores(NodeRanking(), b"b")
    assert shared_row_scores(NodeRanking(), b"a") is not first
