"""The whole cluster's numbers each part's session starts from (`PartBasis`).

Each part's jobs hold and ask something of their queues; a part's session books its own jobs
itself and is handed the sums of every other part's jobs and of the jobs kept for the
whole-cluster pass. The sums follow the session's own booking rules (`booking.book_job`): a
placed pod in a queue-charging status charges its queue with the GPUs it is granted on its
node, a pending pod asks for its GPUs on the smallest GPU, and every charge goes to the leaf
queue and each ancestor.

The opening sums and the deal's `ClusterLoad` are gathered in one pass over every pod
(`survey`): both read each pod's status, node and request, and the pass is on every part's
path before its session opens.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kai_ray.engine.part_basis import PartBasis
from kai_ray.engine.requests import cluster_fairness_totals, gpu_memory_bounds
from kai_ray.model.objects import OCCUPYING, PENDING, QUEUE_CHARGING, JobSpec
from kai_ray.model.snapshot import Snapshot
from kai_ray.split.deal import NO_DEMAND, RELEASING, ClusterLoad, taken_gpus

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


class _LoadTally:
    """What the deal reads of the placed pods, added to pod by pod as `np.add.at` would."""

    def __init__(self, rows: int) -> None:
        self.cpu = [0.0] * rows
        self.gpus = [0.0] * rows
        self.releasing = [0.0] * rows
        self.jobs: list[int] = []
        """Per placed pod, its job's position."""
        self.rows: list[int] = []
        """Per placed pod, its node's row."""
        self.demand: list[tuple[float, float, int]] = []

    def load(self, snapshot: Snapshot) -> ClusterLoad:
        """Adds the snapshot's held pods (after every job's, as the deal counts them)."""
        index = snapshot.nodes.index
        for pod in snapshot.held:
            task = pod.task
            if task.node is not None:
                row, taken = index[task.node], taken_gpus(task)
                self.cpu[row] += task.cpu_millis
                self.gpus[row] += taken
                if task.status in RELEASING:
                    self.releasing[row] += taken
        return ClusterLoad(
            np.column_stack((self.cpu, self.gpus)).reshape(len(self.cpu), 2),
            np.array(self.releasing, dtype=np.float64),
            self.demand,
            np.array(self.jobs, dtype=np.int64),
            np.array(self.rows, dtype=np.int64),
        )


def survey(snapshot: Snapshot) -> tuple[QueueSums, ClusterLoad]:
    """Every job's queue sums at the start of the cycle, and the cluster's load for the deal."""
    tally = _LoadTally(len(snapshot.nodes))
    return _sums(snapshot, snapshot.jobs, tally), tally.load(snapshot)


def queue_sums(snapshot: Snapshot, jobs: list[JobSpec]) -> QueueSums:
    """The queue sums of `jobs` alone (a part's own)."""
    return _sums(snapshot, jobs, None)


def _sums(snapshot: Snapshot, jobs: list[JobSpec], tally: _LoadTally | None) -> QueueSums:
    """Each sum is added to pod by pod in job and task order, as the session books them, so the
    parts' sums and the whole cluster's agree to the last bit; the columns written out rather
    than looped over, and a pod's GPUs read off its fields unless it shares a GPU, since this
    runs for every pod of the cluster on each part's path. With `tally`, the placed pods' load
    and each job's pending demand are gathered on the way."""
    names = sorted(snapshot.queues)
    index = {name: row for row, name in enumerate(names)}
    leaf = [[[0.0] * COLUMNS for _ in names] for _ in range(3)]
    allocated, protected, requested = leaf
    minimum, _ = gpu_memory_bounds(snapshot.nodes)
    table = snapshot.nodes
    rows, memory = table.index, table.gpu_memory.tolist()
    if tally is not None:
        used_cpu, used_gpus, releasing = tally.cpu, tally.gpus, tally.releasing
        placed_jobs, placed_rows, demand = tally.jobs, tally.rows, tally.demand
    for position, job in enumerate(jobs):
        row = index[job.queue]
        held, asked = allocated[row], requested[row]
        guarded = None if job.preemptible else protected[row]
        cpu = gpu = 0.0
        pods = 0
        for task in job.tasks:
            status = task.status
            if status == PENDING:
                millis, gpus = task.cpu_millis, task.gpu
                taken = granted = gpus
                if 0.0 < gpus < 1.0 or task.gpu_memory_mib > 0:
                    taken, granted = taken_gpus(task), task.accepted_gpus(minimum)
                asked[0] += millis
                asked[1] += task.memory
                asked[2] += granted
                cpu += millis
                gpu += taken
                pods += 1
                continue
            node = task.node
            if node is None or status not in OCCUPYING:
                continue
            millis, gpus, node_row = task.cpu_millis, task.gpu, rows[node]
            taken = granted = gpus
            if 0.0 < gpus < 1.0 or task.gpu_memory_mib > 0:
                taken, granted = taken_gpus(task), task.accepted_gpus(memory[node_row])
            if tally is not None:
                placed_jobs.append(position)
                placed_rows.append(node_row)
                used_cpu[node_row] += millis
                used_gpus[node_row] += taken
                if status in RELEASING:
                    releasing[node_row] += taken
            if status in QUEUE_CHARGING:
                mem = task.memory
                held[0] += millis
                held[1] += mem
                held[2] += granted
                asked[0] += millis
                asked[1] += mem
                asked[2] += granted
                if guarded is not None:
                    guarded[0] += millis
                    guarded[1] += mem
                    guarded[2] += granted
        if tally is not None:
            demand.append((cpu, gpu, pods) if pods else NO_DEMAND)
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
