"""The human-readable result of a simulation: queues, jobs and why pending jobs wait."""

from __future__ import annotations

import os
import re
import sys
from collections import Counter
from typing import IO

import numpy as np
from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from kai_ray.cluster.sim.simulator import CycleResult
from kai_ray.engine.jobs import Job
from kai_ray.engine.session import Session
from kai_ray.model.objects import UNLIMITED, TaskStatus

GIB = 1024**3

PIPE_WIDTH = 160
"""Columns when the output is not a terminal (a pipe, a file, a test) and COLUMNS is unset: wide
enough that `grep` finds a job's whole row on one line."""


def terminal_console(file: IO[str] | None = None) -> Console:
    """A console as wide as the terminal it prints to (COLUMNS, when set, wins, as everywhere).

    Output that goes to no terminal has no width to follow, so it gets `PIPE_WIDTH` rather than
    rich's 80 columns, which would fold most rows of the jobs table."""
    stream = file if file is not None else sys.stdout
    if "COLUMNS" in os.environ or stream.isatty():
        return Console(file=file)
    return Console(file=file, width=PIPE_WIDTH)


STATUS_STYLE = {
    "Bound": "green",
    "Running": "green",
    "Pipelined": "yellow",
    "Pending": "red",
    "Releasing": "magenta",
}


_UID = re.compile(r"\b([0-9a-f]{8})-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b")


def short_name(name: str) -> str:
    """A PodGroup name with its owner's uid cut to 8 characters (`pg-train-1b4e28ba…`): KAI's
    podgrouper names PodGroups `pg-<owner>-<uid>[-group-<i>]`, and the table has room for the owner."""
    return _UID.sub(r"\1…", name)


def _amount(value: float, unit: str) -> str:
    if value == UNLIMITED:
        return "∞"
    if unit == "gpu":
        return f"{value:g}"
    if unit == "cpu":
        return f"{value / 1000:g}"
    return f"{value / GIB:.0f}Gi"


def _queue_rows(session: Session) -> list[tuple[str, int]]:
    book = session.queues
    ordered: list[tuple[str, int]] = []

    def walk(name: str, depth: int) -> None:
        ordered.append((name, depth))
        for child in book.children.get(name, []):
            walk(child, depth + 1)

    for top in book.top_level():
        walk(top, 0)
    return ordered


def queues_table(session: Session) -> Table:
    """One row per queue, children indented; with time-based fair share on, a last column holds the
    past usage (U of spec §7: share of capacity over the window) the division weighed."""
    table = Table(title="Queues (fair share / allocated / requested)", title_justify="left")
    table.add_column("queue")
    for resource in ("GPU", "CPU cores", "memory"):
        table.add_column(resource, justify="right")
    with_usage = session.config.usage_db is not None
    if with_usage:
        table.add_column("usage GPU / CPU / mem", justify="right")
    book = session.queues
    for name, depth in _queue_rows(session):
        row = book.index[name]
        cells = []
        for unit, index in (("gpu", 2), ("cpu", 0), ("memory", 1)):
            values = (book.fair_share[row, index], book.allocated[row, index], book.request[row, index])
            cells.append(" / ".join(_amount(float(v), unit) for v in values))
        if with_usage:
            usage = book.usage.get(name, {})
            cells.append(" / ".join(f"{usage.get(r, 0.0):.3f}" for r in ("gpu", "cpu", "memory")))
        table.add_row("  " * depth + name, *cells)
    return table


def job_status(job: Job) -> str:
    counts = Counter(t.status for t in job.tasks)
    total = len(job.tasks)
    if counts[TaskStatus.ALLOCATED]:
        return (
            "Bound"
            if counts[TaskStatus.PENDING] == 0
            else f"Bound {total - counts[TaskStatus.PENDING]}/{total}"
        )
    if counts[TaskStatus.PIPELINED]:
        return "Pipelined"
    if counts[TaskStatus.RELEASING]:
        return "Releasing"
    if counts[TaskStatus.PENDING] == total:
        return "Pending"
    if counts[TaskStatus.PENDING]:
        return f"Running {total - counts[TaskStatus.PENDING]}/{total}"
    return "Running"


def jobs_table(result: CycleResult) -> Table:
    session = result.session
    table = Table(title="Jobs", title_justify="left")
    for column in ("job", "queue", "status", "pods", "nodes", "why pending"):
        table.add_column(column, overflow="fold")
    for job in sorted(session.jobs, key=lambda j: (j.queue, j.key)):
        nodes = sorted({session.nodes.table.names[t.node] for t in job.tasks if t.node is not None})
        status = job_status(job)
        style = STATUS_STYLE.get(status.split(" ")[0], "")
        pending = result.plan.pending_reasons.get(job.key)
        reason = pending.message if pending is not None else ""
        pods = str(len(job.tasks))
        table.add_row(
            short_name(job.spec.key), job.queue, Text(status, style=style), pods, ", ".join(nodes), reason
        )
    return table


def evictions_table(results: list[CycleResult]) -> Table | None:
    """Every eviction of the run, with the cycle it happened in."""
    rows = [(index, e) for index, result in enumerate(results, start=1) for e in result.plan.evictions]
    if not rows:
        return None
    table = Table(title="Evictions", title_justify="left")
    for column in ("cycle", "job", "pod", "node", "reason"):
        table.add_column(column)
    for cycle, eviction in rows:
        table.add_row(
            str(cycle), short_name(eviction.job), eviction.task, eviction.node or "", eviction.reason.message
        )
    return table


def summary(results: list[CycleResult]) -> Text:
    last = results[-1]
    table = last.session.nodes.table
    gpus = float(np.sum(table.allocatable[:, 2]))
    binds = sum(len(r.plan.binds) for r in results)
    evictions = sum(len(r.plan.evictions) for r in results)
    return Text(
        f"{len(table)} nodes, {gpus:g} GPUs, {len(last.session.jobs)} jobs; "
        f"{len(results)} cycle(s): {binds} pods bound, {evictions} evicted, "
        f"{len(last.plan.pending_reasons)} job(s) still pending"
    )


def render_table(results: list[CycleResult], console: Console) -> None:
    last = results[-1]
    parts: list[Table | Text] = [summary(results), queues_table(last.session), jobs_table(last)]
    evictions = evictions_table(results)
    if evictions is not None:
        parts.append(evictions)
    for problem in last.plan.problems:
        parts.append(Text(f"skipped: {problem}", style="red"))
    console.print(Group(*parts))
