"""How the API commands show an answer: tables and details for people, JSON for programs.

The same code renders a server's answers and the offline simulated cluster's, so what a command
prints offline is what it prints against a server holding the same cluster.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import typer
from google.protobuf import json_format
from google.protobuf.message import Message
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from kai_ray.report.table import terminal_console
from kai_ray.v1 import scheduler_pb2 as pb

__all__ = [
    "GIB",
    "GPU",
    "Output",
    "as_dict",
    "event_line",
    "explanation_view",
    "print_json",
    "queues_table",
    "show",
    "state_text",
    "what_if_view",
    "workload_detail",
    "workloads_table",
]

GPU = "nvidia.com/gpu"
GIB = 1024**3

_STATE_STYLE = {
    "RUNNING": "green",
    "SUCCEEDED": "green",
    "PENDING": "yellow",
    "EVICTED": "magenta",
    "FAILED": "red",
    "CANCELLED": "dim",
}


class Output(enum.StrEnum):
    TABLE = "table"
    JSON = "json"


def as_dict(message: Message) -> dict[str, Any]:
    """A message as JSON data: proto field names (as in error paths), zeros and empty lists kept
    so a program need not know the defaults."""
    return json_format.MessageToDict(
        message, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )


def print_json(data: Any) -> None:
    typer.echo(json.dumps(data, indent=2, sort_keys=True))


# ------------------------------------------------------------------------------------- formatting


def _amount(resource: str, value: float) -> str:
    """A number of the API's fixed units the way people read it: GPUs and cores plain, memory in Gi."""
    if value < 0:
        return "∞"
    if resource == "memory":
        return f"{value / GIB:.4g}Gi"
    return f"{value:.4g}"


def _resources(values: Mapping[str, float]) -> str:
    order = {GPU: 0, "cpu": 1, "memory": 2}
    keys = sorted(values, key=lambda k: (order.get(k, 3), k))
    return ", ".join(f"{k} {_amount(k, values[k])}" for k in keys if values[k])


def state_text(state: int) -> Text:
    name = pb.WorkloadState.Name(state) if state else "UNKNOWN"
    return Text(name, style=_STATE_STYLE.get(name, ""))


def workloads_table(workloads: Sequence[pb.Workload], title: str = "Workloads") -> Table:
    table = Table(title=title, title_justify="left")
    for column in ("workload", "queue", "state", "pods bound", "gang", "requested", "reason"):
        table.add_column(column, overflow="fold")
    for w in workloads:
        reason = ": ".join(part for part in (w.reason, w.message) if part)
        table.add_row(
            w.id,
            w.queue,
            state_text(w.state),
            f"{w.pods_bound}/{w.pods}",
            str(w.min_available),
            _resources(w.requested),
            reason,
        )
    return table


def _constraint(constraint: pb.TopologyConstraint) -> str:
    """`cluster-topology: required rack`, the levels given and nothing else."""
    given = (("required", constraint.required_level), ("preferred", constraint.preferred_level))
    levels = [f"{kind} {level}" for kind, level in given if level]
    return f"{constraint.topology}: {', '.join(levels)}"


def workload_detail(w: pb.Workload) -> Group:
    facts = Table.grid(padding=(0, 2))
    facts.add_column(style="bold")
    facts.add_column(overflow="fold")
    rows: list[tuple[str, str | Text]] = [
        ("workload", w.id),
        ("queue", w.queue),
        ("state", state_text(w.state)),
        ("priority", f"{w.priority_class or '(default)'} ({w.priority})"),
        ("preemptible", "yes" if w.preemptible else "no"),
        ("pods", f"{w.pods_bound} of {w.pods} bound; gang minimum {w.min_available}"),
        ("requested", _resources(w.requested) or "-"),
        ("allocated", _resources(w.allocated) or "-"),
        ("pod groups", ", ".join(w.pod_groups) or "-"),
    ]
    if w.HasField("topology"):
        rows.append(("topology", _constraint(w.topology)))
    if w.reason or w.message:
        rows.append(("why", ": ".join(p for p in (w.reason, w.message) if p)))
    for name, value in rows:
        facts.add_row(name, value)
    parts: list[Table] = [facts]
    if w.placements:
        placements = Table(title="Pods", title_justify="left")
        placements.add_column("pod", overflow="fold")
        placements.add_column("node", overflow="fold")
        for p in w.placements:
            placements.add_row(p.pod, p.node or Text("not bound", style="yellow"))
        parts.append(placements)
    return Group(*parts)


def _queue_rows(queues: Sequence[pb.Queue]) -> list[tuple[pb.Queue, int]]:
    """Queues in tree order with their depth; the server sends parents first, siblings by name,
    but a queue whose parent is missing is still shown, at the top."""
    by_name = {q.name: q for q in queues}
    children: dict[str, list[str]] = {}
    for q in queues:
        children.setdefault(q.parent if q.parent in by_name else "", []).append(q.name)
    ordered: list[tuple[pb.Queue, int]] = []

    def walk(name: str, depth: int) -> None:
        ordered.append((by_name[name], depth))
        for child in sorted(children.get(name, [])):
            walk(child, depth + 1)

    for top in sorted(children.get("", [])):
        walk(top, 0)
    return ordered


