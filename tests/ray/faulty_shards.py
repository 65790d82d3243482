"""Shards and coordinators that misbehave in one specific way, for the fault tests.

Ray ships these classes to its worker processes by value (see `ship_by_value`):
the workers cannot import this test module.
"""

from __future__ import annotations

import os
import sys
import threading

import numpy as np
import ray.cloudpickle

from kai_ray.distributed.kernels import NodeRanking, RankedRows, TaskShape
from kai_ray.distributed.ray_executor import BatchReply, Coordinator, NodeShard, ShardDelta
from kai_ray.distributed.shard_faults import ShardReply


def ship_by_value() -> None:
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])


class SilentShard(NodeShard):
    """Answers every batch with no answers at all, as a shard that lost its work would."""

    def rank(
        self, delta: ShardDelta, ranking: NodeRanking, shapes: list[TaskShape], copies: list[int]
    ) -> ShardReply:
        reply = super().rank(delta, ranking, shapes, copies)
        return ShardReply([], reply.digest, reply.seconds)


class BlankShard(NodeShard):
    """Claims, with a correct digest, that none of its rows fits anything: a lie no check can see,
    which only a plan compared with in-process ranking reveals."""

    def rank(
        self, delta: ShardDelta, ranking: NodeRanking, shapes: list[TaskShape], copies: list[int]
    ) -> ShardReply:
        reply = super().rank(delta, ranking, shapes, copies)
        blank = [RankedRows(np.array([], dtype=np.int64), np.array([]), None) for _ in shapes]
        return ShardReply(blank, reply.digest, reply.seconds)


class DeafShard(NodeShard):
    """Takes its seed, then ignores every update: it answers from stale rows."""

    def apply(self, delta: ShardDelta) -> None:
        if self.nodes is None or delta.seed:
            super().apply(delta)


class StrayShard(NodeShard):
    """Names a row that is not in its partition."""

    def rank(
        self, delta: ShardDelta, ranking: NodeRanking, shapes: list[TaskShape], copies: list[int]
    ) -> ShardReply:
        reply = super().rank(delta, ranking, shapes, copies)
        assert self.nodes is not None
        stray = int(self.nodes.rows.max()) + 1_000
        answers = [
            RankedRows(np.append(a.rows, stray), np.append(a.scores, 0.0), a.bound) for a in reply.answers
        ]
        return ShardReply(answers, reply.digest, reply.seconds)


class FailsOnSecondBatch(NodeShard):
    """Answers its first batch, then fails the second the way `fail` says: in mid-cycle."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def fail(self) -> None:
        raise NotImplementedError

    def rank(
        self, delta: ShardDelta, ranking: NodeRanking, shapes: list[TaskShape], copies: list[int]
    ) -> ShardReply:
        self.calls += 1
        if self.calls == 2:
            self.fail()
        return super().rank(delta, ranking, shapes, copies)


class CrashingShard(FailsOnSecondBatch):
    """Its process ends: a shard killed in the middle of a cycle."""

    def fail(self) -> None:
        os._exit(1)


class HangingShard(FailsOnSecondBatch):
    """Never answers: a shard stuck in the middle of a cycle."""

    def fail(self) -> None:
        threading.Event().wait()


class ForgetfulCoordinator(Coordinator):
    """Never calls its last shard nor mentions it in its reply, as a buggy coordinator would."""

    def rank(
        self, deltas: list[ShardDelta], ranking: NodeRanking, shapes: list[TaskShape], copies: list[int]
    ) -> BatchReply:
        every_shard, self.shards = self.shards, self.shards[:-1]
        try:
            return super().rank(deltas[:-1], ranking, shapes, copies)
        finally:
            self.shards = every_shard
