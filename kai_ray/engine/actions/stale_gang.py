"""Stale gang eviction (§8.6): a gang that fell below its minimum is evicted after a grace period.

When the gang fell below it is the job's own mark (KAI's `kai.scheduler/stale-podgroup-timestamp`),
read from the snapshot; the marks this cycle sets or clears are recorded in the session
(`Session.stale_marks`) for the backend to keep on the PodGroup, so that the grace period runs
across cycles, restarts and leader changes rather than starting again every cycle.
"""

from __future__ import annotations

from kai_ray.engine.jobs import Job
from kai_ray.engine.reasons import EvictionCause, EvictionReason, StaleMark
from kai_ray.engine.session import Session
from kai_ray.engine.statement import Statement
from kai_ray.model.objects import ACTIVE_ALLOCATED, ACTIVE_USED, TaskStatus


def is_stale(job: Job) -> bool:
    if any(t.status == TaskStatus.SUCCEEDED for t in job.tasks):
        return False
    if not job.has_status(ACTIVE_USED):
        return False
    return any(p.count(ACTIVE_USED) < p.min_available for p in job.pod_sets.values())


def stale_gang_eviction(session: Session) -> None:
    moved = session.moved_jobs()
    stale_since = session.stale_since
    for job in session.jobs:
        stale = job.stale
        if stale is None or job in moved:
            stale = job.stale = is_stale(job)  # a job kept from the last session was checked there
        marked = job.spec.stale_since
        if not stale:
            if stale_since:
                stale_since.pop(job.spec.name, None)
            if marked is not None:
                session.stale_marks[job.key] = _mark(job, None)
            continue
        since = marked if marked is not None else session.now
        session.stale_since[job.name] = since
        if marked is None:
            session.stale_marks[job.key] = _mark(job, since)
        grace = job.spec.staleness_grace
        if grace is None:
            grace = session.config.default_staleness_grace_seconds
        if grace < 0 or session.now - since < grace:
            continue
        _evict_gang(session, job, session.now - since)


def _mark(job: Job, since: float | None) -> StaleMark:
    active = sum(p.count(ACTIVE_USED) for p in job.pod_sets.values())
    return StaleMark(since, active, sum(p.min_available for p in job.pod_sets.values()))


def _evict_gang(session: Session, job: Job, stale_for: float) -> None:
    running = sum(p.count(ACTIVE_USED) for p in job.pod_sets.values())
    needed = sum(p.min_available for p in job.pod_sets.values())
    statement = Statement(session)
    for task in job.tasks:
        if task.status in ACTIVE_ALLOCATED:
            statement.evict(task)
            message = f"stale gang: {running} of {needed} running for {stale_for:g} s"
            session.eviction_reasons[task.uid] = EvictionReason(EvictionCause.STALE_GANG, message)
    statement.commit()
