"""One part's cycle: its nodes, its jobs and the rest of the cluster's numbers, in one session.

A part's session sees the rows it places on, the rows where its jobs hold pods elsewhere (kept,
never placed on), the pods other jobs hold on its nodes, and every queue with the whole
cluster's sums (`PartBasis`). It runs the configured actions but stale gang eviction (a cycle
with a stale gang is not split): allocate, and the victim searches of consolidation, reclaim and
preempt among its own jobs on its own nodes, in parallel with the other parts'.

Answers are columns of positions and plain tuples, not the plan's dataclasses: they cross a
process boundary every cycle, and pickling tens of thousands of small dataclasses costs more than
the driver rebuilding them (`PlacedPods`).
"""

from __future__ import annotations

import time
from array import array
from dataclasses import dataclass, field

import numpy as np

from kai_ray.api.config import SchedulerConfig
from kai_ray.engine.cycle import ACTIONS
from kai_ray.engine.jobs import Task
from kai_ray.engine.part_basis import PartBasis
from kai_ray.engine.plan import PLACED
from kai_ray.engine.session import Session
from kai_ray.fairshare.usage import QueueUsage
from kai_ray.model.objects import ACTIVE_ALLOCATED, ALLOCATED, PIPELINED, RELEASING
from kai_ray.model.snapshot import NodeTable, Snapshot
from kai_ray.split.deal import Part

PodAt = tuple[int, int, int, tuple[str, ...], float, str]
"""(job position, task position, row, GPU groups, GPUs granted, the action that placed it): a
placed pod as a part collects them (see `PlacedPods`)."""
EvictedPod = tuple[str, str, str, tuple[str, ...], str, str, str | None]
"""(job key, task name, the node it ran on, its GPU groups there, the evicting action, the
eviction's message, the key of the job it made room for)."""
PART_ACTIONS = {name: action for name, action in ACTIONS.items() if name != "stalegangeviction"}
"""The actions a part runs: a cycle with a stale gang is not split, so stale gang eviction would
only walk every job to find nothing."""


@dataclass(frozen=True)
class PlacedPods:
    """The pods a part placed, as columns: each pod by its job's position in the snapshot's jobs
    and its own in that job's tasks (the whole job's, for a divided job's share), its node by row
    of the snapshot's table. The coordinator holds the same snapshot, so the names need not cross
    the wire: a large cycle's answer as one tuple of names per pod took about as long to pickle
    and unpickle as the coordinator takes to use it, where columns of machine integers cost next
    to nothing and are checked with numpy (`AnswerChecks`).

    The first `bound` pods are bound, the rest pipelined (pending pods, and victims re-placed
    elsewhere, which are also in the answer's evictions); each kind in job and task order, so
    sums over them add in the order the part placed them."""

    jobs: array[int]
    tasks: array[int]
    rows: array[int]
    bound: int
    groups: list[tuple[str, ...]]
    gpus: list[float]
    """GPUs granted, as the pod counts them (`TaskSpec.accepted_gpus`), its type kept."""
    actions: list[str]
    """The action that placed each pod."""

    def __len__(self) -> int:
        return len(self.jobs)


def placed_pods(pods: list[PodAt], bound: int) -> PlacedPods:
    """`pods` as columns, the first `bound` of them bound."""
    if not pods:
        return PlacedPods(array("q"), array("q"), array("q"), 0, [], [], [])
    jobs, tasks, rows, groups, gpus, actions = zip(*pods, strict=True)
    return PlacedPods(
        array("q", jobs), array("q", tasks), array("q", rows), bound, list(groups), list(gpus), list(actions)
    )


NO_PODS = placed_pods([], 0)


