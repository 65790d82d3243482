"""Dealing a cluster to the parts of a split cycle: nodes by partition, each job to one part.

Why a job goes where it goes:
- a job with pods on nodes goes to the part holding most of them (ties: the lower part), so its
  gang, its queue charges and its elastic growth are all seen by one session; its pods on other
  parts' nodes come along as rows that part may not place on (`Part.foreign_rows`), and those
  parts count the pods as held, so every pod holds its node exactly once;
- a job with every pod pending goes to the part with the most room left in the resource it asks
  most of (GPUs, else CPU), jobs taken highest priority first then oldest, so the parts get
  demand in proportion to their room and high-priority jobs are spread first;
- a job asking more than any single part has free is kept for the whole-cluster pass.
The deal is a pure function of the snapshot and the partitions: the same snapshot is dealt the
same way, whichever runner computes the parts.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kai_ray.model.objects import ACTIVE_USED, OCCUPYING, HeldPod, JobSpec, TaskStatus
from kai_ray.model.snapshot import Snapshot

CPU_COLUMN, GPU_COLUMN = 0, 1


@dataclass(frozen=True)
class Part:
    index: int
    rows: np.ndarray
    """The node rows this part places on (rows of the whole snapshot's table, ascending)."""
    foreign_rows: np.ndarray
    """Other parts' rows where this part's jobs hold pods: in its table, never placed on."""
    jobs: list[JobSpec]
    """In snapshot order."""
    held: list[HeldPod]
    """Pods that hold this part's nodes but are not its jobs' (the snapshot's held pods, and
    pods of jobs dealt to other parts)."""
    node_names: frozenset[str]
    """The names of `rows`: what a part's answer may place on."""


@dataclass(frozen=True)
class Deal:
    parts: list[Part]
    kept: list[JobSpec]
    """Jobs left to the whole-cluster pass, in snapshot order."""


def deal(snapshot: Snapshot, partitions: list[np.ndarray]) -> Deal:
    table = snapshot.nodes
    part_of_row = np.zeros(len(table), dtype=np.int64)
    for index, members in enumerate(partitions):
        part_of_row[members] = index
    count = len(partitions)
    used = np.zeros((len(table), 2))
    homes: dict[int, int] = {}
    placed_rows: dict[int, list[int]] = {}
    for position, job in enumerate(snapshot.jobs):
        rows = [table.index[t.node] for t in job.tasks if t.node is not None and t.status in OCCUPYING]
        for task in job.tasks:
            if task.node is not None and task.status in OCCUPYING:
                used[table.index[task.node]] += _demand_of(task.cpu_millis, _gpus(task))
        if rows:
            placed_rows[position] = rows
            homes[position] = int(np.argmax(np.bincount(part_of_row[np.array(rows)], minlength=count)))
    for pod in snapshot.held:
        if pod.task.node is not None:
            used[table.index[pod.task.node]] += _demand_of(pod.task.cpu_millis, _gpus(pod.task))
    room = _free_by_part(snapshot, partitions, used)
    kept_positions = _deal_pending(snapshot.jobs, homes, room)
    return _parts(snapshot, partitions, part_of_row, homes, placed_rows, kept_positions)


def demand_fits(snapshot: Snapshot) -> bool:
    """Whether every pending pod's CPU and GPUs together fit in what the schedulable nodes have
    free: only then is no job's placement a question of who goes first (fair share, queue order),
    which one part cannot answer for another."""
    table = snapshot.nodes
    used = np.zeros((len(table), 2))
    demand = np.zeros(2)
    for job in snapshot.jobs:
        demand += _pending_demand(job)
        for task in job.tasks:
            if task.node is not None and task.status in OCCUPYING:
                used[table.index[task.node]] += _demand_of(task.cpu_millis, _gpus(task))
    for pod in snapshot.held:
        if pod.task.node is not None:
            used[table.index[pod.task.node]] += _demand_of(pod.task.cpu_millis, _gpus(pod.task))
    free = _free_by_part(snapshot, [np.arange(len(table))], used)[0]
    return bool((demand <= free).all())


def has_stale_gang(snapshot: Snapshot) -> bool:
    """Whether a job has pods running but fewer than a pod set's minimum (`stale_gang.is_stale`,
    read off the snapshot's pods)."""
    for job in snapshot.jobs:
        active: dict[str, int] = {}
        for task in job.tasks:
            if task.status == TaskStatus.SUCCEEDED:
                break
            if task.status in ACTIVE_USED:
                active[task.subgroup] = active.get(task.subgroup, 0) + 1
        else:
            if active and any(
                active.get(pod_set.name, 0) < pod_set.min_available
                for pod_set in job.subgroups.all_pod_sets()
            ):
                return True
    return False


def _gpus(task: object) -> float:
    gpu = float(getattr(task, "gpu", 0.0))
    return gpu * int(getattr(task, "gpu_devices", 1)) if 0.0 < gpu < 1.0 else gpu


def _demand_of(cpu: float, gpus: float) -> np.ndarray:
    return np.array((cpu, gpus))


def _free_by_part(snapshot: Snapshot, partitions: list[np.ndarray], used: np.ndarray) -> np.ndarray:
    """(cpu, gpu) free on each part's schedulable nodes."""
    table = snapshot.nodes
    capacity = np.stack((table.allocatable[:, 0], table.allocatable[:, 2]), axis=1)
    free = np.maximum(capacity - used, 0.0) * table.schedulable[:, None]
    return np.array([free[rows].sum(axis=0) for rows in partitions]).reshape(len(partitions), 2)


def _pending_demand(job: JobSpec) -> np.ndarray:
    cpu = gpus = 0.0
    for task in job.tasks:
        if task.status == TaskStatus.PENDING:
            cpu += task.cpu_millis
            gpus += _gpus(task)
    return _demand_of(cpu, gpus)


def _deal_pending(jobs: list[JobSpec], homes: dict[int, int], room: np.ndarray) -> set[int]:
    """Deals every job without placed pods into `homes`; returns the positions of jobs kept."""
    free = room.copy()
    kept: set[int] = set()
    order = sorted(
        (p for p in range(len(jobs)) if p not in homes),
        key=lambda p: (-jobs[p].priority, jobs[p].created, jobs[p].key),
    )
    for position in order:
        demand = _pending_demand(jobs[position])
        column = GPU_COLUMN if demand[GPU_COLUMN] > 0 else CPU_COLUMN
        if not (room[:, column] >= demand[column]).any():
            kept.add(position)
            continue
        chosen = int(np.argmax(free[:, column]))
        homes[position] = chosen
        free[chosen] -= demand
    return kept


def _parts(
    snapshot: Snapshot,
    partitions: list[np.ndarray],
    part_of_row: np.ndarray,
    homes: dict[int, int],
    placed_rows: dict[int, list[int]],
    kept_positions: set[int],
) -> Deal:
    count = len(partitions)
    jobs: list[list[JobSpec]] = [[] for _ in range(count)]
    held: list[list[HeldPod]] = [[] for _ in range(count)]
    foreign: list[set[int]] = [set() for _ in range(count)]
    table = snapshot.nodes
    for pod in snapshot.held:
        if pod.task.node is not None:
            held[int(part_of_row[table.index[pod.task.node]])].append(pod)
    kept = []
    for position, job in enumerate(snapshot.jobs):
        if position in kept_positions:
            kept.append(job)
            continue
        home = homes[position]
        jobs[home].append(job)
        for row in placed_rows.get(position, ()):
            owner = int(part_of_row[row])
            if owner != home:
                foreign[home].add(row)
        if any(int(part_of_row[row]) != home for row in placed_rows.get(position, ())):
            for task in job.tasks:
                if task.node is not None and task.status in OCCUPYING:
                    owner = int(part_of_row[table.index[task.node]])
                    if owner != home:
                        held[owner].append(HeldPod(job.namespace, task, foreign=False))
    parts = [
        Part(
            index,
            np.asarray(partitions[index], dtype=np.int64),
            np.array(sorted(foreign[index]), dtype=np.int64),
            jobs[index],
            held[index],
            frozenset(table.names[row] for row in partitions[index].tolist()),
        )
        for index in range(count)
    ]
    return Deal(parts, kept)
