"""The victim search shared by consolidation, reclaim and preempt (§11.5-11.7).

Victim batches are accumulated in victim order; after each addition the
scenario generators propose victim sets (node-local first, then growing
sets of nodes), and each proposal is simulated in a statement: evict the
victims, re-place them and the preemptor (pipeline only), then ask the
action's policy whether the outcome is acceptable. The first acceptable
scenario wins. The search is bounded by a count of simulated scenarios,
never by wall-clock time, so every machine finds the same victims.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from kai_ray.engine.allocation import allocate_job
from kai_ray.engine.job_queue import JobQueue
from kai_ray.engine.jobs import Job, Task
from kai_ray.engine.session import Session
from kai_ray.engine.statement import Statement
from kai_ray.engine.victims import VictimQueue
from kai_ray.model.objects import ACTIVE_USED, TaskStatus
from kai_ray.model.resources import GPU

VictimGroups = list[tuple[Job, list[Task]]]


@dataclass(frozen=True)
class Outcome:
    """What a simulated scenario did: the victims, and which of them found a new place."""

    preemptor: Job
    victims: list[Task]
    replaced: frozenset[int]

    def evicted(self) -> list[Task]:
        return [t for t in self.victims if t.uid not in self.replaced]


class VictimPolicy(Protocol):
    """What makes one action different from the others."""

    def is_candidate(self, preemptor: Job, victim: Job) -> bool: ...

    def accepts(self, outcome: Outcome) -> bool: ...

    def eviction_reason(self, preemptor: Job, victim: Task) -> str: ...


class SearchBudget:
    """Scenarios left to simulate in this action; shared by all its jobs."""

    def __init__(self, scenarios: int) -> None:
        self.left = scenarios

    def spend(self) -> bool:
        self.left -= 1
        return self.left >= 0


Generator = Callable[[Session, VictimGroups, VictimGroups], Iterator[VictimGroups]]


def solve(session: Session, preemptor: Job, policy: VictimPolicy, budget: SearchBudget) -> Statement | None:
    candidates = [j for j in session.jobs if j is not preemptor and policy.is_candidate(preemptor, j)]
    if not candidates:
        return None
    tried: set[frozenset[int]] = set()
    for generate in (_node_local_scenarios, _multi_node_scenarios):
        victims = VictimQueue(session, candidates)
        accumulated: VictimGroups = []
        while (batch := victims.pop()) is not None:
            accumulated.append(batch)
            for scenario in generate(session, accumulated, [batch]):
                tasks = [t for _, group in scenario for t in group]
                key = frozenset(t.uid for t in tasks)
                if key in tried:
                    continue
                tried.add(key)
                if not budget.spend():
                    return None
                statement = simulate(session, preemptor, tasks, policy)
                if statement is not None:
                    return statement
    return None


def _by_job(groups: VictimGroups) -> dict[Job, list[Task]]:
    merged: dict[Job, list[Task]] = {}
    for job, tasks in groups:
        merged.setdefault(job, []).extend(tasks)
    return merged


def _on_nodes(groups: VictimGroups, nodes: set[int]) -> VictimGroups:
    """Whole victim jobs (all their accumulated pods) that have a pod on one of the nodes."""
    return [(job, tasks) for job, tasks in _by_job(groups).items() if any(t.node in nodes for t in tasks)]


def _node_local_scenarios(
    session: Session, accumulated: VictimGroups, newest: VictimGroups
) -> Iterator[VictimGroups]:
    newest_nodes = sorted({t.node for _, tasks in newest for t in tasks if t.node is not None})
    for node in newest_nodes:
        yield _on_nodes(accumulated, {node})


def _multi_node_scenarios(
    session: Session, accumulated: VictimGroups, newest: VictimGroups
) -> Iterator[VictimGroups]:
    freed: dict[int, float] = {}
    for _, tasks in accumulated:
        for task in tasks:
            if task.node is not None:
                freed[task.node] = freed.get(task.node, 0.0) + task.request[GPU]
    free_after = {
        row: session.nodes.idle[row, GPU] + session.nodes.releasing[row, GPU] + gpus
        for row, gpus in freed.items()
    }
    order = sorted(free_after, key=lambda row: (free_after[row], row))
    size = 1
    while size <= len(order):
        yield _on_nodes(accumulated, set(order[:size]))
        size *= 2
    if size // 2 != len(order):
        yield _on_nodes(accumulated, set(order))


def simulate(session: Session, preemptor: Job, victims: list[Task], policy: VictimPolicy) -> Statement | None:
    statement = Statement(session)
    active_before = sum(1 for t in preemptor.tasks if t.status in ACTIVE_USED)
    for task in victims:
        statement.evict(task)
    evicted = {t.uid for t in victims}
    if not _replace_in_order(session, statement, preemptor, victims, evicted):
        statement.discard()
        return None
    active_after = sum(1 for t in preemptor.tasks if t.status in ACTIVE_USED)
    if not preemptor.gang_satisfied() or active_after <= active_before:
        statement.discard()
        return None
    replaced = frozenset(t.uid for t in victims if t.status != TaskStatus.RELEASING)
    outcome = Outcome(preemptor, victims, replaced)
    if not policy.accepts(outcome):
        statement.discard()
        return None
    for task in outcome.evicted():
        session.eviction_reasons[task.uid] = policy.eviction_reason(preemptor, task)
    for task in victims:
        if task.uid in replaced and task.status == TaskStatus.PIPELINED:
            session.eviction_reasons[task.uid] = policy.eviction_reason(preemptor, task)
    return statement


def _replace_in_order(
    session: Session, statement: Statement, preemptor: Job, victims: list[Task], evicted: set[int]
) -> bool:
    victim_jobs = list(dict.fromkeys(t.job for t in victims))
    queue = JobQueue(session, [*victim_jobs, preemptor], pending=evicted)
    while (job := queue.pop()) is not None:
        if job is preemptor:
            if not allocate_job(session, statement, job, pipeline_only=True):
                return False
            continue
        if allocate_job(session, statement, job, pipeline_only=True, extra_pending=evicted) and any(
            t.uid in evicted and t.status == TaskStatus.RELEASING for t in job.tasks
        ):
            queue.push(job)
    return True


def free_gpu_capacity(session: Session) -> float:
    total = float(np.sum(session.free_gpus()))
    for row in session.nodes.rows_with_groups():
        for group in session.nodes.groups[row].values():
            if not group.fully_releasing:
                total += group.free_memory_after_release / group.memory
    return total
