"""Node bookkeeping (spec §1.4) and shared-GPU groups (§17, invariant §22.30)."""

from __future__ import annotations

import numpy as np
import pytest
from builders import cluster, find_task, open_session

from kai_ray.engine.session import Session
from kai_ray.engine.statement import Statement
from kai_ray.model.objects import TaskStatus
from kai_ray.model.resources import CPU, GPU, PODS

pytestmark = pytest.mark.unit

S = TaskStatus


def gpus(session: Session, node: str) -> tuple[float, float]:
    """(idle, releasing) whole GPUs of a node."""
    row = session.nodes.table.index[node]
    return float(session.nodes.idle[row, GPU]), float(session.nodes.releasing[row, GPU])


# ---------------------------------------------------------------------- whole GPUs, from the snapshot


@pytest.mark.parametrize(
    ("status", "idle", "releasing"),
    [
        (S.RUNNING, 6, 0),
        (S.BOUND, 6, 0),
        (S.BINDING, 6, 0),
        (S.RELEASING, 6, 2),  # Releasing += r, Idle -= r
        (S.STUCK_IN_RELEASING, 6, 0),  # like running: Idle -= r, not usable for pipelining
        (S.PIPELINED, 8, -2),  # a pipelined task consumes what is being released
        (S.PENDING, 8, 0),  # a pending pod with a nodeName holds nothing
        (S.SUCCEEDED, 8, 0),
        (S.FAILED, 8, 0),
    ],
)
def test_each_status_charges_the_node_as_section_1_4_says(status: S, idle: float, releasing: float) -> None:
    state = (
        cluster().node("n1", gpus=8).queue("q").job("j", queue="q", gpus=2, status=status, node="n1").build()
    )
    session = open_session(state)
    assert gpus(session, "n1") == (idle, releasing)


def test_non_gpu_resources_and_pod_slots_follow_the_same_rules() -> None:
    state = (
        cluster()
        .node("n1", gpus=4, cpu_millis=8000, max_pods=10)
        .queue("q")
        .job("run", queue="q", cpu_millis=3000, status=S.RUNNING, node="n1")
        .job("rel", queue="q", cpu_millis=1000, status=S.RELEASING, node="n1")
        .build()
    )
    session = open_session(state)
    assert session.nodes.idle[0, CPU] == 4000
    assert session.nodes.releasing[0, CPU] == 1000
    assert session.nodes.idle[0, PODS] == 8
    assert session.nodes.releasing[0, PODS] == 1


def test_releasing_capacity_is_non_allocated_and_pipelining_takes_it() -> None:
    state = (
        cluster()
        .node("n1", gpus=6)
        .queue("q")
        .job("full", queue="q", gpus=2, pods=2, status=S.RUNNING, node="n1")
        .job("leaving", queue="q", gpus=2, status=S.RELEASING, node="n1")
        .job("next", queue="q", gpus=1, pods=2)
        .build()
    )
    session = open_session(state)
    assert gpus(session, "n1") == (0, 2)
    assert session.fits_idle(find_task(session, "next-0")).tolist() == [False]
    assert session.fits_with_releasing(find_task(session, "next-0")).tolist() == [True]
    statement = Statement(session)
    statement.pipeline(find_task(session, "next-0"), 0)
    assert gpus(session, "n1") == (0, 1)
    statement.pipeline(find_task(session, "next-1"), 0)
    assert gpus(session, "n1") == (0, 0)


def test_evicting_moves_resources_from_used_to_releasing() -> None:
    state = (
        cluster()
        .node("n1", gpus=8)
        .queue("q")
        .job("j", queue="q", gpus=3, status=S.RUNNING, node="n1")
        .build()
    )
    session = open_session(state)
    assert gpus(session, "n1") == (5, 0)
    Statement(session).evict(find_task(session, "j-0"))
    assert gpus(session, "n1") == (5, 3)
    assert np.array_equal(session.free_gpus(), [8])


# ---------------------------------------------------------------------- shared GPUs (§17)


def shared_node_session() -> Session:
    state = (
        cluster()
        .node("n1", gpus=2, gpu_memory_mib=40_000)
        .queue("q")
        .job("a", queue="q", gpus=0.5)
        .job("b", queue="q", gpus=0.25)
        .job("c", queue="q", gpu_memory_mib=10_000)
        .job("whole", queue="q", gpus=1)
        .build()
    )
    return open_session(state)


