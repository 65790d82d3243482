"""Node ranking sharded over Ray actors.

The node table is split into K contiguous partitions. Each lives in a
long-lived `NodeShard` actor that keeps its rows between cycles and is sent
only the rows that changed since it last heard. For a batch, the engine
makes one call to the `Coordinator` actor, which makes one call per shard
(every pod shape of the batch at once), merges the shards' ranked rows and
hands back, per shape, the merged list and the best bound any shard left
out. The engine then chooses nodes with the same rule as always and checks
each choice against that bound, so every shard count gives the same plan.

A shard that dies is recreated and re-seeded; the cycle in which it failed
ranks in-process instead, and says so in the log.
"""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import ray

from kai_ray.distributed import kernels
from kai_ray.distributed.kernels import NodeRanking, NodeRows, RankedRows, TaskShape

log = logging.getLogger(__name__)

RAY_CALL_TIMEOUT_SECONDS = 8.0
"""A call to the shards during a cycle never outlasts this (a scheduler's lease is 15 s); on a
timeout the cycle ranks in-process, with the same result, and the shards are re-seeded."""
RAY_START_TIMEOUT_SECONDS = 120.0
"""The first call also waits for the actors to start, which a cold machine takes a while for."""


@dataclass
class ShardDelta:
    """What a shard must change: its whole partition (`seed`) or just some of its rows."""

    seed: bool
    nodes: NodeRows


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
    ) -> tuple[list[RankedRows], float]:
        """The shape answers and the seconds this shard spent computing them."""
        started = time.perf_counter()
        self.apply(delta)
        assert self.nodes is not None
        answers = [
            kernels.rank_rows(ranking, shape, self.nodes, count)
            for shape, count in zip(shapes, copies, strict=True)
        ]
        return answers, time.perf_counter() - started

    def ping(self) -> bool:
        return True


def merge(answers: list[RankedRows]) -> RankedRows:
    """One shape's shard answers as one list, best first, bounded by the best row any shard held back."""
    rows = np.concatenate([a.rows for a in answers]) if answers else np.array([], dtype=np.int64)
    scores = np.concatenate([a.scores for a in answers]) if answers else np.array([])
    order = np.lexsort((rows, -scores))
    bounds = [a.bound for a in answers if a.bound is not None]
    return RankedRows(rows[order], scores[order], min(bounds) if bounds else None)


class Coordinator:
    """Owns the shard actors: one call per shard per batch, then the merge."""

    def __init__(self, shards: int) -> None:
        self.shards: list[Any] = [RemoteShard.remote() for _ in range(shards)]

    def rank(
        self, deltas: list[ShardDelta], ranking: NodeRanking, shapes: list[TaskShape], copies: list[int]
    ) -> tuple[list[RankedRows], BatchTiming]:
        calls = [
            shard.rank.remote(delta, ranking, shapes, copies)
            for shard, delta in zip(self.shards, deltas, strict=True)
        ]
        replies: list[tuple[list[RankedRows], float]] = ray.get(calls)
        started = time.perf_counter()
        merged = [merge([answers[i] for answers, _ in replies]) for i in range(len(shapes))]
        timing = BatchTiming(
            shard_seconds=[seconds for _, seconds in replies], merge_seconds=time.perf_counter() - started
        )
        return merged, timing

    def replace_dead_shards(self) -> list[int]:
        """Recreate shards that no longer answer; their indexes need a fresh seed."""
        replaced = []
        for index, shard in enumerate(self.shards):
            try:
                ray.get(shard.ping.remote(), timeout=RAY_CALL_TIMEOUT_SECONDS)
            except ray.exceptions.RayError:
                self.shards[index] = RemoteShard.remote()
                replaced.append(index)
        return replaced

    def kill_shard(self, index: int) -> None:
        """For fault tests: end one shard as a crash would."""
        ray.kill(self.shards[index])

    def close(self) -> None:
        for shard in self.shards:
            ray.kill(shard)


RemoteShard = ray.remote(NodeShard)
RemoteCoordinator = ray.remote(Coordinator)


@dataclass
class BatchTiming:
    """Where one batch's time went: each shard's compute, the merge, and (engine side) the total.

    The rest of the total is moving deltas and answers between processes.
    """

    shard_seconds: list[float] = field(default_factory=list)
    merge_seconds: float = 0.0
    total_seconds: float = 0.0

    @property
    def transfer_seconds(self) -> float:
        return max(0.0, self.total_seconds - max(self.shard_seconds, default=0.0) - self.merge_seconds)


@dataclass
class _Sent:
    """What a shard was last sent, to compute the next delta."""

    names: list[str] = field(default_factory=list)
    nodes: NodeRows | None = None


