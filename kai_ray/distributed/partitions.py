"""Which node rows each shard of a sharded executor holds.

A gang that fits inside one partition can be placed by one shard without asking the others, and
KAI's topology-aware placement keeps gangs inside one rack or zone. So partitions follow the
cluster's layout: with a Topology, whole domains go to shards (a rack is split only when it alone
is bigger than a shard's fair share); with KAI's node-pool label (what a `SchedulingShard`
partitions by), one pool's nodes never share a shard with another pool's while there are enough
shards. Without either, the split is the balanced contiguous one `np.array_split` makes.

Every choice is made on stable keys (label values, node row order, shard index), so the same
nodes always give the same partitions, whatever order dictionaries happen to hold them in.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from kai_ray.model.objects import NodeSpec, TopologySpec

Level = Callable[[NodeSpec], tuple[str, ...] | None]
"""A node's domain at one level of the layout, as label values; None when it lacks a label."""


@dataclass(frozen=True)
class _Piece:
    """Node rows that go to one shard together: a domain, or a contiguous piece of one too big."""

    name: tuple[str, ...]
    part: tuple[int, ...]
    """Which piece of the domain (empty for a whole one): keeps names of pieces apart and ordered."""
    rows: np.ndarray
    depth: int
    """The index of the level it is a domain of (-1: all nodes, not yet looked at)."""


_NONE = np.array([], dtype=np.int64)


def partition_rows(
    specs: Sequence[NodeSpec], shards: int, domain_labels: Sequence[str] = (), pool_label: str | None = None
) -> list[np.ndarray]:
    """Per shard, the node rows (ascending) it holds; every row in exactly one shard.

    `domain_labels` are a Topology's level label keys, coarsest first. Domains are kept whole as
    long as they fit in a shard's fair size (ceil(nodes / shards)); one that does not is replaced by
    its domains one level down, and one at the finest level by contiguous pieces that fit. If that
    leaves fewer pieces than shards, the largest is split further, so that no shard idles. Pieces go
    to shards largest first (ties by name), each into the shard holding fewest nodes (ties by shard
    index); nodes lacking a level label then top up the emptiest shards in row order. With
    `pool_label`, pools (nodes without the label form the pool "", as KAI's default shard does) get
    shards of their own in proportion to their size when there are at least as many shards as
    pools; otherwise the pool is the coarsest level. A shard is
    empty only when there are more shards than nodes.
    """
    if shards < 1:
        raise ValueError(f"partition_rows: shards must be at least 1, got {shards}")
    if pool_label is not None and not pool_label:
        raise ValueError("partition_rows: pool_label must be a node label key, got an empty string")
    labels = tuple(domain_labels)
    for label in labels:
        if not label:
            raise ValueError(f"partition_rows: domain_labels has an empty label key: {list(labels)}")
    rows = np.arange(len(specs), dtype=np.int64)
    if pool_label is None:
        return _by_levels(specs, rows, shards, _topology_levels(labels, None))
    pools = _pools(specs, pool_label)
    if shards < len(pools):
        levels = [_level((), pool_label), *_topology_levels(labels, pool_label)]
        return _by_levels(specs, rows, shards, levels)
    parts: list[np.ndarray] = []
    counts = _shards_per_pool([len(pool_rows) for pool_rows in pools], shards)
    for pool_rows, count in zip(pools, counts, strict=True):
        parts.extend(_by_levels(specs, pool_rows, count, _topology_levels(labels, None)))
    parts.extend(_NONE.copy() for _ in range(shards - sum(counts)))
    return parts


def partitions_for(
    specs: Sequence[NodeSpec], shards: int, topologies: Sequence[TopologySpec], pool_label: str | None = None
) -> list[np.ndarray]:
    """`partition_rows` along the cluster's Topology: the one most nodes carry every level label of
    (ties by name), since partitions can follow only one layout."""
    covered = [(-_members(specs, topology), topology.name, topology) for topology in topologies]
    chosen = min((entry for entry in covered if entry[0] < 0), key=lambda entry: entry[:2], default=None)
    return partition_rows(specs, shards, chosen[2].levels if chosen else (), pool_label)


def _members(specs: Sequence[NodeSpec], topology: TopologySpec) -> int:
    return sum(all(level in spec.labels for level in topology.levels) for spec in specs)


def _level(labels: tuple[str, ...], pool_label: str | None) -> Level:
    """A level whose domains are the values of `labels`, inside the node's pool when one is given."""

    def domain(spec: NodeSpec) -> tuple[str, ...] | None:
        values = tuple(spec.labels.get(label) for label in labels)
        if any(value is None for value in values):
            return None
        pool = (spec.labels.get(pool_label, ""),) if pool_label is not None else ()
        return pool + tuple(value for value in values if value is not None)

    return domain


def _topology_levels(labels: tuple[str, ...], pool_label: str | None) -> list[Level]:
    """Level i's domain is the values of levels 0..i, so two racks named alike in two zones differ."""
    return [_level(labels[: depth + 1], pool_label) for depth in range(len(labels))]


def _pools(specs: Sequence[NodeSpec], pool_label: str) -> list[np.ndarray]:
    """Each pool's rows, pools ordered by label value."""
    members: dict[str, list[int]] = {}
    for row, spec in enumerate(specs):
        members.setdefault(spec.labels.get(pool_label, ""), []).append(row)
    return [np.array(members[name], dtype=np.int64) for name in sorted(members)]