@dataclass(frozen=True)
class PartAnswer:
    part: int
    token: int
    """The replica version the part was computed from (see `kai_ray.split.replicas`)."""
    placed: PlacedPods = NO_PODS
    evictions: list[EvictedPod] = field(default_factory=list)
    fair_shares: tuple[float, ...] = ()
    """The part session's fair share per queue row and resource, flattened: every part's session
    divides the whole cluster (`PartBasis`), so they agree, and the coordinator judges reclaims
    across parts by them."""
    seconds: float = field(default=0.0, compare=False)
    """The part's compute time, its layout included (what a worker of its own would spend); not
    part of what the answer says, so two equal answers compare equal whatever they took."""


def sub_table(table: NodeTable, rows: np.ndarray, placeable: np.ndarray) -> NodeTable:
    """The rows `rows` of `table` (ascending, so still in name order); a row not `placeable`
    is kept as unschedulable."""
    return NodeTable(
        names=[table.names[r] for r in rows.tolist()],
        allocatable=table.allocatable[rows],
        gpu_memory=table.gpu_memory[rows],
        gpu_memory_synced=table.gpu_memory_synced[rows],
        schedulable=table.schedulable[rows] & placeable,
        specs=[table.specs[r] for r in rows.tolist()],
    )


def part_snapshot(snapshot: Snapshot, part: Part, rows: np.ndarray) -> Snapshot:
    """`rows`: the part's rows and its foreign rows, ascending (as `run_part` joins them)."""
    table = sub_table(snapshot.nodes, rows, np.isin(rows, part.rows))
    return Snapshot(
        table,
        snapshot.queues,
        snapshot.children,
        part.jobs,
        snapshot.now,
        [],
        part.held,
        snapshot.topologies,
    )


def run_part(
    snapshot: Snapshot,
    part: Part,
    basis: PartBasis,
    config: SchedulerConfig,
    usage: QueueUsage | None,
    token: int,
) -> PartAnswer:
    started = time.perf_counter()
    rows = np.union1d(part.rows, part.foreign_rows)
    session = Session(part_snapshot(snapshot, part, rows), config, usage=usage, basis=basis)
    for name in config.actions:
        action = PART_ACTIONS.get(name)
        if action is not None:
            session.current_action = name
            action(session)
    placed, evictions = _changes(session, part, rows.tolist())
    shares = tuple(session.queues.fair_share.ravel().tolist())
    return PartAnswer(part.index, token, placed, evictions, shares, time.perf_counter() - started)


def _changes(session: Session, part: Part, rows: list[int]) -> tuple[PlacedPods, list[EvictedPod]]:
    """What the session moved, by the rules the plan is built by (`build_plan`); `rows` are the
    snapshot's rows of the session's table."""
    binds: list[PodAt] = []
    pipelined: list[PodAt] = []
    evictions: list[EvictedPod] = []
    table = session.nodes.table
    names, memory = table.names, table.gpu_memory.tolist()
    placed_at_open, placed_by = session.placed_at_open, session.placed_by
    moved = session.moved_jobs()
    for job, position in zip(session.jobs, part.positions, strict=True):
        if job not in moved:
            continue
        members = part.share_tasks.get(position)
        for index, task in enumerate(job.tasks):
            found = placed_at_open.get(task.uid)
            status = task.status
            if found is None or status == found[0]:
                continue
            node, (before, before_node) = task.node, found
            if status in PLACED and node is not None:
                gpus = task.spec.accepted_gpus(memory[node])
                action = placed_by.get(task.uid, "allocate")
                at = index if members is None else members[index]
                pod = (position, at, rows[node], task.groups, gpus, action)
                (binds if status == ALLOCATED else pipelined).append(pod)
            if status == PIPELINED and before in ACTIVE_ALLOCATED and before_node is not None:
                evictions.append(_evicted(session, task, names[before_node]))
            elif status == RELEASING and node is not None:
                evictions.append(_evicted(session, task, names[node]))
    return placed_pods([*binds, *pipelined], len(binds)), evictions


def _evicted(session: Session, task: Task, node: str) -> EvictedPod:
    reason = session.eviction_reasons[task.uid]
    cause, message, preemptor = reason.cause.value, reason.message, reason.preemptor
    return (task.job.key, task.spec.name, node, task.groups, cause, message, preemptor)
