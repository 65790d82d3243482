"""A reclaim's victim simulation orders every job with pending pods, as KAI's does (issue 13).

KAI simulates an eviction by allocating, in queue order, every job that has pending pods plus
the victims and the reclaimer, placing only the victims and the reclaimer: the others still
count for which queue goes first.  Ordering only the victims and the reclaimer evicted a job
that the next allocate gave its GPU back to, and the reclaim after it evicted again, every
cycle.
"""

from __future__ import annotations

import pytest
from builders import cluster, config

from kai_ray.cluster.sim.simulator import SimulatedCluster
from kai_ray.engine.cycle import schedule
from kai_ray.model.objects import ClusterState, TaskStatus
from kai_ray.model.snapshot import compile_snapshot

pytestmark = pytest.mark.unit

RUNNING = TaskStatus.RUNNING


def owner_behind_a_job_too_big(*, big_gpus: float) -> ClusterState:
    """`owner` (under its share) waits with a job first in line that asks for `big_gpus`, then a
    one-GPU job; `borrower`, over its share, runs two preemptible one-GPU jobs on the only node."""
    return (
        cluster()
        .node("n1", gpus=2)
        .queue("owner", gpu_quota=1)
        .queue("borrower", gpu_quota=1)
        .job("b1", queue="borrower", gpus=1, status=RUNNING, node="n1")
        .job("b2", queue="borrower", gpus=1, status=RUNNING, node="n1")
        .job("big", queue="owner", gpus=big_gpus, created=0.0)
        .job("small", queue="owner", gpus=1, created=1.0)
        .build()
    )


def test_no_reclaim_when_the_reclaimers_queue_would_give_the_gpu_back_to_the_victim() -> None:
    """With `big` at the head of `owner`, the victim's queue goes first in the simulation, takes
    its GPU back, and `small` finds no room: KAI evicts nothing, cycle after cycle."""
    sim = SimulatedCluster(owner_behind_a_job_too_big(big_gpus=3), config(actions=("allocate", "reclaim")))
    results = sim.run(4)
    assert [result.plan.evictions for result in results] == [[], [], [], []]
    assert all(not result.plan.pipelined and not result.plan.binds for result in results)


def test_the_same_reclaim_happens_when_nothing_waits_ahead_of_the_reclaimer() -> None:
    """Control: with `big` small enough to be an ordinary reclaimer, owner's queue goes first and
    the over-share borrower loses a job."""
    state = owner_behind_a_job_too_big(big_gpus=1)
    plan = schedule(compile_snapshot(state), config(actions=("allocate", "reclaim")))
    assert [(eviction.job, eviction.node) for eviction in plan.evictions] == [("b2", "n1")]
