"""Consolidation (§14): move running pods so a fragmented pending job fits.

Only when the free GPUs already add up to what the job needs, and only if
every moved pod finds a new place: nothing is terminated for good.
"""

from __future__ import annotations

from kai_ray.engine.actions.victim_action import run_victim_action
from kai_ray.engine.gang import tasks_to_allocate
from kai_ray.engine.jobs import Job, Task
from kai_ray.engine.reasons import EvictionCause, EvictionReason
from kai_ray.engine.session import Session
from kai_ray.engine.solver import Outcome, VictimPolicy, free_gpu_capacity
from kai_ray.model.objects import ACTIVE_ALLOCATED
from kai_ray.model.resources import EPSILON


class ConsolidationPolicy:
    def __init__(self, session: Session) -> None:
        self.session = session
        self.limit = session.config.max_consolidation_preemptees
        self.accepted = 0

    def candidate_pool(self, preemptor: Job) -> list[Job]:
        return self.session.preemptible_jobs()

    def is_candidate(self, preemptor: Job, victim: Job) -> bool:
        if not (victim.spec.preemptible and victim.has_status(ACTIVE_ALLOCATED)):
            return False
        if self.limit >= 0 and self.accepted > self.limit:
            return False
        self.accepted += 1
        return True

    def accepts(self, outcome: Outcome) -> bool:
        return len(outcome.replaced) == len(outcome.victims)

    def eviction_reason(self, preemptor: Job, victim: Task) -> EvictionReason:
        node = self.session.nodes.table.names[victim.node] if victim.node is not None else "another node"
        message = f"consolidation: moved to {node} to make room for job {preemptor.name}"
        return EvictionReason(EvictionCause.CONSOLIDATION, message, preemptor.key)


def _gpus_needed(session: Session, job: Job) -> float:
    return float(session.fairness_request(tasks_to_allocate(session, job), session.min_gpu_memory)[2])


def _make_policy(session: Session, job: Job) -> VictimPolicy | None:
    if free_gpu_capacity(session) + EPSILON < _gpus_needed(session, job):
        return None
    return ConsolidationPolicy(session)


def _victims_possible(session: Session, jobs: list[Job]) -> bool:
    """Some job would be given a policy (the free GPUs add up to its need) and some job is
    preemptible."""
    if not session.lowest_preemptible_priority or not jobs:
        return False
    free = free_gpu_capacity(session) + EPSILON
    return any(free >= _gpus_needed(session, job) for job in jobs)


def consolidation(session: Session) -> None:
    if session.config.max_consolidation_preemptees == 0:
        return
    run_victim_action(session, _make_policy, lambda job: job.spec.preemptible, _victims_possible)
