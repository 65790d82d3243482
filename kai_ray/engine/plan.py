"""The result of one cycle: what to bind, what waits, what to evict, and why.

A plan is plain data derived from the session's end state, so backends can
apply it and tests can assert on it without a cluster.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from kai_ray.engine.jobs import Task
from kai_ray.engine.minruntime import MinRuntime
from kai_ray.engine.reasons import EvictionReason, PendingCause, PendingReason, StaleMark
from kai_ray.engine.session import Session
from kai_ray.model.objects import (
    ACTIVE_ALLOCATED,
    ALLOCATED,
    OCCUPYING,
    PENDING,
    PIPELINED,
    RELEASING,
    TaskStatus,
)
from kai_ray.model.snapshot import Problem

PLACED = frozenset({ALLOCATED, PIPELINED})
"""What placing a pod turns it into: a bind or a pipelined pod."""


class TaskState(NamedTuple):
    """Where a task stands after the cycle, as the simulator reports it.

    The plan's records (this, `Bind`, `Eviction`) are named tuples, not frozen dataclasses: a
    plan states every pod of the cluster and a split cycle's merge makes one per pod an answer
    placed, and a dataclass instance (its object, its instance dict, the fields put in it) cost
    about three times a tuple's making (`new_task_state`). Fields read by name alike; records
    are immutable and compare by their fields either way."""

    status: TaskStatus
    node: str | None
    gpu_groups: tuple[str, ...]
    accepted_gpus: float


class Bind(NamedTuple):
    """A pod placed this cycle; `action` is the action that placed it (KAI's metric label)."""

    job: str
    task: str
    node: str
    gpu_groups: tuple[str, ...]
    accepted_gpus: float
    action: str = "allocate"


class Eviction(NamedTuple):
    job: str
    task: str
    node: str | None
    reason: EvictionReason


@dataclass
class Plan:
    binds: list[Bind] = field(default_factory=list)
    pipelined: list[Bind] = field(default_factory=list)
    evictions: list[Eviction] = field(default_factory=list)
    pending_reasons: dict[str, PendingReason] = field(default_factory=dict)
    tasks: dict[tuple[str, str], TaskState] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)
    started: dict[str, float] = field(default_factory=dict)
    """Job key → when its gang was (re)started this cycle: the min-runtime clock's start, which a
    backend keeps with the job (KAI's `kai.scheduler/last-start-timestamp`) for later cycles.
    Only while some min-runtime is configured (`MinRuntime.reads_start_times`)."""
    stale_marks: dict[str, StaleMark] = field(default_factory=dict)
    """Job key → when it fell below its minimum (None: it no longer is), for the jobs whose mark
    changed this cycle: kept with the job (`kai.scheduler/stale-podgroup-timestamp`) so that a
    stale gang's grace period runs out across cycles."""


StateFields = tuple[TaskStatus, str | None, tuple[str, ...], float]


def task_state(session: Session, task: Task, alike: dict[StateFields, TaskState] | None = None) -> TaskState:
    """`alike`: states made so far, by their fields. A state is immutable, so tasks that stand
    alike (the pods a cycle put on one node) may share one: making a state costs several times
    looking its fields up. Only where equal fields print alike: a GPU count that is no float, or
    a zero (0.0 equals -0.0), is not shared."""
    status, row, spec = task.status, task.node, task.spec
    table = session.nodes.table
    node = spec.node if status is PENDING else None if row is None else table.names[row]
    accepted = 0.0
    if row is not None and status in OCCUPYING:
        # A pod that shares no GPU counts its whole GPUs (`TaskSpec.accepted_gpus`), read without
        # the two calls: a plan states every pod.
        accepted = spec.accepted_gpus(session.nodes.gpu_memory[row]) if task.is_shared_gpu else spec.gpu
        if type(accepted) is not float or accepted == 0.0:
            alike = None
    if alike is None:
        return new_task_state(status, node, task.groups, accepted)
    return shared_state(alike, status, node, task.groups, accepted)


def shared_state(
    alike: dict[StateFields, TaskState],
    status: TaskStatus,
    node: str | None,
    groups: tuple[str, ...],
    accepted: float,
) -> TaskState:
    """The state made so far with these fields, else a new one (see `task_state` for when
    states may be shared: the caller decides)."""
    fields = (status, node, groups, accepted)
    state = alike.get(fields)
    if state is None:
        state = alike[fields] = new_task_state(status, node, groups, accepted)
    return state


