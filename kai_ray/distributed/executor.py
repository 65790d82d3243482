"""The executor seam: node-dimension ranking as array work.

Once per batch (an allocate action) the engine may ask an executor to rank
node rows for every pod shape of the batch (`rank_shapes`); a sharded
executor answers from its partitions, the local one declines and lets the
engine rank lazily in-process. Either way the engine checks every answer
against its bound, so the chosen nodes never depend on the executor.
`rank` orders an explicit candidate set (shared-GPU pods, restricted sets).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol, runtime_checkable

import numpy as np

from kai_ray.distributed.kernels import NodeRanking, NodeRows, RankedRows, TaskShape


class Executor(Protocol):
    def rank(self, candidates: np.ndarray, scores: np.ndarray) -> np.ndarray:
        """Candidate rows, best score first, ties by row (= node name) ascending."""
        ...

    def rank_shapes(
        self, nodes: NodeRows, ranking: NodeRanking, shapes: list[TaskShape], copies: list[int]
    ) -> list[RankedRows] | None:
        """For a batch: per pod shape, the best rows for `copies` pods and a bound on the rest.

        None means "rank them yourself, in-process, when asked" (what a local executor does).
        """
        ...


@runtime_checkable
class CountsShardFaults(Protocol):
    """An executor whose shards can fail: running totals of faulty replies, by kind, for metrics."""

    faults: Mapping[str, int]


class LocalExecutor:
    """Everything in-process over the full node table, computed when a pod asks."""

    def rank_shapes(
        self, nodes: NodeRows, ranking: NodeRanking, shapes: list[TaskShape], copies: list[int]
    ) -> list[RankedRows] | None:
        return None

    def rank(self, candidates: np.ndarray, scores: np.ndarray) -> np.ndarray:
        rows = np.flatnonzero(candidates)
        if len(rows) <= 1:
            return rows
        order = np.lexsort((rows, -scores[rows]))
        ranked: np.ndarray = rows[order]
        return ranked