def queues_table(queues: Sequence[pb.Queue]) -> Table:
    table = Table(
        title="Queues: GPUs, and CPU cores / memory as fair share / allocated / requested",
        title_justify="left",
    )
    table.add_column("queue", overflow="fold")
    for column in ("GPU quota", "limit", "fair share", "allocated", "requested"):
        table.add_column(column, justify="right")
    table.add_column("CPU cores", justify="right")
    table.add_column("memory", justify="right")
    table.add_column("running / pending", justify="right")
    empty = pb.QueueResource(limit=-1)
    for queue, depth in _queue_rows(queues):
        gpu = queue.resources.get(GPU, empty)
        cells = [
            _amount(GPU, gpu.quota),
            _amount(GPU, gpu.limit),
            _amount(GPU, gpu.fair_share),
            _amount(GPU, gpu.allocated),
            _amount(GPU, gpu.requested),
        ]
        for resource in ("cpu", "memory"):
            r = queue.resources.get(resource, empty)
            cells.append(" / ".join(_amount(resource, v) for v in (r.fair_share, r.allocated, r.requested)))
        cells.append(f"{queue.workloads_running} / {queue.workloads_pending}")
        table.add_row("  " * depth + queue.name, *cells)
    return table


def explanation_view(e: pb.Explanation) -> Group:
    parts: list[Text | Table] = []
    head = Text(f"{e.id}: ")
    head.append_text(state_text(e.state))
    if e.cause:
        head.append(f" ({e.cause})")
    parts.append(head)
    if e.message:
        parts.append(Text(e.message))
    if e.evicted_by:
        parts.append(Text(f"evicted to make room for {e.evicted_by}"))
    if e.HasField("gang"):
        g = e.gang
        line = (
            f"gang: {g.min_available} required, {g.pods_existing} exist, {g.pods_bound} bound, "
            f"{g.pods_placeable} more would fit now"
        )
        parts.append(Text(line))
    if e.predicates:
        parts.append(Text("nodes that refuse its next pod, each cause counted on its own:"))
        parts.extend(_refusal(p, e.nodes_total) for p in e.predicates)
    if e.HasField("queue"):
        parts.append(queues_table([e.queue]))
    if e.ahead:
        ahead = Table(title="Ahead in its queue", title_justify="left")
        for column in ("workload", "queue", "priority"):
            ahead.add_column(column)
        for ref in e.ahead:
            ahead.add_row(ref.id, ref.queue, str(ref.priority))
        parts.append(ahead)
    if e.to_free:
        parts.append(Text(f"to free for its next pods: {_resources(e.to_free)}"))
    return Group(*parts)


def _refusal(failure: pb.PredicateFailure, total: int) -> Text:
    """One cause as the engine words it ("3 of 4 nodes: host port 8080/TCP in use"), with the
    kube-scheduler filter it is named after, dimmed."""
    line = Text(f"  {failure.nodes} of {total} nodes: {failure.message}  ")
    line.append(f"[{failure.predicate}]", style="dim")
    return line


def what_if_view(response: pb.WhatIfResponse) -> Group:
    parts: list[Text | Table] = [
        Text(
            f"what if: {len(response.binds)} pod(s) would be bound, {len(response.evictions)} evicted, "
            f"{len(response.pipelined)} pipelined; nothing was applied"
        )
    ]
    placements = (
        ("Would bind", response.binds),
        ("Would pipeline (bound once evicted pods are gone)", response.pipelined),
    )
    for title, rows in placements:
        if rows:
            table = Table(title=title, title_justify="left")
            for column in ("workload", "pod", "node"):
                table.add_column(column, overflow="fold")
            for row in rows:
                table.add_row(row.workload, row.pod, row.node)
            parts.append(table)
    if response.evictions:
        evictions = Table(title="Would evict", title_justify="left")
        for column in ("workload", "pod", "node", "cause", "for"):
            evictions.add_column(column, overflow="fold")
        for ev in response.evictions:
            evictions.add_row(ev.workload, ev.pod, ev.node, ev.cause, ev.for_workload)
        parts.append(evictions)
    parts.append(workloads_table(response.workloads, "Workloads after the cycle"))
    return Group(*parts)


def show(output: Output, answer: Message | Sequence[Message], view: Callable[[], RenderableType]) -> None:
    """A command's answer: the message(s) as JSON for `--output json`, else ``view()`` for people."""
    if output == Output.JSON:
        print_json(as_dict(answer) if isinstance(answer, Message) else [as_dict(m) for m in answer])
    else:
        terminal_console().print(view())


# ------------------------------------------------------------------------------------- requests


def event_line(event: pb.WorkloadEvent) -> Text:
    w = event.workload
    line = Text(f"{pb.WorkloadEvent.Type.Name(event.type):8} {w.id} ")
    line.append_text(state_text(w.state))
    line.append(f" {w.pods_bound}/{w.pods} bound")
    reason = ": ".join(p for p in (w.reason, w.message) if p)
    if reason:
        line.append(f"  {reason}")
    return line
