"""A part's copy of the cluster, kept in step by deltas, and the layout every copy derives alike.

Each part keeps its own replica of the whole snapshot, as each of KAI's scheduling shards keeps
its own informer cache, and is sent only what changed: a new node table or queue tree when the
snapshot brings a new one (`SnapshotCompiler` keeps the objects of what did not change), the
Topologies when they differ, and the job list as positions into the replica's previous list
for jobs that are the very same objects, with only new jobs carried whole. A cycle then names
the snapshot version and the part; every replica and the driver compute the same layout from
the same snapshot (`split_layout`, a pure function), so the deal itself never crosses the wire.
"""

from __future__ import annotations

import gc
import time
from dataclasses import dataclass, field, replace
from functools import cached_property

from kai_ray.api.config import SchedulerConfig
from kai_ray.collector import collection_paused, hold_collection, release_collection
from kai_ray.distributed.partitions import partitions_for
from kai_ray.fairshare.usage import QueueUsage
from kai_ray.gc_tuning import freeze_what_lives
from kai_ray.model.objects import HeldPod, JobSpec, QueueSpec, TopologySpec
from kai_ray.model.snapshot import NodeTable, Snapshot
from kai_ray.split.basis import QueueSums, part_basis, queue_sums, survey
from kai_ray.split.deal import ClusterLoad, Deal, deal, must_free
from kai_ray.split.part import PartAnswer, run_part
from kai_ray.split.positions import PodPositions, pod_positions


@dataclass(frozen=True)
class SplitLayout:
    deal: Deal
    opening: QueueSums
    """Every job's queue sums at the start of the cycle (all parts and the kept jobs)."""
    seconds: float
    """How long computing it took: every part computes it, so it is on each part's path."""
    snapshot: Snapshot = field(repr=False, compare=False)
    load: ClusterLoad = field(repr=False, compare=False)

    @cached_property
    def positions(self) -> PodPositions:
        """Every pod by position, for the checks of the answers. This and `gpus_to_free` are the
        coordinator's: a part computing the layout for itself never asks for them."""
        return pod_positions(self.snapshot, self.deal, self.load)

    @cached_property
    def gpus_to_free(self) -> float:
        """The GPUs any plan placing every pending pod must take from running pods: what they ask
        beyond what is free or releasing (`must_free`)."""
        return must_free(self.snapshot, self.load)

    def with_checks(self) -> SplitLayout:
        """This layout with the coordinator's fields computed, so that its checks read them for
        free: the coordinator asks for it while the parts work."""
        _ = self.positions, self.gpus_to_free
        return self


def split_layout(snapshot: Snapshot, count: int, pool_label: str | None) -> SplitLayout:
    started = time.perf_counter()
    partitions = partitions_for(snapshot.nodes.specs, count, list(snapshot.topologies.values()), pool_label)
    opening, load = survey(snapshot)
    dealt = deal(snapshot, partitions, load)
    return SplitLayout(dealt, opening, time.perf_counter() - started, snapshot, load)


@dataclass(frozen=True)
class SnapshotDelta:
    token: int
    nodes: NodeTable | None
    """None: the replica's table is still current."""
    queues: tuple[dict[str, QueueSpec], dict[str, list[str]]] | None
    topologies: dict[str, TopologySpec] | None
    jobs: list[int | JobSpec]
    """The snapshot's jobs: a position in the replica's previous list, or a job sent whole."""
    held: list[HeldPod]
    now: float


class SnapshotFeed:
    """The driver's side of one replica: what it was last sent, to send only what changed."""

    def __init__(self) -> None:
        self.token = 0
        self._sent: Snapshot | None = None
        self._positions: dict[int, int] = {}

    @property
    def current(self) -> Snapshot | None:
        return self._sent

    def delta(self, snapshot: Snapshot) -> SnapshotDelta | None:
        """None when the replica already holds this very snapshot."""
        last = self._sent
        if last is snapshot:
            return None
        jobs: list[int | JobSpec] = []
        for job in snapshot.jobs:
            position = self._positions.get(id(job))
            jobs.append(position if position is not None and last is not None else job)
        self.token += 1
        delta = SnapshotDelta(
            self.token,
            None if last is not None and last.nodes is snapshot.nodes else snapshot.nodes,
            None
            if last is not None and last.queues is snapshot.queues
            else (snapshot.queues, snapshot.children),
            None if last is not None and last.topologies == snapshot.topologies else snapshot.topologies,
            jobs,
            snapshot.held,
            snapshot.now,
        )
        self._sent = snapshot
        self._positions = {id(job): position for position, job in enumerate(snapshot.jobs)}
        return delta

    def forget(self) -> None:
        """The replica was lost: the next delta carries everything."""
        self._sent = None
        self._positions = {}


