"""What a session opens with: the sums of what the snapshot's placements hold, on nodes and queues.

A job's booking (`JobBooking`: its tasks' node rows, requests and queue charges) is computed
once and kept with the job (`Job.booking`): a job a `JobPool` keeps from one session to the next
has not moved, so it holds what it held.  A session's `Opening` is the sum of its jobs'
bookings: node rows taken and releasing, queue allocations and requests, added in job order.

A pool updates the last session's opening with the bookings of the jobs that came and went
instead of adding up every job again (40,000 running pods, 1 % churn: 400 jobs instead of
40,000), but only while that gives the very same floats: `SumBounds` follows, per resource, the
finest power of two every booked value is a multiple of and the sum of their magnitudes; while
that sum stays below 2**52 units of that power, every partial sum is exact, so any order of
adding and taking away gives the exact total, which the job-order sum of a fresh session gives
too.  Values that could round (a 0.3 GPU charge on a huge cluster) make the pool open afresh.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from kai_ray.engine.jobs import Job, Task
from kai_ray.model.objects import OCCUPYING, QUEUE_CHARGING, TaskStatus
from kai_ray.model.resources import NUM_RESOURCES

__all__ = ["JobBooking", "Opening", "book_job", "open_jobs", "reopen_jobs"]

Vector = tuple[float, float, float]
QUEUE_COLUMNS = 3
EXACT_UNITS = 2.0**52
"""How many of its finest unit a column's magnitudes may add up to and still sum exactly (one
bit of margin under float64's 53-bit significand for the estimate of the sum itself)."""


@dataclass(frozen=True, slots=True)
class JobBooking:
    rows: list[int]
    """Node row of each task on a node that shares no GPU."""
    requests: list[np.ndarray]
    weights: list[tuple[float, float]]
    """Per entry of `rows`, how its request counts against the node's idle and releasing columns
    (`_WEIGHTS`)."""
    shared: list[Task]
    """Tasks on a node that share a GPU: their groups are booked one by one."""
    charges: list[Vector]
    """What each task placed in a queue-charging status charges its queue, in task order."""
    charged: list[int]
    """Their uids."""
    requested: list[Vector]
    """What each task asks of its queue (placed or pending), in task order."""
    pending: int


def book_job(job: Job, gpu_memory: np.ndarray, min_gpu_memory: float) -> JobBooking:
    """`job`'s booking on a node table with `gpu_memory` per row; a pending task asks for its
    GPU memory on the smallest GPU (`min_gpu_memory`)."""
    rows: list[int] = []
    requests: list[np.ndarray] = []
    weights: list[tuple[float, float]] = []
    shared: list[Task] = []
    charges: list[Vector] = []
    charged: list[int] = []
    requested: list[Vector] = []
    pending = 0
    for task in job.tasks:
        node, status = task.node, task.status
        if node is not None and status in OCCUPYING:
            if task.is_shared_gpu:
                shared.append(task)
            else:
                rows.append(node)
                requests.append(task.request)
                weights.append(_WEIGHTS.get(status, _HOLDING))
        if node is not None and status in QUEUE_CHARGING:
            charge = (task.spec.cpu_millis, task.spec.memory, task.accepted_gpus(float(gpu_memory[node])))
            charges.append(charge)
            charged.append(task.uid)
            requested.append(charge)
        elif status == TaskStatus.PENDING:
            pending += 1
            requested.append((task.spec.cpu_millis, task.spec.memory, task.accepted_gpus(min_gpu_memory)))
    return JobBooking(rows, requests, weights, shared, charges, charged, requested, pending)


_HOLDING = (1.0, 0.0)
_WEIGHTS = {TaskStatus.RELEASING: (1.0, 1.0), TaskStatus.PIPELINED: (0.0, -1.0)}
"""(taken from idle, added to releasing) per unit of request, as `NodeState` books each status
one task at a time: a releasing task still holds its share, a pipelined one waits on it."""


