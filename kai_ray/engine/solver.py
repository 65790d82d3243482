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

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from kai_ray.engine.allocation import allocate_job
from kai_ray.engine.gang import tasks_to_allocate
from kai_ray.engine.job_queue import JobQueue
from kai_ray.engine.jobs import Job, Task
from kai_ray.engine.reasons import EvictionReason
from kai_ray.engine.session import Session
from kai_ray.engine.statement import Statement
from kai_ray.engine.victims import VictimQueue
from kai_ray.model.objects import ACTIVE_ALLOCATED, ACTIVE_USED, TaskStatus
from kai_ray.model.resources import EPSILON, GPU


@dataclass(frozen=True)
class Outcome:
    """What a simulated scenario did: the victims, and which of them found a new place.

    `nodes_before` keeps each victim's node row from before the scenario, because a
    re-placed victim's `node` already names its new place while a validator that
    counts it as taken (reclaim without consolidating reclaim) needs the old one.
    """

    preemptor: Job
    victims: list[Task]
    replaced: frozenset[int]
    nodes_before: dict[int, int | None]

    def evicted(self) -> list[Task]:
        return [t for t in self.victims if t.uid not in self.replaced]


class VictimPolicy(Protocol):
    """What makes one action different from the others."""

    def candidate_pool(self, preemptor: Job) -> list[Job]:
        """Every job `is_candidate` could accept, in session order (it may hold more)."""
        ...

    def is_candidate(self, preemptor: Job, victim: Job) -> bool: ...

    def accepts(self, outcome: Outcome) -> bool: ...

    def eviction_reason(self, preemptor: Job, victim: Task) -> EvictionReason: ...


class SearchBudget:
    """Scenarios left to simulate in this action; shared by all its jobs."""

    def __init__(self, scenarios: int) -> None:
        self.left = scenarios

    def spend(self) -> bool:
        self.left -= 1
        return self.left >= 0


