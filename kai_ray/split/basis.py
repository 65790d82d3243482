"""The whole cluster's numbers each part's session starts from (`PartBasis`).

Each part's jobs hold and ask something of their queues; a part's session books its own jobs
itself and is handed the sums of every other part's jobs and of the jobs kept for the
whole-cluster pass. The sums follow the session's own booking rules (`booking.book_job`): a
placed pod in a queue-charging status charges its queue with the GPUs it is granted on its
node, a pending pod asks for its GPUs on the smallest GPU, and every charge goes to the leaf
queue and each ancestor.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kai_ray.engine.part_basis import PartBasis
from kai_ray.engine.session import cluster_fairness_totals, gpu_memory_bounds
from kai_ray.model.objects import QUEUE_CHARGING, JobSpec, TaskStatus
from kai_ray.model.snapshot import Snapshot

COLUMNS = 3


@dataclass(frozen=True)
class QueueSums:
    """Per queue row (queue names sorted) × (cpu, memory, gpu), leaf and ancestors alike."""

    allocated: np.ndarray
    allocated_non_preemptible: np.ndarray
    requested: np.ndarray

    def __sub__(self, other: QueueSums) -> QueueSums:
        return QueueSums(
            self.allocated - other.allocated,
            self.allocated_non_preemptible - other.allocated_non_preemptible,
            self.requested - other.requested,
        )


def queue_sums(snapshot: Snapshot, jobs: list[JobSpec]) -> QueueSums:
    names = sorted(snapshot.queues)
    index = {name: row for row, name in enumerate(names)}
    leaf = [[[0.0] * COLUMNS for _ in names] for _ in range(3)]
    allocated, protected, requested = leaf
    minimum, _ = gpu_memory_bounds(snapshot.nodes)
    table = snapshot.nodes
    for job in jobs:
        row = index[job.queue]
        held, guarded, asked = allocated[row], protected[row], requested[row]
        for task in job.tasks:
            if task.node is not None and task.status in QUEUE_CHARGING:
                gpus = task.accepted_gpus(float(table.gpu_memory[table.index[task.node]]))
                charge = (task.cpu_millis, task.memory, gpus)
                for sums in (held, asked, *(() if job.preemptible else (guarded,))):
                    for column, value in enumerate(charge):
                        sums[column] += value
            elif task.status == TaskStatus.PENDING:
                asked[0] += task.cpu_millis
                asked[1] += task.memory
                asked[2] += task.accepted_gpus(minimum)
    chains = np.zeros((len(names), len(names)))
    for name, row in index.items():
        for ancestor in snapshot.ancestry(name):
            chains[index[ancestor], row] = 1.0
    up = np.einsum("al,slc->sac", chains, np.array(leaf).reshape(3, len(names), COLUMNS))
    return QueueSums(up[0], up[1], up[2])


def part_basis(snapshot: Snapshot, own: QueueSums, everything: QueueSums) -> PartBasis:
    """For one part: the cluster's totals and GPU memory bounds, and what every job but the
    part's own holds and asks (`everything` less `own`: what its session adds to its booking)."""
    minimum, maximum = gpu_memory_bounds(snapshot.nodes)
    others = everything - own
    return PartBasis(
        cluster_fairness_totals(snapshot),
        minimum,
        maximum,
        others.allocated,
        others.allocated_non_preemptible,
        others.requested,
    )
