"""The allocate action (§10): place pending jobs into free (or freeing) capacity.

Never evicts. Each job is one statement: committed whole or discarded.
A job that still has pending pods after a successful attempt goes back into
the queue so its elastic growth competes with everyone else.
"""

from __future__ import annotations

from kai_ray.engine.allocation import allocate_job
from kai_ray.engine.gang import should_pipeline
from kai_ray.engine.job_queue import JobQueue
from kai_ray.engine.jobs import Job
from kai_ray.engine.reasons import PendingCause, PendingReason
from kai_ray.engine.session import Session
from kai_ray.engine.statement import Statement
from kai_ray.model.objects import QUEUE_CHARGING


def not_ready_message(job: Job) -> str:
    """Why a gang cannot start yet, with the counts a user has to fix ("5 required, 2 exist"):
    per pod set when the job has several, as each has its own minimum."""
    short = [p for p in job.pod_sets.values() if not p.ready()]
    base = "not enough pods exist yet to meet the gang minimum"
    if not short:
        return base
    if len(job.pod_sets) == 1:
        return f"{base}: {short[0].min_available} required, {short[0].alive()} exist"
    counts = "; ".join(f"{p.name}: {p.min_available} required, {p.alive()} exist" for p in short)
    return f"{base} ({counts})"


def pending_ready_jobs(session: Session) -> list[Job]:
    jobs = []
    for job in session.jobs_with_pending_tasks():
        if not job.ready():
            session.note_reason(job, PendingReason(PendingCause.NOT_READY, not_ready_message(job)))
            continue
        jobs.append(job)
    return jobs


def allocate(session: Session) -> None:
    jobs = pending_ready_jobs(session)
    session.node_finder.prepare(jobs)
    queue = JobQueue(session, jobs)
    # One statement for every job in turn: each job's work ends committed or discarded, which
    # leaves the statement empty, as a new one is.
    statement = Statement(session)
    while (job := queue.pop()) is not None:
        had_allocation = job.has_status(QUEUE_CHARGING)
        if not allocate_job(session, statement, job):
            statement.discard()
            continue
        pipelined = should_pipeline(job)
        if pipelined:
            statement.convert_allocated_to_pipelined(job.tasks)
        statement.commit()
        if not pipelined and not had_allocation:
            job.last_start = session.now
        if session.has_pending_tasks(job):
            queue.push(job)
