"""Node-dimension kernels: fit and score a pod shape against many node rows at once.

These are the array expressions the engine's placement plugins are made of,
kept here (importing only `model`) so that a node shard in another process
scores its rows with exactly the same arithmetic as the engine. Every score
of a row depends on that row alone, which is what makes sharding exact: the
best node of the cluster is the best of the shards' bests.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from kai_ray.model.affinity import matches_node
from kai_ray.model.objects import NodeSpec, TaskSpec, TopologySpec
from kai_ray.model.resources import CPU, EPSILON, GPU

SHARED_GPU_FIT_SCORE = 10_000.0
IDLE_FIT_SCORE = 1_000.0
CPU_ON_CPU_NODE_SCORE = 10.0
BINPACK_MAX_SCORE = 9.0


def binpack_scores(free: np.ndarray, total: np.ndarray) -> np.ndarray:
    """Fuller nodes score higher, in [0, 9], from each node's own free amount.

    KAI scales by the min and max free over the candidates; `9 / (1 + free)` keeps
    exactly that order among nodes having the resource without looking at others.
    """
    scores: np.ndarray = np.where(total > 0, BINPACK_MAX_SCORE / (1.0 + np.maximum(free, 0.0)), 0.0)
    return scores


def spread_scores(free: np.ndarray, total: np.ndarray) -> np.ndarray:
    scores: np.ndarray = np.divide(free, total, out=np.zeros_like(free), where=total > 0)
    return scores


def fits(request: np.ndarray, available: np.ndarray) -> np.ndarray:
    """Rows whose available vector covers the request in every resource."""
    # `logical_and.reduce` is `np.all` without its Python wrapper: this runs per placed pod.
    mask: np.ndarray = np.logical_and.reduce(request <= available + EPSILON, axis=1)
    return mask


@dataclass(frozen=True)
class NodeRanking:
    """Which scoring terms are on, as the enabled plugins say; shipped to shards as is."""

    predicates: bool = True
    idle_bonus: bool = True
    shared_group_bonus: bool = True
    cpu_node_bonus: bool = True
    gpu_strategy: str | None = "binpack"
    cpu_strategy: str | None = "binpack"


@dataclass(frozen=True)
class TaskShape:
    """A whole-GPU or CPU pod as node kernels see it; identical pods share one shape."""

    request: tuple[float, ...]
    needs_gpu: bool
    spec: TaskSpec = field(compare=False, hash=False)


@dataclass
class NodeRows:
    """A set of node rows with their state: the whole table, or one shard's part of it."""

    rows: np.ndarray
    specs: list[NodeSpec]
    allocatable: np.ndarray
    idle: np.ndarray
    releasing: np.ndarray
    schedulable: np.ndarray
    has_open_group: np.ndarray
    topologies: tuple[TopologySpec, ...] = ()
    """The cluster's Topologies, so a sharded executor can keep their domains inside one shard."""

    def static_mask(self, shape: TaskShape, predicates: bool) -> np.ndarray:
        if not predicates:
            return np.ones(len(self.rows), dtype=bool)
        matching = np.array([matches_node(shape.spec, node) for node in self.specs], dtype=bool)
        mask: np.ndarray = self.schedulable & matching.reshape(len(self.rows))
        return mask


def score(ranking: NodeRanking, shape: TaskShape, nodes: NodeRows, idle_fit: np.ndarray) -> np.ndarray:
    """The summed plugin score of each row for a whole-GPU or CPU pod."""
    total = np.zeros(len(nodes.rows))
    if ranking.idle_bonus:
        total += np.where(idle_fit, IDLE_FIT_SCORE, 0.0)
    if ranking.shared_group_bonus and not shape.needs_gpu:
        total += np.where(nodes.has_open_group, SHARED_GPU_FIT_SCORE, 0.0)
    if ranking.cpu_node_bonus and not shape.needs_gpu:
        total += np.where(nodes.allocatable[:, GPU] == 0, CPU_ON_CPU_NODE_SCORE, 0.0)
    column = GPU if shape.needs_gpu else CPU
    strategy = ranking.gpu_strategy if shape.needs_gpu else ranking.cpu_strategy
    if strategy is not None:
        free = nodes.idle[:, column] + nodes.releasing[:, column]
        placement = spread_scores if strategy == "spread" else binpack_scores
        total += placement(free, nodes.allocatable[:, column])
    return total


@dataclass(frozen=True)
class RankedRows:
    """An executor's answer for one shape: feasible rows best first, and what lies beyond.

    `bound` is the rank key (-score, row) of the best feasible row left out of
    `rows`, or None when every feasible row is listed. A caller may trust the
    list only while its best remaining entry ranks before `bound`.
    """

    rows: np.ndarray
    scores: np.ndarray
    bound: tuple[float, int] | None


def rank_rows(ranking: NodeRanking, shape: TaskShape, nodes: NodeRows, copies: int | None) -> RankedRows:
    """Feasible rows best first; with `copies`, only as many rows as hold that many pods."""
    request = np.array(shape.request)
    available = nodes.idle + nodes.releasing
    feasible = nodes.static_mask(shape, ranking.predicates) & fits(request, available)
    scores = score(ranking, shape, nodes, fits(request, nodes.idle))
    positions = np.flatnonzero(feasible)
    order = positions[np.lexsort((nodes.rows[positions], -scores[positions]))]
    if copies is None:
        return RankedRows(nodes.rows[order], scores[order], None)
    wanted = request > 0
    per_row = (
        np.floor(np.min(available[order][:, wanted] / request[wanted], axis=1) + EPSILON)
        if wanted.any()
        else None
    )
    keep = len(order) if per_row is None else int(np.searchsorted(np.cumsum(per_row), copies) + 1)
    keep = min(keep, len(order))
    bound = None if keep == len(order) else (-float(scores[order[keep]]), int(nodes.rows[order[keep]]))
    return RankedRows(nodes.rows[order[:keep]], scores[order[:keep]], bound)
