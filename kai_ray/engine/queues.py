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

Charge = tuple[float, float, float]
"""What a task charges its queue (cpu, memory, GPUs), in plain floats."""


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
        self.allocated_rows: list[list[float]] = [[0.0, 0.0, 0.0] for _ in range(count)]
        self._protected_rows: list[list[float]] = [[0.0, 0.0, 0.0] for _ in range(count)]
        """What each queue row holds (all, and by non-preemptible jobs) as plain floats, the
        book's own record: every pod placed charges a chain of rows and queue order reads them,
        and a numpy call on three floats costs more than the arithmetic. The arrays are made
        from them when read (`allocated`)."""
        self._arrays: tuple[np.ndarray, np.ndarray] | None = None
        """`allocated` and `allocated_non_preemptible` as last made, until the next charge."""
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

    @property
    def allocated(self) -> np.ndarray:
        """Per queue row, what it holds (read-only: a charge makes a new array next time)."""
        return self._read_arrays()[0]

    @property
    def allocated_non_preemptible(self) -> np.ndarray:
        """Per queue row, what its non-preemptible jobs hold (read-only, as `allocated`)."""
        return self._read_arrays()[1]

    def _read_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        if self._arrays is None:
            allocated = np.array(self.allocated_rows, dtype=float).reshape(-1, 3)
            protected = np.array(self._protected_rows, dtype=float).reshape(-1, 3)
            allocated.flags.writeable = protected.flags.writeable = False
            self._arrays = allocated, protected
        return self._arrays

    def _add_arrays(self, allocated: np.ndarray, protected: np.ndarray) -> None:
        """Add whole arrays to the rows, as numpy adds them (one addition per float either way)."""
        self.allocated_rows = (self.allocated + allocated).tolist()
        self._protected_rows = (self.allocated_non_preemptible + protected).tolist()
        self._arrays = None

    def charge(self, queue: str, vector: Charge, non_preemptible: bool, sign: float = 1.0) -> None:
        # Float by float, in plain Python: the very sums numpy's in-place add of the row makes
        # (an IEEE addition per column either way), without a numpy call per row of a chain.
        # A charge adds the vector itself; taking it away adds its negation, as `sign * vector`
        # would in numpy (exact for a sign of -1.0).
        cpu, memory, gpus = vector if sign == 1.0 else (sign * vector[0], sign * vector[1], sign * vector[2])
        self._arrays = None
        versions, allocated_rows = self.versions, self.allocated_rows
        for row in self.chains[queue]:
            versions[row] += 1
            allocated = allocated_rows[row]
            allocated[0] += cpu
            allocated[1] += memory
            allocated[2] += gpus
            if non_preemptible:
                protected = self._protected_rows[row]
                protected[0] += cpu
                protected[1] += memory
                protected[2] += gpus

    def allocated_row(self, row: int) -> np.ndarray:
        """One row of `allocated`, without making the whole array after every charge."""
        return np.array(self.allocated_rows[row])

    def protected_row(self, row: int) -> np.ndarray:
        """One row of `allocated_non_preemptible`, as `allocated_row`."""
        return np.array(self._protected_rows[row])

    def add_request(self, queue: str, vector: np.ndarray) -> None:
        self.request[self.chains[queue]] += vector

    def open_with(self, sums: BookedSums) -> None:
        """Book the snapshot's placements and requests, added up per queue row (`booking`), as
        `charge` and `add_request` would one by one."""
        self._add_arrays(sums.allocated, sums.protected)
        self.request += sums.requested
        counts = sums.charge_counts.tolist()
        self.versions = [version + count for version, count in zip(self.versions, counts, strict=True)]

    def add_outside(self, basis: PartBasis) -> None:
        """Add what the rest of the cluster's jobs hold and ask (a session over one part of it)."""
        self._add_arrays(basis.allocated, basis.allocated_non_preemptible)
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
