"""The coordinator's step: accept the parts' placements under the queue rules they cannot see.

Each part's session knew every queue's sums at the start of the cycle but not what the other
parts placed during it, so two parts can each stay within a queue's limit (or a non-preemptible
job within its queue's deserved quota) and together exceed it. Jobs are accepted whole, highest
priority first, then oldest, then by name (the order jobs are dealt in), charging what their
placed pods take in the queue and every ancestor, with the very checks of the proportion plugin
(`ProportionPlugin._capacity_problem`, spec §6.4, invariants 14 and 15). A refused job keeps
none of its placements and waits for the whole-cluster pass. A job whose queue chain has no
limit and that is preemptible cannot be refused, which is most jobs of most clusters.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable

import numpy as np

from kai_ray.engine.queues import QueueBook
from kai_ray.model.objects import UNLIMITED, JobSpec
from kai_ray.model.resources import EPSILON
from kai_ray.model.snapshot import Snapshot
from kai_ray.split.basis import QueueSums
from kai_ray.split.part import PartAnswer

PodPlaced = tuple[int, int, float]
"""(its job's position, its position in the job's tasks, GPUs granted): a pod the parts placed."""


def pods_placed(
    answers: list[PartAnswer], jobs: list[JobSpec], moved: set[tuple[str, str]]
) -> list[PodPlaced]:
    """The pending pods `answers` placed (not the victims placed again, `moved`), in part order and
    as each answer lists them; `jobs` are the snapshot's. Only a cluster with queue limits,
    non-preemptible jobs or reclaims across parts asks (`accept`, `evictions_hold`)."""
    pods: list[PodPlaced] = []
    for answer in answers:
        placed = answer.placed
        for position, index, gpus in zip(placed.jobs, placed.tasks, placed.gpus, strict=True):
            if moved and (jobs[position].key, jobs[position].tasks[index].name) in moved:
                continue
            pods.append((position, index, gpus))
    return pods


def accept(
    snapshot: Snapshot, jobs: dict[str, JobSpec], placed: Callable[[], list[PodPlaced]], opening: QueueSums
) -> set[str]:
    """The keys of the jobs, among those with `placed` pods, that are refused."""
    book = QueueBook(snapshot)
    limited = {name: bool((book.limit[chain] != UNLIMITED).any()) for name, chain in book.chains.items()}
    if not any(limited.values()) and all(job.preemptible for job in jobs.values()):
        return set()
    allocated = opening.allocated.copy()
    protected = opening.allocated_non_preemptible.copy()
    charges = job_charges(snapshot.jobs, placed(), lambda job: not job.preemptible or limited[job.queue])
    refused = set()
    order = sorted(charges, key=lambda key: (-jobs[key].priority, jobs[key].created, key))
    for key in order:
        job, charge = jobs[key], charges[key]
        chain = book.chains[job.queue]
        if _over(book.limit[chain], allocated[chain], charge) or (
            not job.preemptible and _over(book.deserved[chain], protected[chain], charge)
        ):
            refused.add(key)
            continue
        allocated[chain] += charge
        if not job.preemptible:
            protected[chain] += charge
    return refused


def _over(bound: np.ndarray, used: np.ndarray, charge: np.ndarray) -> bool:
    return bool(((bound != UNLIMITED) & (charge > 0) & (used + charge > bound + EPSILON)).any())


def job_charges(
    jobs: list[JobSpec], placed: list[PodPlaced], charged: Callable[[JobSpec], bool]
) -> dict[str, np.ndarray]:
    """Per job for which `charged` holds, by key: (cpu, memory, GPUs granted) its `placed` pods
    take; `jobs` are the snapshot's."""
    charges: dict[str, np.ndarray] = defaultdict(lambda: np.zeros(3))
    keys: dict[int, str | None] = {}
    """Per job seen: its key, or None for a job not `charged`."""
    for position, index, gpus in placed:
        if position in keys:
            key = keys[position]
        else:
            job = jobs[position]
            key = keys[position] = job.key if charged(job) else None
        if key is not None:
            task = jobs[position].tasks[index]
            charges[key] += (task.cpu_millis, task.memory, gpus)
    return charges
