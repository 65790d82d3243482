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


def pending_ready_jobs(session: Session) -> list[Job]:
    jobs = []
    for job in session.jobs:
        if not job.pending_tasks():
            continue
        if not job.ready():
            reason = "not enough pods exist yet to meet the gang minimum"
            session.note_reason(job, PendingReason(PendingCause.NOT_READY, reason))
            continue
        jobs.append(job)
    return jobs


def allocate(session: Session) -> None:
    jobs = pending_ready_jobs(session)
    session.node_finder.prepare([task for job in jobs for task in job.pending_tasks()])
    queue = JobQueue(session, jobs)
    while (job := queue.pop()) is not None:
        statement = Statement(session)
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
        if job.pending_tasks():
            queue.push(job)
