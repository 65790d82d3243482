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
from kai_ray.model.objects import PENDING, QUEUE_CHARGING, JobSpec
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
    """Each sum is added to pod by pod in job and task order, as the session books them, so the
    parts' sums and the whole cluster's agree to the last bit; the columns written out rather
    than looped over, since this runs for every pod of the cluster on each part's path."""
    names = sorted(snapshot.queues)
    index = {name: row for row, name in enumerate(names)}
    leaf = [[[0.0] * COLUMNS for _ in names] for _ in range(3)]
    allocated, protected, requested = leaf
    minimum, _ = gpu_memory_bounds(snapshot.nodes)
    table = snapshot.nodes
    rows, memory = table.index, table.gpu_memory.tolist()
    for job in jobs:
        row = index[job.queue]
        held, asked = allocated[row], requested[row]
        guarded = None if job.preemptible else protected[row]
        for task in job.tasks:
            status = task.status
            if task.node is not None and status in QUEUE_CHARGING:
                cpu, mem, gpus = task.cpu_millis, task.memory, task.accepted_gpus(memory[rows[task.node]])
                held[0] += cpu
                held[1] += mem
                held[2] += gpus
                asked[0] += cpu
                asked[1] += mem
                asked[2] += gpus
                if guarded is not None:
                    guarded[0] += cpu
                    guarded[1] += mem
                    guarded[2] += gpus
            elif status == PENDING:
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