@dataclass(frozen=True, slots=True)
class SumBounds:
    """Per resource column: the exponent of the finest power of two every value added is a
    multiple of, and the sum of their magnitudes (see the module's docstring)."""

    finest: np.ndarray
    magnitude: np.ndarray

    @classmethod
    def of(cls, *arrays: np.ndarray) -> SumBounds:
        finest = np.full(NUM_RESOURCES, np.iinfo(np.int64).max // 2, dtype=np.int64)
        magnitude = np.zeros(NUM_RESOURCES)
        for values in arrays:
            columns = values.shape[1]
            magnitude[:columns] += np.abs(values).sum(axis=0)
            finest[:columns] = np.minimum(finest[:columns], _finest_exponents(values))
        return cls(finest, magnitude)

    def __add__(self, other: SumBounds) -> SumBounds:
        return SumBounds(np.minimum(self.finest, other.finest), self.magnitude + other.magnitude)

    @property
    def exact(self) -> bool:
        with np.errstate(over="ignore"):
            units = self.magnitude / np.exp2(np.minimum(self.finest, 1023).astype(float))
        return bool(np.all(np.isfinite(self.magnitude)) and np.all(units < EXACT_UNITS))


def _finest_exponents(values: np.ndarray) -> np.ndarray:
    """Per column, the exponent of the largest power of two every finite nonzero value is a
    multiple of (a huge number for a column of zeros; the smallest exponent for a non-finite one,
    which no bound then admits)."""
    finite = np.isfinite(values)
    mantissa, exponent = np.frexp(np.where(finite, values, 0.0))
    significand = (np.abs(mantissa) * 2.0**53).astype(np.int64)
    lowest_bit = np.log2((significand & -significand).clip(min=1)).astype(np.int64)
    exponents = np.where(significand > 0, exponent - 53 + lowest_bit, np.iinfo(np.int64).max // 2)
    exponents = np.where(finite, exponents, -1100)
    return exponents.min(axis=0) if len(values) else np.full(values.shape[1], np.iinfo(np.int64).max // 2)


@dataclass(frozen=True, slots=True)
class BookedSums:
    """What a set of bookings adds up to: node rows taken from idle and releasing, queue rows
    allocated (all, and by non-preemptible jobs), requested, and charges counted per queue row."""

    used: np.ndarray
    releasing: np.ndarray
    allocated: np.ndarray
    protected: np.ndarray
    requested: np.ndarray
    charge_counts: np.ndarray
    bounds: SumBounds

    def __add__(self, other: BookedSums) -> BookedSums:
        return self._combined(other, np.add)

    def __sub__(self, other: BookedSums) -> BookedSums:
        return self._combined(other, np.subtract)

    def _combined(self, other: BookedSums, operation: np.ufunc) -> BookedSums:
        """Row by row; the bounds grow either way (a value taken away was added once)."""
        return BookedSums(
            operation(self.used, other.used),
            operation(self.releasing, other.releasing),
            operation(self.allocated, other.allocated),
            operation(self.protected, other.protected),
            operation(self.requested, other.requested),
            operation(self.charge_counts, other.charge_counts),
            self.bounds + other.bounds,
        )


def _sum_bookings(
    jobs: Iterable[Job], node_count: int, chains: dict[str, list[int]], queue_count: int
) -> BookedSums:
    """The bookings of `jobs` added up in their order (`np.add.at` adds element by element)."""
    rows: list[int] = []
    requests: list[np.ndarray] = []
    weights: list[tuple[float, float]] = []
    charge_rows: list[int] = []
    charges: list[Vector] = []
    protected_rows: list[int] = []
    protected: list[Vector] = []
    request_rows: list[int] = []
    requested: list[Vector] = []
    for job in jobs:
        booking = _booked(job)
        if booking.rows:
            rows.extend(booking.rows)
            requests.extend(booking.requests)
            weights.extend(booking.weights)
        chain = chains[job.spec.queue]
        if booking.charges:
            charge_rows.extend(chain * len(booking.charges))
            repeated = [vector for vector in booking.charges for _ in chain]
            charges.extend(repeated)
            if not job.spec.preemptible:
                protected_rows.extend(chain * len(booking.charges))
                protected.extend(repeated)
        if booking.requested:
            request_rows.extend(chain * len(booking.requested))
            requested.extend([vector for vector in booking.requested for _ in chain])
    node_requests = np.asarray(requests, dtype=float).reshape(len(rows), NUM_RESOURCES)
    scale = np.asarray(weights, dtype=float).reshape(len(rows), 2)
    used = np.zeros((node_count, NUM_RESOURCES))
    np.add.at(used, rows, node_requests * scale[:, :1])
    on_release = np.zeros((node_count, NUM_RESOURCES))
    np.add.at(on_release, rows, node_requests * scale[:, 1:])
    charge_values, request_values = _by_row(charges), _by_row(requested)
    counts = np.bincount(np.asarray(charge_rows, dtype=np.int64), minlength=queue_count)
    return BookedSums(
        used,
        on_release,
        _per_row(queue_count, charge_rows, charge_values),
        _per_row(queue_count, protected_rows, _by_row(protected)),
        _per_row(queue_count, request_rows, request_values),
        counts,
        SumBounds.of(node_requests, charge_values, request_values),
    )


def _per_row(row_count: int, rows: list[int], values: np.ndarray) -> np.ndarray:
    total = np.zeros((row_count, QUEUE_COLUMNS))
    np.add.at(total, rows, values)
    return total


def _by_row(vectors: Sequence[Vector]) -> np.ndarray:
    """`np.asarray(vectors)`, several times faster for long lists of tuples."""
    flat = itertools.chain.from_iterable(vectors)
    return np.fromiter(flat, float, QUEUE_COLUMNS * len(vectors)).reshape(-1, QUEUE_COLUMNS)


@dataclass(frozen=True, slots=True)
class Opening:
    """A session's jobs with their bookings added up: read, never changed."""

    jobs: list[Job]
    sums: BookedSums
    shared_jobs: list[Job]
    """The jobs with a task on a shared GPU, in job order."""
    charged: frozenset[int]
    """Uids of the tasks whose placement charges their queue."""
    pending: dict[Job, int]
    """Pending tasks per job, for the jobs that have one, in job order."""
    positions: dict[Job, int]

    def shared(self) -> list[Task]:
        """Tasks on a shared GPU, in job order: their GPU groups are booked one by one."""
        return [task for job in self.shared_jobs for task in _booked(job).shared]


def open_jobs(
    jobs: list[Job], gpu_memory: np.ndarray, min_gpu_memory: float, chains: dict[str, list[int]]
) -> Opening:
    """Book `jobs` (computing the bookings they do not carry yet) and add them all up; `chains`
    gives each queue's rows up to the root, as the session's `QueueBook` numbers them."""
    positions: dict[Job, int] = {}
    shared_jobs: list[Job] = []
    charged: set[int] = set()
    pending: dict[Job, int] = {}
    for position, job in enumerate(jobs):
        positions[job] = position
        booking = job.booking
        if booking is None:
            booking = job.booking = book_job(job, gpu_memory, min_gpu_memory)
        if booking.shared:
            shared_jobs.append(job)
        if booking.charged:
            charged.update(booking.charged)
        if booking.pending:
            pending[job] = booking.pending
    sums = _sum_bookings(jobs, len(gpu_memory), chains, len(chains))
    return Opening(jobs, sums, shared_jobs, frozenset(charged), pending, positions)


def reopen_jobs(
    previous: Opening,
    jobs: list[Job],
    gpu_memory: np.ndarray,
    min_gpu_memory: float,
    chains: dict[str, list[int]],
) -> Opening | None:
    """`previous` (on the same node table and queue chains) turned into the opening of `jobs` by
    adding the bookings of the jobs that came and taking away those of the jobs that went; None
    when that might not give the very floats `open_jobs` would (see the module's docstring)."""
    positions = {job: position for position, job in enumerate(jobs)}
    came = [job for job in jobs if job not in previous.positions]
    went = [job for job in previous.jobs if job not in positions]
    if not came and not went and all(map(operator.is_, jobs, previous.jobs)):
        return previous
    for job in came:
        if job.booking is None:
            job.booking = book_job(job, gpu_memory, min_gpu_memory)
    queue_count = len(chains)
    node_count = len(gpu_memory)
    sums = (
        previous.sums
        + _sum_bookings(came, node_count, chains, queue_count)
        - _sum_bookings(went, node_count, chains, queue_count)
    )
    if not sums.bounds.exact:
        return None
    went_charged = [uid for job in went for uid in _booked(job).charged]
    came_charged = [uid for job in came for uid in _booked(job).charged]
    charged = previous.charged.difference(went_charged).union(came_charged)
    in_order = positions.__getitem__
    pending = {job: count for job, count in previous.pending.items() if job in positions}
    pending.update((job, _booked(job).pending) for job in came if _booked(job).pending)
    shared_jobs = [job for job in previous.shared_jobs if job in positions]
    shared_jobs.extend(job for job in came if _booked(job).shared)
    return Opening(
        jobs,
        sums,
        sorted(shared_jobs, key=in_order),
        charged,
        {job: pending[job] for job in sorted(pending, key=in_order)},
        positions,
    )


def _booked(job: Job) -> JobBooking:
    assert job.booking is not None  # every job of an opening is booked
    return job.booking
