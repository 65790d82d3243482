"""What a job's tasks hold when a session opens: node rows, queue charges, queue requests.

Computed once per session job and kept with it (`Job.booking`): a job a `JobPool` keeps from
one session to the next has not moved, so it holds what it held, and the next session books
it with a few list extensions instead of a pass over its tasks.  The values and their order
are those of booking task by task, so a session opens to the same sums either way.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kai_ray.engine.jobs import Job, Task
from kai_ray.model.objects import OCCUPYING, QUEUE_CHARGING, TaskStatus

__all__ = ["JobBooking", "book_job"]

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
