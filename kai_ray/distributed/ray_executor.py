"""Node ranking sharded over Ray actors, checked shard by shard.

The node table is split into K partitions (`partitions`: whole Topology
domains when the cluster has a Topology, else balanced; by node pool with a
pool label). Each lives in a long-lived
`NodeShard` actor that keeps its rows between cycles and is sent only the
rows that changed since it last heard. For a batch, the engine makes one call
to the `Coordinator` actor, which makes one call per shard (every pod shape
of the batch at once), checks each reply (`shard_faults`), merges the sound
ones and says which shards it could not use and why. The driver ranks those
partitions itself and merges them in, so a batch's answer is the one every
shard answering soundly would give, and the engine then chooses nodes with
the same rule as always, checking each choice against the merged bound.

Faults are typed (`ShardFault`), counted, logged once per batch, and
repaired before the next one: a dead or stuck shard is ended and replaced,
one whose rows cannot be trusted is seeded afresh. A coordinator that does
not answer in time is replaced too, and that batch is ranked in-process.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import ray

from kai_ray.distributed import kernels
from kai_ray.distributed.kernels import NodeRanking, NodeRows, RankedRows, TaskShape
from kai_ray.distributed.partitions import partitions_for
from kai_ray.distributed.shard_faults import (
    REPLACING_FAULTS,
    ShardFault,
    ShardReply,
    check_reply,
    rows_digest,
)
from kai_ray.model.objects import NodeSpec, TopologySpec

log = logging.getLogger(__name__)

SHARD_CALL_TIMEOUT_SECONDS = 6.0
"""A shard that has answered before gets this long per batch (a scheduler's lease is 15 s)."""
COORDINATOR_MARGIN_SECONDS = 2.0
"""The driver waits this much longer than the coordinator waits for its shards, so a stuck shard
is reported by the coordinator as one fault instead of costing the whole batch."""
RAY_START_TIMEOUT_SECONDS = 120.0
"""A shard's first call also waits for its process to start, which a cold machine takes a while for."""


@dataclass
class ShardDelta:
    """What a shard must change (its whole partition when `seed`, else some rows), and the digest
    of the partition as it must be afterwards."""

    seed: bool
    nodes: NodeRows
    digest: int


def _take(nodes: NodeRows, positions: np.ndarray) -> NodeRows:
    """The given rows of a node view, copied: fancy indexing copies, and arrays Ray hands a
    shard are read-only, so a shard keeps its own copy to update in place."""
    return NodeRows(
        rows=nodes.rows[positions],
        specs=[nodes.specs[i] for i in positions.tolist()],
        allocatable=nodes.allocatable[positions],
        idle=nodes.idle[positions],
        releasing=nodes.releasing[positions],
        schedulable=nodes.schedulable[positions],
        has_open_group=nodes.has_open_group[positions],
    )


class NodeShard:
    """One partition of the node table; scores its rows for every shape of a batch."""

    def __init__(self) -> None:
        self.nodes: NodeRows | None = None
        self.position: dict[int, int] = {}

    def apply(self, delta: ShardDelta) -> None:
        changed = delta.nodes
        if delta.seed or self.nodes is None:
            self.nodes = _take(changed, np.arange(len(changed.rows)))
            self.position = {int(row): i for i, row in enumerate(changed.rows.tolist())}
            return
        where = np.array([self.position[int(row)] for row in changed.rows.tolist()], dtype=np.int64)
        if not len(where):
            return
        for i, spec in zip(where.tolist(), changed.specs, strict=True):
            self.nodes.specs[i] = spec
        self.nodes.allocatable[where] = changed.allocatable
        self.nodes.idle[where] = changed.idle
        self.nodes.releasing[where] = changed.releasing
        self.nodes.schedulable[where] = changed.schedulable
        self.nodes.has_open_group[where] = changed.has_open_group

    def rank(
        self, delta: ShardDelta, ranking: NodeRanking, shapes: list[TaskShape], copies: list[int]
    ) -> ShardReply:
        started = time.perf_counter()
        self.apply(delta)
        assert self.nodes is not None
        answers = [
            kernels.rank_rows(ranking, shape, self.nodes, count)
            for shape, count in zip(shapes, copies, strict=True)
        ]
        return ShardReply(answers, rows_digest(self.nodes), time.perf_counter() - started)

    def ping(self) -> bool:
        return True


def merge(answers: list[RankedRows]) -> RankedRows:
    """One shape's answers as one list, best first, bounded by the best row any of them held back."""
    rows = np.concatenate([a.rows for a in answers]) if answers else np.array([], dtype=np.int64)
    scores = np.concatenate([a.scores for a in answers]) if answers else np.array([])
    order = np.lexsort((rows, -scores))
    bounds = [a.bound for a in answers if a.bound is not None]
    return RankedRows(rows[order], scores[order], min(bounds) if bounds else None)


@dataclass
class BatchTiming:
    """Where one batch's time went: each shard's compute (by shard index; 0 for a shard whose
    reply was not used), the merge, the partitions the driver ranked itself, and (engine side)
    the total. The rest of the total is moving
    deltas and answers between processes."""

    shard_seconds: list[float] = field(default_factory=list)
    merge_seconds: float = 0.0
    local_seconds: float = 0.0
    total_seconds: float = 0.0

    @property
    def transfer_seconds(self) -> float:
        return max(
            0.0,
            self.total_seconds
            - max(self.shard_seconds, default=0.0)
            - self.merge_seconds
            - self.local_seconds,
        )


@dataclass
class BatchReply:
    """The coordinator's answer: the sound shards' answers merged, which shards those were,
    and why each other shard was left out."""

    merged: list[RankedRows]
    answered: list[int]
    faults: dict[int, ShardFault]
    timing: BatchTiming


class Coordinator:
    """Owns the shard actors: one call per shard per batch, each reply checked, then the merge."""

    def __init__(
        self,
        shards: int,
        shard_class: type[NodeShard] = NodeShard,
        timeout: float = SHARD_CALL_TIMEOUT_SECONDS,
    ) -> None:
        self.remote_shard: Any = ray.remote(shard_class)
        self.shards: list[Any] = [self.remote_shard.remote() for _ in range(shards)]
        self.started = [False] * shards
        self.partitions = [np.array([], dtype=np.int64) for _ in range(shards)]
        self.timeout = timeout

    def rank(
        self, deltas: list[ShardDelta], ranking: NodeRanking, shapes: list[TaskShape], copies: list[int]
    ) -> BatchReply:
        for index, delta in enumerate(deltas):
            if delta.seed:
                self.partitions[index] = delta.nodes.rows.copy()
        calls = [
            shard.rank.remote(delta, ranking, shapes, copies)
            for shard, delta in zip(self.shards, deltas, strict=True)
        ]
        timeout = self.timeout if all(self.started) else RAY_START_TIMEOUT_SECONDS
        ready, _ = ray.wait(calls, num_returns=len(calls), timeout=timeout)
        arrived = set(ready)
        sound: list[tuple[int, ShardReply]] = []
        faults: dict[int, ShardFault] = {}
        for index, call in enumerate(calls):
            reply, fault = self._collect(call, call in arrived)
            if reply is not None:
                fault = check_reply(reply, deltas[index].digest, self.partitions[index], len(shapes))
            if fault is None and reply is not None:
                self.started[index] = True
                sound.append((index, reply))
            else:
                faults[index] = fault or ShardFault.EMPTY
        started = time.perf_counter()
        merged = [merge([reply.answers[i] for _, reply in sound]) for i in range(len(shapes))]
        shard_seconds = [0.0] * len(self.partitions)
        for index, reply in sound:
            shard_seconds[index] = reply.seconds
        timing = BatchTiming(shard_seconds=shard_seconds, merge_seconds=time.perf_counter() - started)
        return BatchReply(merged, [index for index, _ in sound], faults, timing)

    @staticmethod
    def _collect(call: Any, arrived: bool) -> tuple[ShardReply | None, ShardFault | None]:
        if not arrived:
            return None, ShardFault.TIMEOUT
        try:
            reply = ray.get(call)
        except ray.exceptions.RayError:
            return None, ShardFault.DIED
        return (reply, None) if isinstance(reply, ShardReply) else (None, ShardFault.EMPTY)

    def replace(self, indexes: list[int]) -> None:
        """End the given shards (a stuck one must not keep a CPU) and start fresh ones in their place."""
        for index in indexes:
            with contextlib.suppress(ray.exceptions.RayError):
                ray.kill(self.shards[index])
            self.shards[index] = self.remote_shard.remote()
            self.started[index] = False

    def kill_shard(self, index: int) -> None:
        """For fault tests: end one shard as a crash would."""
        ray.kill(self.shards[index])

    def close(self) -> None:
        for shard in self.shards:
            ray.kill(shard)


RemoteCoordinator = ray.remote(Coordinator)


LOCAL_RAY = "local"
"""`ray.init`'s address for a new instance of this process's own."""
LOCAL_RAY_SYSTEM_CONFIG = {"worker_niceness": 0}
"""Ray starts its workers at niceness 15, below the driver and Ray's own daemons. Our actors are
the cycle's critical path (a split cycle waits for its slowest part), so on a machine with any
other load at the default priority a part at niceness 15 would wait for all of it while the local
cycle does not. A cluster started with `ray start` sets this itself (`RAY_worker_niceness=0`)."""


def join_ray(address: str | None, *, num_cpus: int | None = None) -> None:
    """Join the Ray cluster at `address`, or start a local instance, unless this process already has.

    Without an address Ray would join whatever cluster /tmp/ray last recorded, a dead one
    included; a local instance is what no `--ray-address` means. `num_cpus` sizes a local one.
    """
    if ray.is_initialized():
        return
    if address:
        ray.init(address=address, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
    else:
        ray.init(
            address=LOCAL_RAY,
            num_cpus=num_cpus,
            include_dashboard=False,
            log_to_driver=False,
            ignore_reinit_error=True,
            _system_config=LOCAL_RAY_SYSTEM_CONFIG,
        )


class RayExecutor:
    """Ranks node rows in K Ray shard actors; see the module docstring.

    `shard_class` and `coordinator_class` are the seams fault tests use to put a
    misbehaving shard or coordinator in the path; `shard_timeout` bounds each
    shard's call once it has started. With `pool_label` (KAI's node-pool label key;
    the CLI passes it) a pool's nodes share shards only with their own pool while
    there are enough shards; a cluster without pools is partitioned as without it.
    """

    def __init__(
        self,
        shards: int,
        address: str | None = None,
        *,
        shard_class: type[NodeShard] = NodeShard,
        coordinator_class: type[Coordinator] = Coordinator,
        shard_timeout: float = SHARD_CALL_TIMEOUT_SECONDS,
        pool_label: str | None = None,
    ) -> None:
        if shards < 1:
            raise ValueError(f"shards must be at least 1, got {shards}")
        join_ray(address)
        self.shards = shards
        self._pool_label = pool_label
        self._partitioned: tuple[list[NodeSpec], tuple[TopologySpec, ...], list[np.ndarray]] | None = None
        """The last node list and Topologies partitioned, and the partitions: recomputed only when
        the snapshot brings a new node list (partitioning 160,000 labelled nodes takes a third of
        a second)."""
        self._shard_class = shard_class
        self._remote_coordinator: Any = ray.remote(coordinator_class)
        self._shard_timeout = shard_timeout
        self.coordinator: Any = self._new_coordinator()
        self._started = False
        """Whether every shard has answered since the last (re)start: until then the coordinator
        also waits for shard processes to start."""
        self._sent: list[NodeRows | None] = [None] * shards
        self.fallbacks = 0
        """Batches ranked wholly in-process because the coordinator itself failed."""
        self.faults: collections.Counter[ShardFault] = collections.Counter()
        self.batches_answered = 0
        """Batches whose answer came at least in part from shards: tests use it to tell a working
        shard path from one that quietly declines every batch."""
        self.timings: list[BatchTiming] = []
        self.rows_sent: list[int] = []
        """Rows sent to each shard in the last batch: only what changed since the one before."""

    def _new_coordinator(self) -> Any:
        return self._remote_coordinator.remote(self.shards, self._shard_class, self._shard_timeout)

    def rank(self, candidates: np.ndarray, scores: np.ndarray) -> np.ndarray:
        rows = np.flatnonzero(candidates)
        ranked: np.ndarray = rows[np.lexsort((rows, -scores[rows]))]
        return ranked

    def rank_shapes(
        self, nodes: NodeRows, ranking: NodeRanking, shapes: list[TaskShape], copies: list[int]
    ) -> list[RankedRows] | None:
        parts = self._partitions(nodes)
        current = [_take(nodes, positions) for positions in parts]
        deltas = [self._delta(index, rows) for index, rows in enumerate(current)]
        self.rows_sent = [len(delta.nodes.rows) for delta in deltas]
        started = time.perf_counter()
        wait = self._shard_timeout if self._started else RAY_START_TIMEOUT_SECONDS
        try:
            reply: BatchReply = ray.get(
                self.coordinator.rank.remote(deltas, ranking, shapes, copies),
                timeout=wait + COORDINATOR_MARGIN_SECONDS,
            )
        except ray.exceptions.RayError as error:
            self._replace_coordinator(error)
            return None
        faults = dict(reply.faults)
        for index in range(self.shards):
            if index not in reply.answered and index not in faults:
                faults[index] = ShardFault.MISSING
        answers = reply.merged
        if faults:
            local_started = time.perf_counter()
            answers = self._rank_in_process(
                answers, [current[i] for i in sorted(faults)], ranking, shapes, copies
            )
            reply.timing.local_seconds = time.perf_counter() - local_started
        reply.timing.total_seconds = time.perf_counter() - started
        self.timings.append(reply.timing)
        self.batches_answered += bool(reply.answered)
        for index, rows in enumerate(current):
            self._sent[index] = None if index in faults else rows
        self._started = not faults
        if faults:
            self._repair(faults)
        return answers

    @property
    def partitions(self) -> list[np.ndarray]:
        """The node rows each shard held in the last batch (none before the first)."""
        return [] if self._partitioned is None else self._partitioned[2]

    def _partitions(self, nodes: NodeRows) -> list[np.ndarray]:
        last = self._partitioned
        if last is not None and last[0] is nodes.specs and last[1] == nodes.topologies:
            return last[2]
        parts = partitions_for(nodes.specs, self.shards, nodes.topologies, self._pool_label)
        self._partitioned = (nodes.specs, nodes.topologies, parts)
        return parts

    @staticmethod
    def _rank_in_process(
        merged: list[RankedRows],
        partitions: list[NodeRows],
        ranking: NodeRanking,
        shapes: list[TaskShape],
        copies: list[int],
    ) -> list[RankedRows]:
        """The merged answers with the given partitions ranked here, as their shards would have."""
        return [
            merge([answer, *(kernels.rank_rows(ranking, shape, part, count) for part in partitions)])
            for answer, shape, count in zip(merged, shapes, copies, strict=True)
        ]

    def _delta(self, index: int, current: NodeRows) -> ShardDelta:
        sent = self._sent[index]
        digest = rows_digest(current)
        if sent is None or not np.array_equal(sent.rows, current.rows):
            return ShardDelta(seed=True, nodes=current, digest=digest)
        changed = (
            np.any(sent.idle != current.idle, axis=1)
            | np.any(sent.releasing != current.releasing, axis=1)
            | np.any(sent.allocatable != current.allocatable, axis=1)
            | (sent.schedulable != current.schedulable)
            | (sent.has_open_group != current.has_open_group)
            | np.array([a != b for a, b in zip(sent.specs, current.specs, strict=True)], dtype=bool)
        )
        return ShardDelta(seed=False, nodes=_take(current, np.flatnonzero(changed)), digest=digest)

    def _repair(self, faults: dict[int, ShardFault]) -> None:
        for fault in faults.values():
            self.faults[fault] += 1
        log.warning(
            "node shards left out of a batch (%s); ranked their rows in-process, %s",
            ", ".join(f"shard {index}: {fault}" for index, fault in sorted(faults.items())),
            "replacing the dead or stuck ones and re-seeding the rest",
        )
        dead = sorted(index for index, fault in faults.items() if fault in REPLACING_FAULTS)
        if not dead:
            return
        try:
            ray.get(self.coordinator.replace.remote(dead), timeout=self._shard_timeout)
        except ray.exceptions.RayError as error:
            self._replace_coordinator(error)

    def _replace_coordinator(self, error: Exception) -> None:
        """The coordinator failed or is stuck: this batch ranks in-process, the next gets new actors."""
        self.fallbacks += 1
        log.warning("node shard coordinator failed (%s); ranking in-process and starting a new one", error)
        with contextlib.suppress(ray.exceptions.RayError):
            ray.kill(self.coordinator)
        self.coordinator = self._new_coordinator()
        self._sent = [None] * self.shards
        self._started = False

    def kill_shard(self, index: int) -> None:
        ray.get(self.coordinator.kill_shard.remote(index), timeout=self._shard_timeout)

    def close(self) -> None:
        """End the coordinator and its shards (their worker processes), e.g. when a test is done."""
        with contextlib.suppress(ray.exceptions.RayError):
            ray.get(self.coordinator.close.remote(), timeout=self._shard_timeout)
        ray.kill(self.coordinator)
