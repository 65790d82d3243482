"""A part's replica kept in step by deltas: only what changed is sent, and the copy answers alike.

The replica is fed over the wire in production (Ray pickles each delta), so the tests pickle the
deltas too: a replica must then hold copies, and positions into its own previous job list must
name the very jobs the driver's snapshot has at those positions.
"""

from __future__ import annotations

import pickle
import subprocess
import sys

import pytest
from builders import config

from kai_ray.bench.shapes import build_shape, gpu_job
from kai_ray.model.objects import ClusterState, JobSpec
from kai_ray.model.snapshot import Snapshot, SnapshotCompiler
from kai_ray.split.part import PlacedPods
from kai_ray.split.replica import Replica, SnapshotDelta, SnapshotFeed, split_layout

pytestmark = pytest.mark.unit

SHAPE = "kai-full-cycle-16x60"
"""Half-busy: running pods (held on other parts' nodes too) and pending jobs."""
PARTS = 2


def over_the_wire(delta: SnapshotDelta) -> SnapshotDelta:
    copied = pickle.loads(pickle.dumps(delta))
    assert isinstance(copied, SnapshotDelta)
    return copied


def state() -> ClusterState:
    return build_shape(SHAPE).state


def job_keys(snapshot: Snapshot | None) -> list[str]:
    assert snapshot is not None
    return [job.key for job in snapshot.jobs]


def answers(replica: Replica, token: int) -> list[tuple[int, int, PlacedPods]]:
    """Each part's answer, what it places (not how long it took)."""
    found = [replica.answer(token, part, PARTS, config(), None) for part in range(PARTS)]
    return [(answer.part, answer.token, answer.placed) for answer in found]


def test_the_same_snapshot_is_sent_once() -> None:
    feed = SnapshotFeed()
    snapshot = SnapshotCompiler().compile(state())
    first = feed.delta(snapshot)
    assert first is not None and first.token == 1
    assert feed.delta(snapshot) is None
    assert feed.token == 1
    assert feed.current is snapshot


def test_the_first_delta_carries_everything() -> None:
    snapshot = SnapshotCompiler().compile(state())
    delta = SnapshotFeed().delta(snapshot)
    assert delta is not None
    assert delta.nodes is snapshot.nodes
    assert delta.queues == (snapshot.queues, snapshot.children)
    assert delta.topologies == snapshot.topologies
    assert delta.jobs == snapshot.jobs
    assert all(isinstance(job, JobSpec) for job in delta.jobs)
    assert (delta.held, delta.now) == (snapshot.held, snapshot.now)


def test_a_snapshot_with_one_new_job_sends_the_others_by_position() -> None:
    cluster = state()
    compiler = SnapshotCompiler()
    feed = SnapshotFeed()
    first = compiler.compile(cluster)
    assert feed.delta(first) is not None
    cluster.jobs.append(gpu_job("late-job", "queue-0", 0, pods=2))
    second = compiler.compile(cluster)
    delta = feed.delta(second)
    assert delta is not None
    assert delta.token == 2
    assert delta.nodes is None
    assert delta.queues is None
    assert delta.jobs[:-1] == list(range(len(first.jobs)))
    assert delta.jobs[-1] is second.jobs[-1]
    assert isinstance(delta.jobs[-1], JobSpec) and delta.jobs[-1].name == "late-job"
    assert len(delta.jobs) == len(first.jobs) + 1


def test_a_snapshot_without_a_job_names_the_rest_by_their_old_positions() -> None:
    cluster = state()
    compiler = SnapshotCompiler()
    feed = SnapshotFeed()
    first = compiler.compile(cluster)
    assert feed.delta(first) is not None
    del cluster.jobs[3]
    delta = feed.delta(compiler.compile(cluster))
    assert delta is not None
    assert delta.jobs == [*range(3), *range(4, len(first.jobs))]


