"""Dealing a cluster to the parts of a split cycle: nodes by partition, each job to one part.

Why a job goes where it goes:
- a job with pods on nodes goes to the part holding most of them (ties: the lower part), so its
  gang, its queue charges and its elastic growth are all seen by one session; its pods on other
  parts' nodes come along as rows that part may not place on (`Part.foreign_rows`), and those
  parts count the pods as held, so every pod holds its node exactly once;
- a job with every pod pending goes, highest priority first then oldest, to the part with the
  least work dealt so far (`JOB_WEIGHT` per job plus one per pod: a part's cycle costs about
  that) among those with room left for it in CPU and GPUs, else to the one with the most GPUs
  (or CPU, for a job without GPUs) left;
- a job with every pod pending that no part has room for goes to the part with the most left,
  to make room there by evicting (reclaim, preempt, consolidation run in every part), unless it is
  a plain gang (pod sets side by side, no topology constraint), which is divided instead: each
  part gets a share of each pod set's pods in proportion to its capacity, as a gang of its own
  (`Part.share_tasks`), so a gang no part can hold is assembled from the parts' offers, all of
  them or none (`checks`);
- a job asking more than any single part has at all, and not divisible, is kept for the local
  engine.
The deal is a pure function of the snapshot and the partitions: the same snapshot is dealt the
same way, whichever runner computes the parts.
"""

from __future__ import annotations

import dataclasses
import heapq
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from kai_ray.model.objects import ACTIVE_USED, OCCUPYING, PENDING, HeldPod, JobSpec, TaskSpec, TaskStatus
from kai_ray.model.snapshot import Snapshot

CPU_COLUMN, GPU_COLUMN = 0, 1
RELEASING = frozenset({TaskStatus.RELEASING, TaskStatus.STUCK_IN_RELEASING})
JOB_WEIGHT = 1.7
"""A job's share of a part's cycle, in pods: measured on `big-5000x40000`, where choosing the next
job (queue order, gang collection) costs about 1.7 times placing one pod."""


@dataclass(frozen=True)
class ClusterLoad:
    """What a deal reads of the snapshot's pods, gathered with the opening queue sums in one pass
    over them (`basis.survey`)."""

    used: np.ndarray
    """Per node row, (cpu, gpus) held by placed pods and held pods."""
    releasing: np.ndarray
    """Per node row, the GPUs of `used` that pods on their way out hold: a pod can be pipelined
    onto them without evicting anything."""
    demand: list[tuple[float, float, int]]
    """Per job, (cpu, gpus, pods) of its pending pods."""
    placed_jobs: np.ndarray
    """Per placed pod of a job (in job and task order), the job's position."""
    placed_rows: np.ndarray
    """Per placed pod of a job, its node's row."""


NO_DEMAND = (0.0, 0.0, 0)
"""The demand of a job with no pending pod."""


def must_free(snapshot: Snapshot, load: ClusterLoad) -> float:
    """The GPUs every plan that places all pending pods must take from running pods: what the
    pending pods ask beyond what the schedulable nodes have free or releasing, since a placed
    pod's GPUs come from a free GPU, a releasing pod's or an evicted pod's."""
    table = snapshot.nodes
    staying = load.used[:, GPU_COLUMN] - load.releasing
    usable = float((np.maximum(table.allocatable[:, 2] - staying, 0.0) * table.schedulable).sum())
    return max(0.0, sum(d[1] for d in load.demand) - usable)


@dataclass(frozen=True)
class Part:
    index: int
    rows: np.ndarray
    """The node rows this part places on (rows of the whole snapshot's table, ascending)."""
    foreign_rows: np.ndarray
    """Other parts' rows where this part's jobs hold pods: in its table, never placed on."""
    jobs: list[JobSpec]
    """In snapshot order."""
    positions: list[int]
    """Each of `jobs`' position in the snapshot's jobs: a part's answer names pods by position
    (`PlacedPods`), not by name."""
    held: list[HeldPod]
    """Pods that hold this part's nodes but are not its jobs' (the snapshot's held pods, and
    pods of jobs dealt to other parts)."""
    share_tasks: dict[int, list[int]]
    """Divided job's position → the positions in the whole job's tasks of the pods this part may
    place (its share's tasks, in their order; the job's other pods are other parts' shares)."""

    @cached_property
    def job_keys(self) -> frozenset[str]:
        """The keys of `jobs`: whose pods a part's answer may evict. Only the coordinator asks, so
        a part computing the layout for itself does not build every part's."""
        return frozenset(job.key for job in self.jobs)


