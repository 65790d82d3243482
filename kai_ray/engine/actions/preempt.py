"""Preempt (§13): within one leaf queue, higher priority evicts strictly lower priority."""

from __future__ import annotations

import functools

from kai_ray.engine.actions.victim_action import run_victim_action
from kai_ray.engine.gang import tasks_to_allocate
from kai_ray.engine.jobs import Job, Task
from kai_ray.engine.minruntime import MinRuntime
from kai_ray.engine.reasons import EvictionCause, EvictionReason
from kai_ray.engine.session import Session
from kai_ray.engine.solver import Outcome, VictimPolicy
from kai_ray.model.objects import ACTIVE_ALLOCATED


class PreemptPolicy:
    def __init__(self, session: Session, preemptor: Job) -> None:
        self.session = session
        self.preemptor = preemptor

    @functools.cached_property
    def min_runtime(self) -> MinRuntime:
        """Built when a candidate is judged, not per pending job (most have no candidate)."""
        return MinRuntime(self.session)

    def candidate_pool(self, preemptor: Job) -> list[Job]:
        return self.session.preemptible_jobs(in_queue=preemptor.queue, below_priority=preemptor.spec.priority)

    def is_candidate(self, preemptor: Job, victim: Job) -> bool:
        return (
            victim.spec.preemptible
            and victim.queue == preemptor.queue
            and victim.spec.priority < preemptor.spec.priority
            and victim.has_status(ACTIVE_ALLOCATED)
            and self.min_runtime.is_candidate(victim, self.min_runtime.preempt_runtime(victim))
        )

    def accepts(self, outcome: Outcome) -> bool:
        runtimes = {t.job: self.min_runtime.preempt_runtime(t.job) for t in outcome.victims}
        return self.min_runtime.allows(outcome.evicted(), runtimes)

    def eviction_reason(self, preemptor: Job, victim: Task) -> EvictionReason:
        message = (
            f"preempted by higher priority job {preemptor.name} "
            f"(priority {preemptor.spec.priority} > {victim.job.spec.priority})"
        )
        return EvictionReason(EvictionCause.PREEMPT, message, preemptor.key)


def _make_policy(session: Session, job: Job) -> VictimPolicy | None:
    if not job.spec.preemptible:
        tasks = tasks_to_allocate(session, job)
        for plugin in session.plugins:
            problem = plugin.non_preemptible_quota_problem(job, tasks)
            if problem:
                session.note_reason(job, problem)
                return None
    return PreemptPolicy(session, job)


def _victims_possible(session: Session, jobs: list[Job]) -> bool:
    """Some job has a preemptible job of lower priority in its queue."""
    lowest = session.lowest_preemptible_priority
    return any(job.queue in lowest and lowest[job.queue] < job.spec.priority for job in jobs)


def preempt(session: Session) -> None:
    run_victim_action(session, _make_policy, lambda job: True, _victims_possible)
