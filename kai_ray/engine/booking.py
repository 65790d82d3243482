"""What a job's tasks hold when a session opens: node rows, queue charges, queue requests.

Computed once per session job and kept with it (`Job.booking`): a job a `JobPool` keeps from
one session to the next has not moved, so it holds what it held, and the next session books
it with a few list extensions instead of a pass over its tasks.  The values and their order
are those of booking task by task, so a session opens to the same sums either way.  All of a
session's bookings gathered in job order are an `Opening`, which a pool keeps too: a session
whose jobs are all the previous one's, in the same order, opens with it as it is.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kai_ray.engine.jobs import Job, Task
from kai_ray.engine.queues import QueueCharges
from kai_ray.model.objects import OCCUPYING, QUEUE_CHARGING, TaskStatus
from kai_ray.model.resources import NUM_RESOURCES

__all__ = ["JobBooking", "Opening", "book_job", "open_jobs"]

Vector = tuple[float, float, float]


@dataclass(frozen=True, slots=True)
class JobBooking:
    rows: list[int]
    """Node row of each task on a node that shares no GPU (booked in one go per session)."""
    requests: list[np.ndarray]
    statuses: list[TaskStatus]
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
    statuses: list[TaskStatus] = []
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
                statuses.append(status)
        if node is not None and status in QUEUE_CHARGING:
            charge = (task.spec.cpu_millis, task.spec.memory, task.accepted_gpus(float(gpu_memory[node])))
            charges.append(charge)
            charged.append(task.uid)
            requested.append(charge)
        elif status == TaskStatus.PENDING:
            pending += 1
            requested.append((task.spec.cpu_millis, task.spec.memory, task.accepted_gpus(min_gpu_memory)))
    return JobBooking(rows, requests, statuses, shared, charges, charged, requested, pending)


@dataclass(frozen=True, slots=True)
class Opening:
    """Every job's booking gathered in job order, as a session books them: read, never changed."""

    jobs: list[Job]
    rows: list[int]
    requests: np.ndarray
    """One row per entry of `rows`: the request vectors booked there."""
    statuses: list[TaskStatus]
    shared: list[Task]
    charges: QueueCharges
    charged: frozenset[int]
    pending: dict[Job, int]
    """Pending tasks per job, for the jobs that have one, in job order."""
    positions: dict[Job, int]


def open_jobs(
    jobs: list[Job], gpu_memory: np.ndarray, min_gpu_memory: float, chains: dict[str, list[int]]
) -> Opening:
    """Book `jobs` (computing the bookings they do not carry yet); `chains` gives each queue's
    rows up to the root, as the session's `QueueBook` numbers them."""
    rows: list[int] = []
    requests: list[np.ndarray] = []
    statuses: list[TaskStatus] = []
    shared: list[Task] = []
    charges = QueueCharges()
    charged: set[int] = set()
    pending: dict[Job, int] = {}
    positions: dict[Job, int] = {}
    for position, job in enumerate(jobs):
        positions[job] = position
        booking = job.booking
        if booking is None:
            booking = job.booking = book_job(job, gpu_memory, min_gpu_memory)
        if booking.rows:
            rows.extend(booking.rows)
            requests.extend(booking.requests)
            statuses.extend(booking.statuses)
        shared.extend(booking.shared)
        chain = chains[job.spec.queue]
        charges.charge(chain, booking.charges, not job.spec.preemptible)
        charges.request(chain, booking.requested)
        if booking.charged:
            charged.update(booking.charged)
        if booking.pending:
            pending[job] = booking.pending
    stacked = np.asarray(requests).reshape(len(rows), NUM_RESOURCES)
    return Opening(jobs, rows, stacked, statuses, shared, charges, frozenset(charged), pending, positions)