@dataclass(frozen=True)
class Deal:
    parts: list[Part]
    kept: list[JobSpec]
    """Jobs left to the whole-cluster pass, in snapshot order."""


UNDEALT = -1
"""A job's home before the deal gives it one (and after, for a job kept or divided)."""


def deal(snapshot: Snapshot, partitions: list[np.ndarray], load: ClusterLoad) -> Deal:
    table = snapshot.nodes
    part_of_row = np.zeros(len(table), dtype=np.int64)
    for index, members in enumerate(partitions):
        part_of_row[members] = index
    homes, strays = _homes(load, part_of_row, len(partitions), len(snapshot.jobs))
    room = _free_by_part(snapshot, partitions, load.used)
    capacity = _free_by_part(snapshot, partitions, np.zeros_like(load.used))
    kept_positions, divided = _deal_pending(snapshot.jobs, load, homes, room, capacity)
    return _parts(snapshot, partitions, part_of_row.tolist(), homes, strays, kept_positions, divided)


def _homes(load: ClusterLoad, part_of_row: np.ndarray, count: int, jobs: int) -> tuple[list[int], list[int]]:
    """Per job, the part holding most of its placed pods (ties: the lower part), or `UNDEALT`
    for a job without any; and the positions of the jobs with a placed pod on another part's
    nodes, ascending. Counted for every pod at once: most jobs of a large cluster have placed
    pods, and a per-job count costs more than the choice."""
    owners = part_of_row[load.placed_rows]
    held = np.bincount(load.placed_jobs * count + owners, minlength=jobs * count).reshape(jobs, count)
    homes = np.where(held.any(axis=1), held.argmax(axis=1), UNDEALT)
    strays = np.unique(load.placed_jobs[owners != homes[load.placed_jobs]])
    return homes.tolist(), strays.tolist()


def divisible(job: JobSpec) -> bool:
    """A plain gang every pod of which waits: pod sets side by side (no nested sets, no "any k of
    them"), no topology constraint, so any of its pods can go to any part and the parts' shares
    of each pod set add up to it."""
    groups = job.subgroups
    return (
        len(job.tasks) >= 2
        and not groups.subgroup_sets
        and groups.min_subgroups is None
        and groups.topology is None
        and all(pod_set.topology is None for pod_set in groups.pod_sets)
        and all(task.status == TaskStatus.PENDING for task in job.tasks)
    )


def divide_job(job: JobSpec, weights: list[float]) -> list[list[int]]:
    """Each part's pods of `job` (task positions, in task order): every pod set's pods divided in
    proportion to `weights`, the first ones to the first part."""
    positions: dict[str, list[int]] = {}
    for index, task in enumerate(job.tasks):
        positions.setdefault(task.subgroup, []).append(index)
    shares: list[list[int]] = [[] for _ in weights]
    for members in positions.values():
        start = 0
        for part, size in enumerate(divide(len(members), weights)):
            shares[part].extend(members[start : start + size])
            start += size
    return [sorted(share) for share in shares]


def divide(count: int, weights: list[float]) -> list[int]:
    """`count` pods in proportion to `weights`, by largest remainder (ties: the lower part)."""
    total = sum(weights)
    exact = [count * weight / total for weight in weights]
    shares = [int(value) for value in exact]
    order = sorted(range(len(weights)), key=lambda part: (-(exact[part] - shares[part]), part))
    for part in order[: count - sum(shares)]:
        shares[part] += 1
    return shares


def pod_counts(snapshot: Snapshot) -> tuple[int, int] | None:
    """(pending pods, placed pods) of the snapshot, or None when a job has pods running but fewer
    than a pod set's minimum (`stale_gang.is_stale`, read off the snapshot's pods): whether a
    cycle is split, decided in one pass over the pods, before the parts are asked. Most jobs have
    one pod set and their active pods in it, so those are judged by their count alone."""
    pending = placed = 0
    succeeded = TaskStatus.SUCCEEDED
    for job in snapshot.jobs:
        active = waiting = 0
        done = alike = False
        subgroup = ""
        for task in job.tasks:
            status = task.status
            if status == PENDING:
                waiting += 1
            elif status in ACTIVE_USED:
                active += 1
                if subgroup != task.subgroup:
                    alike, subgroup = active == 1, task.subgroup
            elif status == succeeded:
                done = True
        pending += waiting
        placed += active
        if not active or done:
            continue
        groups = job.subgroups
        pod_sets = groups.pod_sets
        if alike and len(pod_sets) == 1 and not groups.subgroup_sets:
            if (active if pod_sets[0].name == subgroup else 0) < pod_sets[0].min_available:
                return None
        elif _below_minimum(job):
            return None
    return pending, placed