class Accumulation:
    """Victim batches gathered so far, indexed by job and by node for cheap scenario building."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.tasks_by_job: dict[Job, list[Task]] = {}
        self.jobs_by_node: dict[int, dict[Job, None]] = {}
        self.freed_gpus = np.zeros(len(session.nodes.table))

    def add(self, job: Job, tasks: list[Task]) -> None:
        self.tasks_by_job.setdefault(job, []).extend(tasks)
        for task in tasks:
            if task.node is not None:
                self.jobs_by_node.setdefault(task.node, {})[job] = None
                self.freed_gpus[task.node] += _gpus_held(task)

    def on_nodes(self, nodes: Iterable[int]) -> list[Task]:
        """Whole victim jobs (all their gathered pods) with a pod on one of the nodes: gangs are not split."""
        jobs: dict[Job, None] = {}
        for node in sorted(set(nodes)):
            jobs.update(self.jobs_by_node.get(node, {}))
        return [task for job in jobs for task in self.tasks_by_job[job]]


def _gpus_held(task: Task) -> float:
    return float(task.request[GPU]) if not task.is_shared_gpu else float(task.spec.gpu_devices)


Generator = Callable[[Session, Accumulation, list[Task], list[float]], Iterator[list[Task]]]


def solve(session: Session, preemptor: Job, policy: VictimPolicy, budget: SearchBudget) -> Statement | None:
    pool = policy.candidate_pool(preemptor)
    candidates = [j for j in pool if j is not preemptor and policy.is_candidate(preemptor, j)]
    if not candidates:
        return None
    wanted = (_gpus_wanted(t) for t in tasks_to_allocate(session, preemptor))
    demand = sorted((gpus for gpus in wanted if gpus > 0), reverse=True)
    tried: set[frozenset[int]] = set()
    generators: list[Generator] = [_multi_node_scenarios]
    if _one_node_could_be_enough(session, demand, candidates):
        generators.insert(0, _node_local_scenarios)
    for generate in generators:
        victims = VictimQueue(session, candidates)
        accumulated = Accumulation(session)
        while (batch := victims.pop()) is not None:
            accumulated.add(*batch)
            if not _gpus_could_fit(session, demand, accumulated.freed_gpus):
                continue
            for scenario in generate(session, accumulated, batch[1], demand):
                key = frozenset(t.uid for t in scenario)
                if key in tried or not _gpus_could_fit(session, demand, _freed_by(session, scenario)):
                    continue
                tried.add(key)
                if not budget.spend():
                    return None
                statement = simulate(session, preemptor, scenario, policy)
                if statement is not None:
                    return statement
    return None


def _one_node_could_be_enough(session: Session, demand: list[float], candidates: list[Job]) -> bool:
    """Whether any node-local scenario could free enough GPUs; if none can, that search is skipped.

    A node-local scenario takes the victim jobs with a pod on one node (whole jobs), so it
    frees at most the GPUs of all candidate jobs touching that node.
    """
    if not demand:
        return True
    per_node: dict[int, float] = {}
    for job in candidates:
        held = sum(_gpus_held(t) for t in job.tasks if t.status in ACTIVE_ALLOCATED)
        for node in {t.node for t in job.tasks if t.node is not None and t.status in ACTIVE_ALLOCATED}:
            per_node[node] = per_node.get(node, 0.0) + held
    best = max(per_node.values(), default=0.0)
    return float(session.free_gpus().sum()) + best + EPSILON >= sum(demand)


def _gpus_wanted(task: Task) -> float:
    """Whole GPUs only: shared-GPU requests may fit free fractions the filter does not track."""
    return 0.0 if task.is_shared_gpu else task.spec.gpu


def _freed_by(session: Session, victims: list[Task]) -> np.ndarray:
    freed = np.zeros(len(session.nodes.table))
    for task in victims:
        if task.node is not None:
            freed[task.node] += _gpus_held(task)
    return freed


def _gpus_could_fit(session: Session, demand: list[float], freed: np.ndarray) -> bool:
    """Necessary condition (§11.6): largest GPU requests first, each onto the roomiest node left."""
    if not demand:
        return True
    capacity = session.free_gpus() + freed
    if float(capacity.sum()) + EPSILON < sum(demand):
        return False
    if demand[0] == demand[-1]:
        return float(np.floor((capacity + EPSILON) / demand[0]).sum()) >= len(demand)
    room = sorted(capacity.tolist(), reverse=True)
    for want in demand:
        best = max(range(len(room)), key=room.__getitem__)
        if room[best] + EPSILON < want:
            return False
        room[best] -= want
    return True


def _node_local_scenarios(
    session: Session, accumulated: Accumulation, newest: list[Task], demand: list[float]
) -> Iterator[list[Task]]:
    for node in sorted({t.node for t in newest if t.node is not None}):
        yield accumulated.on_nodes([node])


def _multi_node_scenarios(
    session: Session, accumulated: Accumulation, newest: list[Task], demand: list[float]
) -> Iterator[list[Task]]:
    """Growing sets of victim nodes, smallest post-eviction capacity first (§11.6 MultiNodeGang)."""
    free_now = session.free_gpus()
    victim_nodes = sorted(accumulated.jobs_by_node)
    after = {row: float(free_now[row] + accumulated.freed_gpus[row]) for row in victim_nodes}
    smallest = demand[-1] if demand else 0.0
    big_enough = (row for row in victim_nodes if after[row] + EPSILON >= smallest)
    usable = sorted(big_enough, key=lambda row: (after[row], row))
    baseline = float(free_now.sum() - sum(free_now[row] for row in victim_nodes))
    needed = sum(demand)
    size, covered = 0, baseline
    while size < len(usable) and covered + EPSILON < needed:
        covered += after[usable[size]]
        size += 1
    step = 1
    while size <= len(usable):
        yield accumulated.on_nodes(usable[: max(size, 1)])
        if size == len(usable):
            return
        size = min(size + step, len(usable))
        step *= 2


def simulate(session: Session, preemptor: Job, victims: list[Task], policy: VictimPolicy) -> Statement | None:
    statement = Statement(session)
    active_before = sum(1 for t in preemptor.tasks if t.status in ACTIVE_USED)
    nodes_before = {t.uid: t.node for t in victims}
    for task in victims:
        statement.evict(task)
    evicted = {t.uid for t in victims}
    with session.what_if():
        replaced_all = _replace_in_order(session, statement, preemptor, victims, evicted)
    if not replaced_all:
        statement.discard()
        return None
    active_after = sum(1 for t in preemptor.tasks if t.status in ACTIVE_USED)
    if not preemptor.gang_satisfied() or active_after <= active_before:
        statement.discard()
        return None
    replaced = frozenset(t.uid for t in victims if t.status != TaskStatus.RELEASING)
    outcome = Outcome(preemptor, victims, replaced, nodes_before)
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
    """Place the victims again and the preemptor, in the order allocate would take them.

    As KAI does, every job with pending pods joins the order, though only the victims and the
    preemptor are placed: a queue's place depends on the job at its head, so a big job waiting
    ahead of the preemptor can put the victim's queue first, which then takes its GPUs back
    (and allocate would do the same after a real eviction: ordering only victims and preemptor
    evicted the same job every cycle).  Once every victim and the preemptor are through, the
    rest of the order can change nothing."""
    victim_jobs = list(dict.fromkeys(t.job for t in victims))
    placed = {*victim_jobs, preemptor}
    waiting = [job for job in session.jobs_with_pending_tasks() if job not in placed]
    queue = JobQueue(session, [*victim_jobs, preemptor, *waiting], pending=evicted)
    to_place = len(placed)
    while to_place and (job := queue.pop()) is not None:
        if job not in placed:
            continue
        to_place -= 1
        if job is preemptor:
            if not allocate_job(session, statement, job, pipeline_only=True):
                return False
            continue
        if allocate_job(session, statement, job, pipeline_only=True, extra_pending=evicted) and any(
            t.uid in evicted and t.status == TaskStatus.RELEASING for t in job.tasks
        ):
            queue.push(job)
            to_place += 1
    return True


def free_gpu_capacity(session: Session) -> float:
    total = float(np.sum(session.free_gpus()))
    for row in session.nodes.rows_with_groups():
        for group in session.nodes.groups[row].values():
            if not group.fully_releasing:
                total += group.free_memory_after_release / group.memory
    return total