class Replica:
    """A part's copy of the snapshot and the cycle it computes from it."""

    def __init__(self, pool_label: str | None) -> None:
        self.pool_label = pool_label
        self.token = 0
        self.snapshot: Snapshot | None = None
        self._layouts: dict[int, SplitLayout] = {}
        self._owns_process = False
        """Settled in a process of its own (an actor): see `settle`."""
        self._collection_held = False

    def sync(self, delta: SnapshotDelta) -> int:
        last = self.snapshot
        if last is None and (delta.nodes is None or delta.queues is None or delta.topologies is None):
            raise ValueError(f"replica has no snapshot to apply delta {delta.token} to")
        if last is None and any(isinstance(job, int) for job in delta.jobs):
            raise ValueError(f"replica has no jobs for delta {delta.token} to name by position")
        jobs = [last.jobs[j] if isinstance(j, int) and last is not None else j for j in delta.jobs]
        nodes = delta.nodes if delta.nodes is not None else _known(last).nodes
        queues, children = (
            delta.queues if delta.queues is not None else (_known(last).queues, _known(last).children)
        )
        topologies = delta.topologies if delta.topologies is not None else _known(last).topologies
        self.snapshot = Snapshot(
            nodes,
            queues,
            children,
            [j for j in jobs if isinstance(j, JobSpec)],
            delta.now,
            [],
            delta.held,
            topologies,
        )
        self.token = delta.token
        self._layouts = {}
        return self.token

    def settle(self) -> None:
        """Keep the collector off the snapshot just taken in, as `serve` does with its model after
        its first read (`freeze_what_lives`): otherwise every full collection during a part's
        cycle walks the whole replica. Only for a process that owns the replica (an actor): it
        freezes everything that process holds.

        From then on the process's collector is held off from the start of each answer to the
        next snapshot (`kai_ray.collector`): resumed as the answer returns, its first collection
        would free the part's session while the answer is still being sent, on the cycle's
        critical path; here it runs between cycles, with the freeze."""
        self._resume_collection()
        freeze_what_lives()
        self._owns_process = True

    def hold(self, snapshot: Snapshot, token: int) -> None:
        """Take `snapshot` itself as the copy (a replica in the driver's own process)."""
        if self.snapshot is not snapshot:
            self.snapshot, self._layouts = snapshot, {}
        self.token = token

    def layout(self, count: int) -> SplitLayout:
        found = self._layouts.get(count)
        if found is None:
            found = split_layout(_known(self.snapshot), count, self.pool_label)
            self._layouts[count] = found
        return found

    def answer(
        self, token: int, part: int, count: int, config: SchedulerConfig, usage: QueueUsage | None
    ) -> PartAnswer:
        if token != self.token:
            return PartAnswer(part, self.token)
        if not self._owns_process:
            with collection_paused():
                return self._answer(part, count, config, usage, token)
        if self._collection_held:  # no new snapshot since the last answer: its garbage first
            self._resume_collection()
            gc.collect()
        hold_collection()
        self._collection_held = True
        return self._answer(part, count, config, usage, token)

    def _answer(
        self, part: int, count: int, config: SchedulerConfig, usage: QueueUsage | None, token: int
    ) -> PartAnswer:
        layout = self.layout(count)
        started = time.perf_counter()
        snapshot, dealt = _known(self.snapshot), layout.deal.parts[part]
        basis = part_basis(snapshot, queue_sums(snapshot, dealt.jobs), layout.opening)
        answer = run_part(snapshot, dealt, basis, config, usage, token)
        return replace(answer, seconds=time.perf_counter() - started + layout.seconds)

    def _resume_collection(self) -> None:
        if self._collection_held:
            self._collection_held = False
            release_collection()


def _known(snapshot: Snapshot | None) -> Snapshot:
    if snapshot is None:
        raise ValueError("replica has no snapshot yet")
    return snapshot