def _below_minimum(job: JobSpec) -> bool:
    """Whether a pod set of `job` has fewer active pods than its minimum."""
    counts: dict[str, int] = {}
    for task in job.tasks:
        if task.status in ACTIVE_USED:
            counts[task.subgroup] = counts.get(task.subgroup, 0) + 1
    return any(
        counts.get(pod_set.name, 0) < pod_set.min_available for pod_set in job.subgroups.all_pod_sets()
    )


def taken_gpus(task: TaskSpec) -> float:
    """GPUs a pod takes for the deal's purpose: a fraction on each of its devices."""
    return task.gpu * task.gpu_devices if 0.0 < task.gpu < 1.0 else task.gpu


def _free_by_part(snapshot: Snapshot, partitions: list[np.ndarray], used: np.ndarray) -> np.ndarray:
    """(cpu, gpu) free on each part's schedulable nodes."""
    table = snapshot.nodes
    capacity = np.stack((table.allocatable[:, 0], table.allocatable[:, 2]), axis=1)
    free = np.maximum(capacity - used, 0.0) * table.schedulable[:, None]
    return np.array([free[rows].sum(axis=0) for rows in partitions]).reshape(len(partitions), 2)


def _deal_pending(
    jobs: list[JobSpec], load: ClusterLoad, homes: list[int], room: np.ndarray, capacity: np.ndarray
) -> tuple[set[int], dict[int, list[list[int]]]]:
    """Deals every job without placed pods (`UNDEALT` in `homes`) into `homes` or divides it;
    returns the positions of jobs kept, and each divided job's pods per part.

    Plain floats over the few parts: numpy calls per job cost more than the choice itself; the
    parts by work in a heap, so a job looks at the parts only until one has room for it."""
    free, whole = room.tolist(), capacity.tolist()
    most_free = [max(part[column] for part in free) for column in (CPU_COLUMN, GPU_COLUMN)]
    most_whole = [max(part[column] for part in whole) for column in (CPU_COLUMN, GPU_COLUMN)]
    left = [list(part) for part in free]
    work = [0.0] * len(free)
    parts = range(len(free))
    by_work = [(0.0, part) for part in parts]
    """A heap of (work dealt, part): the part `min` over (work, part) would pick comes first."""
    kept: set[int] = set()
    divided: dict[int, list[list[int]]] = {}
    for position in dealing_order(jobs, [position for position, home in enumerate(homes) if home == UNDEALT]):
        cpu, gpus, pods = load.demand[position]
        column, amount = (GPU_COLUMN, gpus) if gpus > 0 else (CPU_COLUMN, cpu)
        if most_free[column] < amount:
            weights = [whole[part][column] for part in parts]
            if divisible(jobs[position]) and sum(weights) > 0:
                divided[position] = shares = divide_job(jobs[position], weights)
                tasks = jobs[position].tasks
                for part in parts:
                    left[part][CPU_COLUMN] -= sum(tasks[i].cpu_millis for i in shares[part])
                    left[part][GPU_COLUMN] -= sum(taken_gpus(tasks[i]) for i in shares[part])
                    work[part] += (JOB_WEIGHT + pods) * len(shares[part]) / len(tasks)
                by_work = [(work[part], part) for part in parts]
                heapq.heapify(by_work)
                continue
            if most_whole[column] < amount:
                kept.add(position)
                continue
        chosen = _pop_least_work_with_room(by_work, left, cpu, gpus)
        if chosen is None:
            chosen = max(parts, key=lambda part: (left[part][column], -part))
            by_work.remove((work[chosen], chosen))
            heapq.heapify(by_work)
        homes[position] = chosen
        left[chosen][CPU_COLUMN] -= cpu
        left[chosen][GPU_COLUMN] -= gpus
        work[chosen] += JOB_WEIGHT + pods
        heapq.heappush(by_work, (work[chosen], chosen))
    return kept, divided


