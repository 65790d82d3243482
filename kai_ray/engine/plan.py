"""The result of one cycle: what to bind, what waits, what to evict, and why.

A plan is plain data derived from the session's end state, so backends can
apply it and tests can assert on it without a cluster.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kai_ray.engine.jobs import Task
from kai_ray.engine.session import Session
from kai_ray.model.objects import ACTIVE_ALLOCATED, OCCUPYING, TaskStatus
from kai_ray.model.snapshot import Problem


@dataclass(frozen=True)
class TaskState:
    """Where a task stands after the cycle, as the simulator reports it."""

    status: TaskStatus
    node: str | None
    gpu_groups: tuple[str, ...]
    accepted_gpus: float


@dataclass(frozen=True)
class Bind:
    job: str
    task: str
    node: str
    gpu_groups: tuple[str, ...]
    accepted_gpus: float


@dataclass(frozen=True)
class Eviction:
    job: str
    task: str
    node: str | None
    reason: str


@dataclass
class Plan:
    binds: list[Bind] = field(default_factory=list)
    pipelined: list[Bind] = field(default_factory=list)
    evictions: list[Eviction] = field(default_factory=list)
    pending_reasons: dict[str, str] = field(default_factory=dict)
    tasks: dict[tuple[str, str], TaskState] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)


def task_state(session: Session, task: Task) -> TaskState:
    node = session.nodes.table.names[task.node] if task.node is not None else None
    accepted = 0.0
    if task.node is not None and task.status in OCCUPYING:
        accepted = task.accepted_gpus(float(session.nodes.table.gpu_memory[task.node]))
    return TaskState(
        task.status, node if task.status != TaskStatus.PENDING else task.spec.node, task.groups, accepted
    )


def build_plan(
    session: Session, initial: dict[int, tuple[TaskStatus, int | None]], eviction_reasons: dict[int, str]
) -> Plan:
    plan = Plan(problems=list(session.snapshot.problems))
    for job in session.jobs:
        for task in job.tasks:
            state = task_state(session, task)
            plan.tasks[(job.key, task.name)] = state
            before, before_node = initial[task.uid]
            if task.status == before:
                continue
            if task.status == TaskStatus.ALLOCATED and state.node is not None:
                plan.binds.append(Bind(job.key, task.name, state.node, task.groups, state.accepted_gpus))
            elif task.status == TaskStatus.PIPELINED and state.node is not None:
                plan.pipelined.append(Bind(job.key, task.name, state.node, task.groups, state.accepted_gpus))
                if before in ACTIVE_ALLOCATED and before_node is not None:
                    moved_from = session.nodes.table.names[before_node]
                    reason = eviction_reasons.get(task.uid, "moved")
                    plan.evictions.append(Eviction(job.key, task.name, moved_from, reason))
            elif task.status == TaskStatus.RELEASING:
                reason = eviction_reasons.get(task.uid, "evicted")
                plan.evictions.append(Eviction(job.key, task.name, state.node, reason))
        if job.pending_tasks():
            plan.pending_reasons[job.key] = session.job_reason(job) or _default_reason(job)
    for problem in session.snapshot.problems:
        if problem.kind == "PodGroup":
            plan.pending_reasons.setdefault(
                problem.name, f"not scheduled: {problem.field}: {problem.message}"
            )
    return plan


def _default_reason(job: object) -> str:
    return "not reached this cycle (earlier jobs took the capacity or its queue order came later)"
