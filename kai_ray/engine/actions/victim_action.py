"""The outer loop every victim-based action shares (§11.1)."""

from __future__ import annotations

from collections.abc import Callable

from kai_ray.engine.actions.allocate import pending_ready_jobs
from kai_ray.engine.gang import tasks_to_allocate
from kai_ray.engine.job_queue import JobQueue
from kai_ray.engine.jobs import Job
from kai_ray.engine.reasons import PendingCause, PendingReason
from kai_ray.engine.session import Session
from kai_ray.engine.solver import SearchBudget, VictimPolicy, solve

PolicyFactory = Callable[[Session, Job], VictimPolicy | None]
"""Builds the policy for one pending job, or None when the job may not evict at all."""

VictimsPossible = Callable[[Session, list[Job]], bool]
"""Whether any of these pending jobs could find a victim at all as the session stands: False
only when the action's rules leave every one of them without a candidate."""


def in_preemption_delay(session: Session, job: Job) -> bool:
    delay = job.spec.preemption_delay
    if not delay or delay <= 0:
        return False
    since = max(job.spec.created, job.spec.last_eviction or job.spec.created)
    return session.now < since + delay


def run_victim_action(
    session: Session,
    make_policy: PolicyFactory,
    eligible: Callable[[Job], bool],
    victims_possible: VictimsPossible,
) -> None:
    """Each pending job in queue order searches for victims under its policy.

    When `victims_possible` says no job could find any, no search can succeed and nothing
    commits, so the order cannot matter: each job only gets what its policy notes of it, in the
    jobs' own order, without ordering 20,000 pending jobs across the queues to no end (issue 35:
    a burst of pending pods of one queue and priority, three such loops a cycle)."""
    jobs = []
    for job in pending_ready_jobs(session):
        if in_preemption_delay(session, job):
            reason = "preemption delay has not elapsed, so it may not evict others yet"
            session.note_reason(job, PendingReason(PendingCause.PREEMPTION_DELAY, reason))
            continue
        if eligible(job):
            jobs.append(job)
    if not victims_possible(session, jobs):
        for job in jobs:
            if tasks_to_allocate(session, job) and not _unresolvable(session, job):
                make_policy(session, job)
        return
    queue = JobQueue(session, jobs)
    budget = SearchBudget(session.config.search_budget_scenarios)
    while (preemptor := queue.pop()) is not None:
        tasks = tasks_to_allocate(session, preemptor)
        if not tasks or _unresolvable(session, preemptor):
            continue
        policy = make_policy(session, preemptor)
        if policy is None:
            continue
        statement = solve(session, preemptor, policy, budget)
        if statement is not None:
            statement.commit()
        elif budget.left <= 0:
            return


def _unresolvable(session: Session, job: Job) -> bool:
    """A pod larger than any node cannot be helped by evicting anything (§11.3)."""
    for task in tasks_to_allocate(session, job):
        for plugin in session.plugins:
            if plugin.pre_predicate(task):
                return True
    return False