def dealing_order(jobs: list[JobSpec], positions: list[int]) -> list[int]:
    """`positions` in the order their jobs are dealt: highest priority first, then oldest, then by
    key, then by position (`sorted` over those tuples). Sorted on the numbers first, keys read
    only where they tie: a large cluster's pending jobs are thousands, and comparing tuples of
    them costs more than the deal's choices."""
    priorities = np.array([jobs[position].priority for position in positions], dtype=np.int64)
    created = np.array([jobs[position].created for position in positions], dtype=np.float64)
    if np.isnan(created).any():
        return sorted(positions, key=lambda position: _dealing_key(jobs[position], position))
    order = np.lexsort((created, -priorities))
    ranked = [positions[index] for index in order.tolist()]
    priorities, created = priorities[order], created[order]
    tied = (priorities[1:] == priorities[:-1]) & (created[1:] == created[:-1])
    edges = np.flatnonzero(np.diff(np.concatenate(([False], tied, [False])).astype(np.int8))).tolist()
    for start, last in zip(edges[::2], edges[1::2], strict=True):
        ranked[start : last + 1] = sorted(
            ranked[start : last + 1], key=lambda position: (jobs[position].key, position)
        )
    return ranked


def _dealing_key(job: JobSpec, position: int) -> tuple[int, float, str, int]:
    return (-job.priority, job.created, job.key, position)


def _pop_least_work_with_room(
    by_work: list[tuple[float, int]], left: list[list[float]], cpu: float, gpus: float
) -> int | None:
    """The part with the least work among those with `cpu` and `gpus` left, taken off the heap;
    None (the heap as it was) when none has."""
    passed = []
    chosen = None
    while by_work:
        entry = heapq.heappop(by_work)
        room = left[entry[1]]
        if room[CPU_COLUMN] >= cpu and room[GPU_COLUMN] >= gpus:
            chosen = entry[1]
            break
        passed.append(entry)
    for entry in passed:
        heapq.heappush(by_work, entry)
    return chosen


def _parts(
    snapshot: Snapshot,
    partitions: list[np.ndarray],
    owners: list[int],
    homes: list[int],
    strays: list[int],
    kept_positions: set[int],
    divided: dict[int, list[list[int]]],
) -> Deal:
    count = len(partitions)
    held: list[list[HeldPod]] = [[] for _ in range(count)]
    foreign: list[set[int]] = [set() for _ in range(count)]
    table = snapshot.nodes
    for pod in snapshot.held:
        if pod.task.node is not None:
            held[owners[table.index[pod.task.node]]].append(pod)
    for position in strays:
        job, home = snapshot.jobs[position], homes[position]
        for task in job.tasks:
            if task.node is not None and task.status in OCCUPYING:
                row = table.index[task.node]
                owner = owners[row]
                if owner != home:
                    foreign[home].add(row)
                    held[owner].append(HeldPod(job.namespace, task, foreign=False))
    shared: list[dict[int, JobSpec]] = [{} for _ in range(count)]
    share_tasks: list[dict[int, list[int]]] = [{} for _ in range(count)]
    for position in sorted(divided):
        job = snapshot.jobs[position]
        for index, members in enumerate(divided[position]):
            if members:
                shared[index][position] = _share(job, members)
                share_tasks[index][position] = members
    dealt = np.array(homes, dtype=np.int64)
    parts = []
    for index in range(count):
        positions = _part_positions(np.flatnonzero(dealt == index).tolist(), shared[index])
        parts.append(
            Part(
                index,
                np.asarray(partitions[index], dtype=np.int64),
                np.array(sorted(foreign[index]), dtype=np.int64),
                _part_jobs(snapshot.jobs, positions, shared[index]),
                positions,
                held[index],
                share_tasks[index],
            )
        )
    return Deal(parts, [snapshot.jobs[position] for position in sorted(kept_positions)])


def _part_positions(positions: list[int], shared: dict[int, JobSpec]) -> list[int]:
    """A part's job positions in snapshot order: those dealt to it at `positions` (ascending) and
    its shares of divided jobs at theirs."""
    return sorted([*positions, *shared]) if shared else positions


def _part_jobs(jobs: list[JobSpec], positions: list[int], shared: dict[int, JobSpec]) -> list[JobSpec]:
    """The jobs at `positions`, a divided job's share in its place."""
    if not shared:
        return [jobs[position] for position in positions]
    return [shared[position] if position in shared else jobs[position] for position in positions]


def _share(job: JobSpec, members: list[int]) -> JobSpec:
    """One part's share of a divided job: the pods at `members`, each pod set's a gang of them all."""
    tasks = [job.tasks[index] for index in members]
    counts: dict[str, int] = {}
    for task in tasks:
        counts[task.subgroup] = counts.get(task.subgroup, 0) + 1
    pod_sets = tuple(
        dataclasses.replace(pod_set, min_available=counts[pod_set.name])
        for pod_set in job.subgroups.pod_sets
        if pod_set.name in counts
    )
    subgroups = dataclasses.replace(job.subgroups, pod_sets=pod_sets)
    return dataclasses.replace(job, tasks=tasks, subgroups=subgroups)