def _shards_per_pool(sizes: list[int], shards: int) -> list[int]:
    """One shard each, then each further shard to the pool with most nodes per shard (ties by pool
    order) that still has more nodes than shards; shards no pool can use are left over."""
    counts = [1] * len(sizes)
    queue = [(-Fraction(size, 1), index) for index, size in enumerate(sizes) if size > 1]
    heapq.heapify(queue)
    for _ in range(shards - len(sizes)):
        if not queue:
            break
        _, index = heapq.heappop(queue)
        counts[index] += 1
        if sizes[index] > counts[index]:
            heapq.heappush(queue, (-Fraction(sizes[index], counts[index]), index))
    return counts


def _by_levels(
    specs: Sequence[NodeSpec], rows: np.ndarray, shards: int, levels: list[Level]
) -> list[np.ndarray]:
    """Partitions of `rows` along the levels (see `partition_rows`).

    Only a domain bigger than a shard is looked at one level down, so a zone that fits stays whole
    while its too big neighbour is handed out by rack.
    """
    if not levels or not len(rows):
        return [part.astype(np.int64) for part in np.array_split(rows, shards)]
    fair = math.ceil(len(rows) / shards)
    pending = [_Piece((), (), rows, -1)]
    pieces: list[_Piece] = []
    loose: list[np.ndarray] = []
    while pending:
        piece = pending.pop()
        if len(piece.rows) <= fair and piece.depth >= 0:
            pieces.append(piece)
            continue
        children, lacking = _split(specs, piece, levels, math.ceil(len(piece.rows) / fair))
        pending.extend(children)
        loose.append(lacking)
    fillers = np.sort(np.concatenate(loose))
    while len(pieces) + len(fillers) < min(shards, len(rows)):
        # An idle shard would cost more than a split domain: the largest is split, by its own
        # level's domains while it has any.
        divisible = [piece for piece in pieces if len(piece.rows) > 1]
        if not divisible:
            break
        deeper = [piece for piece in divisible if piece.depth + 1 < len(levels)]
        piece = min(deeper or divisible, key=_order)
        pieces.remove(piece)
        children, lacking = _split(specs, piece, levels, 2)
        pieces.extend(children)
        fillers = np.sort(np.concatenate([fillers, lacking]))
    return _assign(pieces, fillers, shards)


def _split(
    specs: Sequence[NodeSpec], piece: _Piece, levels: list[Level], count: int
) -> tuple[list[_Piece], np.ndarray]:
    """A piece's domains one level down and its rows lacking that level's label; at the finest
    level, `count` contiguous pieces of it (sizes differing by at most one)."""
    depth = piece.depth + 1
    if depth == len(levels):
        cuts = np.array_split(piece.rows, count)
        return [
            _Piece(piece.name, (*piece.part, index), cut, piece.depth) for index, cut in enumerate(cuts)
        ], _NONE
    members: dict[tuple[str, ...], list[int]] = {}
    lacking: list[int] = []
    for row in piece.rows.tolist():
        name = levels[depth](specs[row])
        if name is None:
            lacking.append(row)
        else:
            members.setdefault(name, []).append(row)
    children = [_Piece(name, (), np.array(found, dtype=np.int64), depth) for name, found in members.items()]
    return children, np.array(lacking, dtype=np.int64)


def _order(piece: _Piece) -> tuple[int, tuple[str, ...], tuple[int, ...]]:
    """Largest first, then by name: the order pieces are handed out in."""
    return (-len(piece.rows), piece.name, piece.part)


def _assign(pieces: list[_Piece], fillers: np.ndarray, shards: int) -> list[np.ndarray]:
    """Pieces into the least loaded shard (ties by index), then fillers topping up the emptiest."""
    held: list[list[np.ndarray]] = [[] for _ in range(shards)]
    loads = [(0, index) for index in range(shards)]
    for piece in sorted(pieces, key=_order):
        load, index = heapq.heappop(loads)
        held[index].append(piece.rows)
        heapq.heappush(loads, (load + len(piece.rows), index))
    sizes = np.zeros(shards, dtype=np.int64)
    for load, index in loads:
        sizes[index] = load
    extra = _water_fill(sizes, len(fillers))
    bounds = np.concatenate([[0], np.cumsum(extra)])
    for index in range(shards):
        held[index].append(fillers[bounds[index] : bounds[index + 1]])
    return [np.sort(np.concatenate(parts)).astype(np.int64) for parts in held]


def _water_fill(loads: np.ndarray, count: int) -> np.ndarray:
    """How many of `count` nodes each shard gets when each goes to the least loaded shard (ties by
    index): every shard is raised to a common level, the remainder goes one each in index order."""
    low, high = int(loads.min()), int(loads.min()) + count
    while low < high:
        middle = (low + high + 1) // 2
        if int(np.maximum(0, middle - loads).sum()) <= count:
            low = middle
        else:
            high = middle - 1
    extra = np.maximum(0, low - loads)
    remainder = count - int(extra.sum())
    extra[np.flatnonzero(loads <= low)[:remainder]] += 1
    return np.asarray(extra, dtype=np.int64)