def new_task_state(
    status: TaskStatus, node: str | None, groups: tuple[str, ...], accepted: float
) -> TaskState:
    """`TaskState(status, node, groups, accepted)`, made by `tuple.__new__` itself instead of
    through the named tuple's own `__new__` (a Python function, the call costing as much again as
    the tuple): a plan states every pod of the cluster."""
    return tuple.__new__(TaskState, (status, node, groups, accepted))


def build_plan(session: Session) -> Plan:
    """Everything that changed since the session opened (`Session.placed_at_open`).

    Every eviction the session made has a reason recorded by the action that made it
    (`Session.eviction_reasons`); a missing one is a bug, so it is looked up, not defaulted.
    A job no task of which moved ends where it started: its task states are those of the
    last plan that saw the same job (`Job.plan_states`, kept with the job by a `JobPool`).
    """
    plan = Plan(problems=list(session.snapshot.problems))
    starts = MinRuntime(session).reads_start_times()
    moved = session.moved_jobs()
    placed_at_open, placed_by = session.placed_at_open, session.placed_by
    alike: dict[StateFields, TaskState] = {}
    for job in session.jobs:
        if job not in moved and job.plan_states is not None:
            plan.tasks.update(job.plan_states)
            continue
        # The job's key and each task's name and status read once: this runs for every task of
        # every job that moved.
        key = job.spec.key
        states = {}
        for task in job.tasks:
            state = task_state(session, task, alike)
            name, status = task.spec.name, task.status
            states[(key, name)] = state
            opened = placed_at_open.get(task.uid)
            if opened is None or opened[0] is status:  # never moved, or back where it was
                continue
            before, before_node = opened
            if status in PLACED and state.node is not None:
                action = placed_by.get(task.uid, "allocate")
                bind = new_bind(key, name, state.node, task.groups, state.accepted_gpus, action)
                (plan.binds if status is ALLOCATED else plan.pipelined).append(bind)
            if status is PIPELINED and before in ACTIVE_ALLOCATED and before_node is not None:
                moved_from = session.nodes.table.names[before_node]
                reason = session.eviction_reasons[task.uid]
                plan.evictions.append(new_eviction(key, name, moved_from, reason))
            elif status is RELEASING:
                reason = session.eviction_reasons[task.uid]
                plan.evictions.append(new_eviction(key, name, state.node, reason))
        plan.tasks.update(states)
        job.plan_states = states
        if starts and job.last_start is not None and job.last_start != job.spec.last_start:
            plan.started[key] = job.last_start
    plan.stale_marks.update(session.stale_marks)
    for job in session.jobs_with_pending_tasks():
        plan.pending_reasons[job.key] = session.job_reason(job) or NOT_REACHED
    for name, waiting in problem_reasons(session.snapshot.problems).items():
        plan.pending_reasons.setdefault(name, waiting)
    return plan


def new_bind(job: str, task: str, node: str, groups: tuple[str, ...], accepted: float, action: str) -> Bind:
    """`Bind(job, task, node, groups, accepted, action)`, made as `new_task_state` makes a state:
    one is made per pod placed, and a split cycle's merge makes them too."""
    return tuple.__new__(Bind, (job, task, node, groups, accepted, action))


def new_eviction(job: str, task: str, node: str | None, reason: EvictionReason) -> Eviction:
    """`Eviction(job, task, node, reason)`, made as `new_task_state` makes a state: a large
    reclaim evicts thousands of pods."""
    return tuple.__new__(Eviction, (job, task, node, reason))


def problem_reasons(problems: list[Problem]) -> dict[str, PendingReason]:
    """Why each PodGroup the snapshot left out waits (the first problem of each)."""
    reasons: dict[str, PendingReason] = {}
    for problem in problems:
        if problem.kind == "PodGroup":
            missing_queue = problem.field == "spec.queue"
            cause = PendingCause.QUEUE_DOES_NOT_EXIST if missing_queue else PendingCause.INVALID
            message = f"not scheduled: {problem.field}: {problem.message}"
            reasons.setdefault(problem.name, PendingReason(cause, message))
    return reasons


NOT_REACHED = PendingReason(
    PendingCause.NOT_REACHED,
    "not reached this cycle (earlier jobs took the capacity or its queue order came later)",
)