def test_a_replica_fed_deltas_holds_the_snapshot_and_answers_as_the_snapshot_itself() -> None:
    """Three cycles through one feed (whole, one job more, one job less), each delta pickled:
    the replica's copy lists the driver's jobs in order, its layout deals them alike, and each
    part's answer is the one a replica holding the driver's very snapshot gives."""
    cluster = state()
    compiler = SnapshotCompiler()
    feed = SnapshotFeed()
    replica = Replica(None)
    snapshots = [compiler.compile(cluster)]
    cluster.jobs.append(gpu_job("late-job", "queue-1", 0, pods=3))
    snapshots.append(compiler.compile(cluster))
    del cluster.jobs[0]
    snapshots.append(compiler.compile(cluster))
    for snapshot in snapshots:
        delta = feed.delta(snapshot)
        assert delta is not None
        assert replica.sync(over_the_wire(delta)) == delta.token
        assert replica.snapshot is not snapshot
        assert job_keys(replica.snapshot) == job_keys(snapshot)
        assert replica.snapshot is not None and replica.snapshot.jobs == snapshot.jobs
        ours = split_layout(snapshot, PARTS, None)
        theirs = replica.layout(PARTS)
        assert [[job.key for job in part.jobs] for part in theirs.deal.parts] == [
            [job.key for job in part.jobs] for part in ours.deal.parts
        ]
        held = Replica(None)
        held.hold(snapshot, delta.token)
        expected = answers(held, delta.token)
        assert answers(replica, delta.token) == expected
        assert any(placed.bound for _, _, placed in expected)


def test_a_forgotten_replica_is_sent_everything_again() -> None:
    cluster = state()
    compiler = SnapshotCompiler()
    feed = SnapshotFeed()
    assert feed.delta(compiler.compile(cluster)) is not None
    feed.forget()
    assert feed.current is None
    cluster.jobs.append(gpu_job("late-job", "queue-0", 0))
    snapshot = compiler.compile(cluster)
    delta = feed.delta(snapshot)
    assert delta is not None
    assert delta.token == 2
    assert delta.nodes is snapshot.nodes
    assert delta.queues is not None
    assert delta.jobs == snapshot.jobs
    fresh = Replica(None)
    fresh.sync(over_the_wire(delta))
    assert job_keys(fresh.snapshot) == job_keys(snapshot)


def test_a_replica_without_a_snapshot_refuses_a_delta() -> None:
    cluster = state()
    compiler = SnapshotCompiler()
    feed = SnapshotFeed()
    assert feed.delta(compiler.compile(cluster)) is not None
    cluster.jobs.append(gpu_job("late-job", "queue-0", 0))
    delta = feed.delta(compiler.compile(cluster))
    assert delta is not None and delta.nodes is None
    replica = Replica(None)
    with pytest.raises(ValueError, match="no snapshot"):
        replica.sync(over_the_wire(delta))
    assert replica.snapshot is None and replica.token == 0


def test_a_replica_asked_about_another_version_places_nothing_and_names_its_own() -> None:
    snapshot = SnapshotCompiler().compile(state())
    delta = SnapshotFeed().delta(snapshot)
    assert delta is not None
    replica = Replica(None)
    replica.sync(over_the_wire(delta))
    answer = replica.answer(delta.token + 1, 1, PARTS, config(), None)
    assert (answer.part, answer.token, len(answer.placed)) == (1, delta.token, 0)


COLLECTION_PROBE = """
import gc
from kai_ray.api.config import SchedulerConfig
from kai_ray.bench.shapes import build_shape
from kai_ray.model.snapshot import SnapshotCompiler
from kai_ray.split.replica import Replica, SnapshotFeed
shape = build_shape("kai-full-cycle-16x60")
compiler, feed = SnapshotCompiler(), SnapshotFeed()
seen = []
in_process = Replica(None)
in_process.hold(compiler.compile(shape.state), 1)
in_process.answer(1, 0, 2, shape.config, None)
seen.append(gc.isenabled())
actor = Replica(None)
for _ in range(2):
    token = actor.sync(feed.delta(compiler.compile(shape.state)))
    actor.settle()
    seen.append(gc.isenabled())
    actor.answer(token, 0, 2, shape.config, None)
    seen.append(gc.isenabled())
actor.answer(token, 1, 2, shape.config, None)
seen.append(gc.isenabled())
print(" ".join(map(str, seen)))
"""


def test_a_settled_replica_collects_between_cycles_not_while_its_answer_is_sent() -> None:
    """In process the collector is back once the answer is out; in an actor (settled) it stays
    off from an answer to the next snapshot's settle, so the answer's session is freed between
    cycles; a second answer to the same snapshot collects the first's garbage first."""
    done = subprocess.run(
        [sys.executable, "-c", COLLECTION_PROBE], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.split() == ["True", "True", "False", "True", "False", "False"]
