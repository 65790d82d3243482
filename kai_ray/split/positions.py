"""Every pod of a split cycle by position, as the coordinator checks the parts' answers.

A part names the pods it placed by position (`PlacedPods`): its job's in the snapshot's jobs plus
its own in that job's tasks, numbered one after the other in snapshot order, the order the plan
lists pods in. Which part may place each pod, on which rows, and how many pods each job has
pending are then columns the checks read with numpy, whatever the size of the answer.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kai_ray.model.snapshot import Snapshot
from kai_ray.split.deal import ClusterLoad, Deal

NO_PART = -1
"""The owner of a pod no part may place (a kept job's, or a divided job's outside every share),
and of a row no part places on."""


@dataclass(frozen=True)
class PodPositions:
    offsets: np.ndarray
    """Per job, the position of its first pod; one more at the end, the number of pods."""
    owners: np.ndarray
    """Per pod, the part that may place it: its job's, or for a divided job the part whose share
    it is in."""
    row_owners: np.ndarray
    """Per node row, the part that places on it."""
    pending: np.ndarray
    """Per job, its pending pods: the parts together must place exactly these."""

    def pods(self, jobs: np.ndarray, tasks: np.ndarray) -> np.ndarray:
        """The positions of the pods at `tasks` of the jobs at `jobs`."""
        pods: np.ndarray = self.offsets[jobs] + tasks
        return pods

    def job_of(self, pod: int) -> int:
        return int(np.searchsorted(self.offsets, pod, side="right")) - 1


def pod_positions(snapshot: Snapshot, deal: Deal, load: ClusterLoad) -> PodPositions:
    jobs = snapshot.jobs
    counts = np.fromiter((len(job.tasks) for job in jobs), dtype=np.int64, count=len(jobs))
    offsets = np.zeros(len(jobs) + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    job_owners = np.full(len(jobs), NO_PART, dtype=np.int64)
    for part in deal.parts:
        shared = part.share_tasks
        job_owners[[p for p in part.positions if p not in shared] if shared else part.positions] = part.index
    owners = np.repeat(job_owners, counts)
    for part in deal.parts:
        for position, members in part.share_tasks.items():
            owners[offsets[position] + np.asarray(members, dtype=np.int64)] = part.index
    row_owners = np.full(len(snapshot.nodes), NO_PART, dtype=np.int64)
    for part in deal.parts:
        row_owners[part.rows] = part.index
    pending = np.fromiter((demand[2] for demand in load.demand), dtype=np.int64, count=len(jobs))
    return PodPositions(offsets, owners, row_owners, pending)
