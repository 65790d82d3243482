"""Statements (spec §3, invariant §22.3): every virtual operation can be undone exactly.

Each test takes a full copy of the session's mutable state (node idle/releasing
vectors, shared-GPU groups, queue accounting, task placements), runs
operations, undoes them and compares with `np.array_equal`, not approximately.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np
import pytest
from builders import cluster, find_task, open_session

from kai_ray.engine.nodes import GpuGroup
from kai_ray.engine.session import Session
from kai_ray.engine.statement import Statement
from kai_ray.model.objects import TaskStatus
from kai_ray.model.resources import GPU

pytestmark = pytest.mark.unit

RUNNING, RELEASING, PIPELINED = TaskStatus.RUNNING, TaskStatus.RELEASING, TaskStatus.PIPELINED


@dataclass
class Frozen:
    idle: np.ndarray
    releasing: np.ndarray
    groups: list[dict[str, GpuGroup]]
    allocated: np.ndarray
    allocated_non_preemptible: np.ndarray
    tasks: dict[str, tuple[TaskStatus, int | None, tuple[str, ...]]]


def freeze(session: Session) -> Frozen:
    return Frozen(
        idle=session.nodes.idle.copy(),
        releasing=session.nodes.releasing.copy(),
        groups=copy.deepcopy(session.nodes.groups),
        allocated=session.queues.allocated.copy(),
        allocated_non_preemptible=session.queues.allocated_non_preemptible.copy(),
        tasks={t.name: (t.status, t.node, t.groups) for job in session.jobs for t in job.tasks},
    )


def assert_same(actual: Frozen, expected: Frozen) -> None:
    assert np.array_equal(actual.idle, expected.idle)
    assert np.array_equal(actual.releasing, expected.releasing)
    assert actual.groups == expected.groups
    assert np.array_equal(actual.allocated, expected.allocated)
    assert np.array_equal(actual.allocated_non_preemptible, expected.allocated_non_preemptible)
    assert actual.tasks == expected.tasks


def busy_cluster() -> Session:
    """n1: 4 idle GPUs (40 GB each). n2: 4 GPUs, 2 running, 1 releasing. Pending whole and shared work."""
    state = (
        cluster()
        .node("n1", gpus=4, gpu_memory_mib=40_000)
        .node("n2", gpus=4, gpu_memory_mib=40_000)
        .queue("train", parent="org")
        .queue("serve", parent="org")
        .queue("org")
        .job("running", queue="train", gpus=1, pods=2, status=RUNNING, node="n2")
        .job("leaving", queue="train", gpus=1, pods=1, status=RELEASING, node="n2")
        .job("pending", queue="train", gpus=1, pods=3)
        .job("shared", queue="serve", gpus=0.5, pods=2, priority=125)
        .build()
    )
    return open_session(state)


def test_allocate_pipeline_evict_then_discard_restores_everything() -> None:
    session = busy_cluster()
    before = freeze(session)
    n1, n2 = session.nodes.table.index["n1"], session.nodes.table.index["n2"]
    statement = Statement(session)

    statement.allocate(find_task(session, "pending-0"), n1)
    statement.pipeline(find_task(session, "pending-1"), n2)
    statement.pipeline(find_task(session, "pending-2"), n2)
    statement.evict(find_task(session, "running-0"))
    group = session.nodes.new_group_id(n1)
    statement.allocate(find_task(session, "shared-0"), n1, (group,))
    statement.allocate(find_task(session, "shared-1"), n1, (group,))

    during = freeze(session)
    assert not np.array_equal(during.idle, before.idle)
    assert not np.array_equal(during.releasing, before.releasing)
    assert during.groups != before.groups
    assert not np.array_equal(during.allocated, before.allocated)
    assert not np.array_equal(during.allocated_non_preemptible, before.allocated_non_preemptible)

    statement.discard()

    assert_same(freeze(session), before)
    assert statement.operations == []


def test_operations_move_node_and_queue_accounting_as_spec_says() -> None:
    session = busy_cluster()
    n1, n2 = session.nodes.table.index["n1"], session.nodes.table.index["n2"]
    train, org = session.queues.index["train"], session.queues.index["org"]
    assert session.nodes.idle[n2, GPU] == 1 and session.nodes.releasing[n2, GPU] == 1
    assert session.queues.allocated[train, 2] == 2  # the releasing pod is not charged (§6.1)
    statement = Statement(session)

    statement.allocate(find_task(session, "pending-0"), n1)
    assert session.nodes.idle[n1, GPU] == 3
    assert session.queues.allocated[train, 2] == 3 and session.queues.allocated[org, 2] == 3

    statement.pipeline(find_task(session, "pending-1"), n2)
    assert session.nodes.idle[n2, GPU] == 1 and session.nodes.releasing[n2, GPU] == 0
    assert session.queues.allocated[train, 2] == 4  # pipeline counts as allocate in-session

    statement.evict(find_task(session, "running-0"))
    assert find_task(session, "running-0").status == RELEASING
    assert find_task(session, "running-0").node == n2
    assert session.nodes.idle[n2, GPU] == 1 and session.nodes.releasing[n2, GPU] == 1
    assert session.queues.allocated[train, 2] == 3 and session.queues.allocated[org, 2] == 3


def test_rollback_to_checkpoint_undoes_only_later_operations() -> None:
    session = busy_cluster()
    n1 = session.nodes.table.index["n1"]
    statement = Statement(session)
    statement.allocate(find_task(session, "pending-0"), n1)
    kept = freeze(session)
    checkpoint = statement.checkpoint()

    statement.allocate(find_task(session, "pending-1"), n1)
    statement.evict(find_task(session, "running-1"))
    group = session.nodes.new_group_id(n1)
    statement.allocate(find_task(session, "shared-0"), n1, (group,))
    assert statement.checkpoint() == checkpoint + 3

    statement.rollback(checkpoint)

    assert_same(freeze(session), kept)
    assert find_task(session, "pending-0").status == TaskStatus.ALLOCATED
    assert find_task(session, "pending-1").status == TaskStatus.PENDING
    assert find_task(session, "running-1").status == RUNNING
    assert len(statement.operations) == checkpoint


def test_nested_checkpoints_roll_back_in_reverse_order() -> None:
    session = busy_cluster()
    n1 = session.nodes.table.index["n1"]
    start = freeze(session)
    statement = Statement(session)
    outer = statement.checkpoint()
    statement.allocate(find_task(session, "pending-0"), n1)
    middle_state = freeze(session)
    inner = statement.checkpoint()
    statement.allocate(find_task(session, "pending-1"), n1)

    statement.rollback(inner)
    assert_same(freeze(session), middle_state)
    statement.rollback(outer)
    assert_same(freeze(session), start)


def test_convert_allocated_to_pipelined_keeps_nodes_and_charges_but_nothing_binds() -> None:
    session = busy_cluster()
    n1 = session.nodes.table.index["n1"]
    train = session.queues.index["train"]
    before = freeze(session)
    statement = Statement(session)
    tasks = [find_task(session, f"pending-{i}") for i in range(2)]
    for task in tasks:
        statement.allocate(task, n1)
    after_allocate = freeze(session)

    statement.convert_allocated_to_pipelined(tasks)

    assert [(t.status, t.node) for t in tasks] == [(PIPELINED, n1), (PIPELINED, n1)]
    # the node's non-allocated capacity (idle + releasing, §1.4) is unchanged by the conversion
    assert np.array_equal(
        session.nodes.idle[n1] + session.nodes.releasing[n1],
        after_allocate.idle[n1] + after_allocate.releasing[n1],
    )
    # queue accounting counts pipelined work like allocated work (§6.1)
    assert np.array_equal(session.queues.allocated, after_allocate.allocated)
    assert session.queues.allocated[train, 2] == 4

    statement.discard()
    assert_same(freeze(session), before)


def test_convert_leaves_tasks_that_were_not_allocated_alone() -> None:
    session = busy_cluster()
    n2 = session.nodes.table.index["n2"]
    statement = Statement(session)
    running = find_task(session, "running-0")
    statement.pipeline(find_task(session, "pending-0"), n2)
    operations = statement.checkpoint()

    statement.convert_allocated_to_pipelined([running, find_task(session, "pending-0")])

    assert running.status == RUNNING
    assert statement.checkpoint() == operations


def test_shared_gpu_groups_come_back_after_rollback_of_a_join() -> None:
    state = (
        cluster()
        .node("n1", gpus=2, gpu_memory_mib=40_000)
        .queue("q")
        .job("old", queue="q", gpus=0.5, status=RUNNING, node="n1", gpu_groups=("g1",))
        .job("new", queue="q", gpus=0.25)
        .build()
    )
    session = open_session(state)
    before = freeze(session)
    statement = Statement(session)

    statement.allocate(find_task(session, "new-0"), 0, ("g1",))
    assert len(session.nodes.groups[0]["g1"].members) == 2
    statement.evict(find_task(session, "old-0"))
    statement.discard()

    assert_same(freeze(session), before)


def test_rollback_of_evicting_a_snapshot_pipelined_task_restores_queue_accounting() -> None:
    """Regression: the undo used to re-charge the queue for a pod that was Pipelined in the snapshot."""
    state = (
        cluster()
        .node("n1", gpus=4)
        .queue("q")
        .job("running", queue="q", gpus=1, pods=2, status=RUNNING, node="n1")
        .job("waiting", queue="q", gpus=1, status=PIPELINED, node="n1")
        .build()
    )
    session = open_session(state)
    before = freeze(session)
    assert session.queues.allocated[0, 2] == 2  # Pipelined tasks in the snapshot are not charged (§6.1)
    statement = Statement(session)

    statement.evict(find_task(session, "waiting-0"))
    statement.discard()

    assert_same(freeze(session), before)


def test_pipeline_back_onto_own_node_is_an_un_evict() -> None:
    """§3: re-placing an evicted pod exactly where it was undoes the eviction (it used to free its GPU)."""
    state = (
        cluster()
        .node("n1", gpus=2)
        .queue("q")
        .job("victim", queue="q", gpus=1, status=RUNNING, node="n1")
        .build()
    )
    session = open_session(state)
    before = freeze(session)
    victim = find_task(session, "victim-0")
    statement = Statement(session)

    statement.evict(victim)
    statement.pipeline(victim, 0)

    assert victim.status == RUNNING
    assert_same(freeze(session), before)


def test_undoing_a_later_actions_moves_leaves_a_placement_credited_to_the_action_that_made_it() -> None:
    """A victim simulation evicts and re-places a task allocate placed, then gives up: the plan
    must still say allocate placed it (it said reclaim, for jobs reclaim never touched)."""
    session = busy_cluster()
    n1, n2 = session.nodes.table.index["n1"], session.nodes.table.index["n2"]
    task = find_task(session, "pending-0")
    session.current_action = "allocate"
    placed = Statement(session)
    placed.allocate(task, n1)
    placed.commit()
    session.current_action = "reclaim"
    simulated = Statement(session)
    simulated.evict(task)
    simulated.pipeline(task, n2)
    simulated.discard()
    assert session.placed_by[task.uid] == "allocate"
    undone = Statement(session)
    undone.evict(task)
    undone.pipeline(task, n1)  # back where it was: the eviction is undone, not a new placement
    assert (task.status, session.placed_by[task.uid]) == (TaskStatus.ALLOCATED, "allocate")
    never = find_task(session, "pending-1")
    tried = Statement(session)
    tried.allocate(never, n1)
    tried.discard()
    assert never.uid not in session.placed_by


def test_a_victim_moved_to_another_node_stays_releasing_where_it_was_until_undone() -> None:
    """As KAI: the evicted pod still runs on its old node, so that node offers its GPU to
    pipelined pods only (releasing), never as idle; undoing the move books it exactly as before."""
    session = busy_cluster()
    before = freeze(session)
    n1, n2 = session.nodes.table.index["n1"], session.nodes.table.index["n2"]
    victim = find_task(session, "running-0")
    statement = Statement(session)
    statement.evict(victim)
    evicted = freeze(session)
    statement.pipeline(victim, n1)
    moved = freeze(session)
    assert np.array_equal(moved.idle[n2], evicted.idle[n2])
    assert np.array_equal(moved.releasing[n2], evicted.releasing[n2])
    assert moved.releasing[n2][GPU] == before.releasing[n2][GPU] + 1
    assert moved.releasing[n1][GPU] == before.releasing[n1][GPU] - 1  # the pipelined pod waits on n1
    statement.discard()
    assert_same(freeze(session), before)
    assert session.nodes.left_behind == {}
