"""One part's allocate: its nodes, its jobs and the rest of the cluster's numbers, in one session.

A part's session sees the rows it places on, the rows where its jobs hold pods elsewhere (kept,
never placed on), the pods other jobs hold on its nodes, and every queue with the whole
cluster's sums (`PartBasis`). It runs the allocate action only: eviction actions need the whole
cluster and run in the whole-cluster pass when anything is left to do.

Answers are plain tuples, not the plan's dataclasses: they cross a process boundary every cycle,
and pickling tens of thousands of small dataclasses costs more than the driver rebuilding them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from kai_ray.api.config import SchedulerConfig
from kai_ray.engine.actions.allocate import allocate
from kai_ray.engine.part_basis import PartBasis
from kai_ray.engine.session import Session
from kai_ray.fairshare.usage import QueueUsage
from kai_ray.model.objects import TaskStatus
from kai_ray.model.snapshot import NodeTable, Snapshot
from kai_ray.split.deal import Part

PlacedPod = tuple[str, str, str, tuple[str, ...], float]
"""(job key, task name, node name, GPU groups, GPUs granted)."""
PLACED = frozenset({TaskStatus.ALLOCATED, TaskStatus.PIPELINED})
"""What allocate turns a pending pod into; a part's session starts every pod it may place pending,
so each of its pods in one of these that moved was placed by it (what `build_plan` lists)."""


@dataclass(frozen=True)
class PartAnswer:
    part: int
    token: int
    """The replica version the part was computed from (see `kai_ray.split.replicas`)."""
    binds: list[PlacedPod]
    pipelined: list[PlacedPod]
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


def part_snapshot(snapshot: Snapshot, part: Part) -> Snapshot:
    rows = np.union1d(part.rows, part.foreign_rows)
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


def allocate_part(
    snapshot: Snapshot,
    part: Part,
    basis: PartBasis,
    config: SchedulerConfig,
    usage: QueueUsage | None,
    token: int,
) -> PartAnswer:
    started = time.perf_counter()
    session = Session(part_snapshot(snapshot, part), config, usage=usage, basis=basis)
    session.current_action = "allocate"
    allocate(session)
    binds: list[PlacedPod] = []
    pipelined: list[PlacedPod] = []
    table = session.nodes.table
    moved = session.moved_jobs()
    for job in session.jobs:
        if job not in moved:
            continue
        for task in job.tasks:
            node = task.node
            if node is None or task.status not in PLACED or task.uid not in session.placed_at_open:
                continue
            gpus = task.accepted_gpus(float(table.gpu_memory[node]))
            pod = (job.key, task.name, table.names[node], task.groups, gpus)
            (binds if task.status == TaskStatus.ALLOCATED else pipelined).append(pod)
    return PartAnswer(part.index, token, binds, pipelined, time.perf_counter() - started)
