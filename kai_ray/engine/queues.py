"""Queue accounting for a session: allocated, requested and fair share per queue.

Every charge goes to the leaf queue and all its ancestors (§6.1), so a
parent's numbers always equal the sum of its children's. The arrays are
indexed by queue row; columns are (cpu, memory, gpu).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from kai_ray.fairshare.tree import QueueNode, fair_shares
from kai_ray.fairshare.usage import QueueUsage
from kai_ray.model.objects import UNLIMITED, QueueSpec
from kai_ray.model.resources import FAIRNESS_RESOURCES
from kai_ray.model.snapshot import Snapshot

if TYPE_CHECKING:
    from kai_ray.engine.booking import BookedSums
    from kai_ray.engine.part_basis import PartBasis


class QueueBook:
    def __init__(self, snapshot: Snapshot, usage: QueueUsage | None = None) -> None:
        self.names = sorted(snapshot.queues)
        self.usage: QueueUsage = usage or {}
        """Normalised past usage per queue and resource (§7); a queue missing from it used nothing."""
        self.index = {name: i for i, name in enumerate(self.names)}
        self.specs: list[QueueSpec] = [snapshot.queues[n] for n in self.names]
        self.children = {name: list(kids) for name, kids in snapshot.children.items()}
        count = len(self.names)
        self.deserved = np.array([_triple(q, "quota") for q in self.specs]).reshape(count, 3)
        self.limit = np.array([_triple(q, "limit") for q in self.specs]).reshape(count, 3)
        self.allocated = np.zeros((count, 3))
        self.allocated_non_preemptible = np.zeros((count, 3))
        self.allocated_rows: list[np.ndarray] = list(self.allocated)
        self._protected_rows: list[np.ndarray] = list(self.allocated_non_preemptible)
        """Each row of `allocated` and `allocated_non_preemptible` as a view made once (the arrays
        change only in place): every pod placed charges a chain of rows, and queue order reads
        them, and indexing the array makes a new view each time."""
        self.request = np.zeros((count, 3))
        self.fair_share = np.zeros((count, 3))
        self._allocatable_share = self._compute_allocatable_share()
        self.chains = {name: [self.index[q] for q in snapshot.ancestry(name)] for name in self.names}
        self.versions = [0] * count
        self._top_level = [q.name for q in self.specs if q.parent is None]
        """Bumped on every charge to a queue's subtree: lets callers cache what depends on it."""

    def top_level(self) -> list[str]:
        """A new list each time (callers may keep it), of names listed once: every pop asks."""
        return list(self._top_level)

    def charge(self, queue: str, vector: np.ndarray, non_preemptible: bool, sign: float = 1.0) -> None:
        # Row by row: the same sums as one fancy-indexed add (each row of a chain appears once),
        # without building an index array for the two or three rows of a chain on every move.
        # A charge adds the vector itself: the same floats as 1.0 times it, without a new array;
        # a row changes in place through its view: the same ufunc as `allocated[row] += delta`,
        # without that statement's write of the row back onto itself.
        delta = vector if sign == 1.0 else sign * vector
        for row in self.chains[queue]:
            self.versions[row] += 1
            allocated = self.allocated_rows[row]
            allocated += delta
            if non_preemptible:
                protected = self._protected_rows[row]
                protected += delta

    def add_request(self, queue: str, vector: np.ndarray) -> None:
        self.request[self.chains[queue]] += vector

    def open_with(self, sums: BookedSums) -> None:
        """Book the snapshot's placements and requests, added up per queue row (`booking`), as
        `charge` and `add_request` would one by one."""
        self.allocated += sums.allocated
        self.allocated_non_preemptible += sums.protected
        self.request += sums.requested
        counts = sums.charge_counts.tolist()
        self.versions = [version + count for version, count in zip(self.versions, counts, strict=True)]

    def add_outside(self, basis: PartBasis) -> None:
        """Add what the rest of the cluster's jobs hold and ask (a session over one part of it)."""
        self.allocated += basis.allocated
        self.allocated_non_preemptible += basis.allocated_non_preemptible
        self.request += basis.requested

    def compute_fair_shares(self, totals: np.ndarray, k_value: float) -> None:
        nodes = [
            QueueNode(
                name=q.name,
                parent=q.parent,
                priority=q.priority,
                created=q.created,
                deserved=_by_resource(self.deserved[i]),
                limit=_by_resource(self.limit[i]),
                over_quota_weight={
                    "cpu": q.cpu.over_quota_weight,
                    "memory": q.memory.over_quota_weight,
                    "gpu": q.gpu.over_quota_weight,
                },
                request=_by_resource(self.request[i]) if not self.children[q.name] else _zero_request(),
                usage=self.usage.get(q.name, {}),
            )
            for i, q in enumerate(self.specs)
        ]
        shares = fair_shares(nodes, _by_resource(totals), k_value)
        divided = np.zeros_like(self.fair_share)
        for name, share in shares.items():
            divided[self.index[name]] = [share[r] for r in FAIRNESS_RESOURCES]
        self.adopt_fair_shares(divided)

    def adopt_fair_shares(self, shares: np.ndarray) -> None:
        """Take fair shares divided elsewhere: a split cycle's coordinator judges the parts'
        reclaims by the shares their sessions divided."""
        self.fair_share[...] = shares
        self._allocatable_share = self._compute_allocatable_share()

    def _compute_allocatable_share(self) -> np.ndarray:
        """§6.1: limit if deserved is unlimited, else max(deserved, fair share) capped by the limit."""
        share = np.maximum(self.deserved, self.fair_share)
        share = np.where(self.limit != UNLIMITED, np.minimum(share, self.limit), share)
        result: np.ndarray = np.where(self.deserved == UNLIMITED, self.limit, share)
        return result

    def allocatable_share(self, row: int) -> np.ndarray:
        share: np.ndarray = self._allocatable_share[row]
        return share


def _triple(queue: QueueSpec, attribute: str) -> list[float]:
    return [getattr(queue.cpu, attribute), getattr(queue.memory, attribute), getattr(queue.gpu, attribute)]


def _by_resource(values: np.ndarray) -> dict[str, float]:
    return {r: float(v) for r, v in zip(FAIRNESS_RESOURCES, values, strict=True)}


def _zero_request() -> dict[str, float]:
    return dict.fromkeys(FAIRNESS_RESOURCES, 0.0)