LOCAL_RAY = "local"
"""`ray.init`'s address for a new instance of this process's own."""


class RayExecutor:
    """Ranks node rows in K Ray shard actors; see the module docstring."""

    def __init__(self, shards: int, address: str | None = None) -> None:
        if shards < 1:
            raise ValueError(f"shards must be at least 1, got {shards}")
        if not ray.is_initialized():
            # Without an address Ray would join whatever cluster /tmp/ray last recorded, a dead one
            # included; a local instance is what no `--ray-address` means.
            ray.init(
                address=address or LOCAL_RAY,
                include_dashboard=False,
                log_to_driver=False,
                ignore_reinit_error=True,
            )
        self.shards = shards
        self.coordinator: Any = RemoteCoordinator.remote(shards)
        self._started = False
        """Whether the actors have answered once: the first call also waits for them to start."""
        self._sent = [_Sent() for _ in range(shards)]
        self.fallbacks = 0
        self.timings: list[BatchTiming] = []
        self.rows_sent: list[int] = []
        """Rows sent to each shard in the last batch: only what changed since the one before."""

    def rank(self, candidates: np.ndarray, scores: np.ndarray) -> np.ndarray:
        rows = np.flatnonzero(candidates)
        ranked: np.ndarray = rows[np.lexsort((rows, -scores[rows]))]
        return ranked

    def rank_shapes(
        self, nodes: NodeRows, ranking: NodeRanking, shapes: list[TaskShape], copies: list[int]
    ) -> list[RankedRows] | None:
        parts = np.array_split(np.arange(len(nodes.rows)), self.shards)
        deltas = [self._delta(index, nodes, positions) for index, positions in enumerate(parts)]
        self.rows_sent = [len(delta.nodes.rows) for delta in deltas]
        started = time.perf_counter()
        try:
            reply: tuple[list[RankedRows], BatchTiming] = ray.get(
                self.coordinator.rank.remote(deltas, ranking, shapes, copies),
                timeout=RAY_CALL_TIMEOUT_SECONDS if self._started else RAY_START_TIMEOUT_SECONDS,
            )
        except ray.exceptions.RayError as error:
            self._recover(error)
            return None
        self._started = True
        answers, timing = reply
        timing.total_seconds = time.perf_counter() - started
        self.timings.append(timing)
        for index, positions in enumerate(parts):
            self._remember(index, nodes, positions)
        return answers

    def _delta(self, index: int, nodes: NodeRows, positions: np.ndarray) -> ShardDelta:
        sent = self._sent[index]
        names = [nodes.specs[i].name for i in positions.tolist()]
        if sent.nodes is None or sent.names != names:
            return ShardDelta(seed=True, nodes=_take(nodes, positions))
        changed = (
            np.any(sent.nodes.idle != nodes.idle[positions], axis=1)
            | np.any(sent.nodes.releasing != nodes.releasing[positions], axis=1)
            | np.any(sent.nodes.allocatable != nodes.allocatable[positions], axis=1)
            | (sent.nodes.schedulable != nodes.schedulable[positions])
            | (sent.nodes.has_open_group != nodes.has_open_group[positions])
            | np.array(
                [
                    a != b
                    for a, b in zip(
                        sent.nodes.specs, (nodes.specs[i] for i in positions.tolist()), strict=True
                    )
                ],
                dtype=bool,
            )
        )
        return ShardDelta(seed=False, nodes=_take(nodes, positions[changed]))

    def _remember(self, index: int, nodes: NodeRows, positions: np.ndarray) -> None:
        copy = _take(nodes, positions)
        self._sent[index] = _Sent(names=[spec.name for spec in copy.specs], nodes=copy)

    def _recover(self, error: Exception) -> None:
        self.fallbacks += 1
        log.warning("node shards failed (%s); ranking in-process this cycle and re-seeding shards", error)
        self._sent = [_Sent() for _ in range(self.shards)]
        try:
            ray.get(self.coordinator.replace_dead_shards.remote(), timeout=RAY_CALL_TIMEOUT_SECONDS)
        except ray.exceptions.RayError:
            self.coordinator = RemoteCoordinator.remote(self.shards)

    def kill_shard(self, index: int) -> None:
        ray.get(self.coordinator.kill_shard.remote(index), timeout=RAY_CALL_TIMEOUT_SECONDS)

    def close(self) -> None:
        """End the coordinator and its shards (their worker processes), e.g. when a test is done."""
        with contextlib.suppress(ray.exceptions.RayError):
            ray.get(self.coordinator.close.remote(), timeout=RAY_CALL_TIMEOUT_SECONDS)
        ray.kill(self.coordinator)