def test_first_fractional_pod_takes_a_whole_gpu_and_the_second_joins_its_group() -> None:
    session = shared_node_session()
    statement = Statement(session)
    assert gpus(session, "n1") == (2, 0)

    statement.allocate(find_task(session, "a-0"), 0, ("g1",))
    assert gpus(session, "n1") == (1, 0)
    assert set(session.nodes.groups[0]) == {"g1"}

    statement.allocate(find_task(session, "b-0"), 0, ("g1",))
    assert gpus(session, "n1") == (1, 0)  # joining an existing group takes no new device
    group = session.nodes.groups[0]["g1"]
    assert group.held_memory == 30_000
    assert group.idle_memory == 10_000

    statement.allocate(find_task(session, "c-0"), 0, ("g1",))
    assert group.idle_memory == 0
    assert session.nodes.fitting_groups(0, 1.0) == []


def test_group_returns_its_gpu_to_idle_when_the_last_pod_leaves() -> None:
    session = shared_node_session()
    statement = Statement(session)
    statement.allocate(find_task(session, "a-0"), 0, ("g1",))
    checkpoint = statement.checkpoint()
    statement.allocate(find_task(session, "b-0"), 0, ("g1",))

    statement.rollback(checkpoint)
    assert gpus(session, "n1") == (1, 0)
    assert set(session.nodes.groups[0]) == {"g1"}

    statement.discard()
    assert gpus(session, "n1") == (2, 0)
    assert session.nodes.groups[0] == {}


def test_group_counts_as_one_releasing_gpu_only_when_all_its_pods_release() -> None:
    state = (
        cluster()
        .node("n1", gpus=2, gpu_memory_mib=40_000)
        .queue("q")
        .job("a", queue="q", gpus=0.5, status=S.RUNNING, node="n1", gpu_groups=("g1",))
        .job("b", queue="q", gpus=0.25, status=S.RUNNING, node="n1", gpu_groups=("g1",))
        .build()
    )
    session = open_session(state)
    assert gpus(session, "n1") == (1, 0)
    statement = Statement(session)

    statement.evict(find_task(session, "a-0"))
    assert gpus(session, "n1") == (1, 0)
    group = session.nodes.groups[0]["g1"]
    assert not group.fully_releasing
    assert group.free_memory_after_release == 30_000  # 40,000 - the 10,000 b still holds
    assert group.idle_memory == 10_000  # a's 20,000 are not usable until a is gone

    statement.evict(find_task(session, "b-0"))
    assert gpus(session, "n1") == (1, 1)
    assert group.fully_releasing
    assert session.nodes.fitting_groups(0, 1.0) == []  # fully releasing groups take no new pods


def test_pipelining_a_fraction_onto_a_releasing_gpu_takes_it_from_releasing() -> None:
    state = (
        cluster()
        .node("n1", gpus=2, gpu_memory_mib=40_000)
        .queue("q")
        .job("old", queue="q", gpus=0.5, status=S.RELEASING, node="n1", gpu_groups=("g1",))
        .job("new", queue="q", gpus=0.5)
        .build()
    )
    session = open_session(state)
    assert gpus(session, "n1") == (1, 1)
    statement = Statement(session)
    statement.pipeline(find_task(session, "new-0"), 0, ("g2",))
    assert gpus(session, "n1") == (1, 0)


def test_whole_gpu_pipelined_onto_releasing_gpu() -> None:
    state = (
        cluster()
        .node("n1", gpus=2)
        .queue("q")
        .job("busy", queue="q", gpus=1, status=S.RUNNING, node="n1")
        .job("leaving", queue="q", gpus=1, status=S.RELEASING, node="n1")
        .job("next", queue="q", gpus=1)
        .build()
    )
    session = open_session(state)
    assert gpus(session, "n1") == (0, 1)
    Statement(session).pipeline(find_task(session, "next-0"), 0)
    assert gpus(session, "n1") == (0, 0)


def test_fit_checks_count_shared_groups_and_whole_devices() -> None:
    state = (
        cluster()
        .node("n1", gpus=1, gpu_memory_mib=40_000)
        .node("n2", gpus=1, gpu_memory_mib=40_000)
        .queue("q")
        .job("held", queue="q", gpus=0.75, status=S.RUNNING, node="n1", gpu_groups=("g1",))
        .job("going", queue="q", gpus=0.5, status=S.RELEASING, node="n2", gpu_groups=("g2",))
        .job("small", queue="q", gpus=0.25)
        .job("half", queue="q", gpus=0.5)
        .build()
    )
    session = open_session(state)
    small, half = find_task(session, "small-0"), find_task(session, "half-0")
    # n1: its only GPU is a group with 10,000 MiB free; n2: its only GPU is releasing
    assert session.fits_idle(small).tolist() == [True, False]
    assert session.fits_with_releasing(small).tolist() == [True, True]
    assert session.fits_idle(half).tolist() == [False, False]
    assert session.fits_with_releasing(half).tolist() == [False, True]
