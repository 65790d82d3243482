"""`allocate_job`: one all-or-nothing attempt to place a job's next tasks.

Shared by the allocate action and, with `pipeline_only`, by the victim
actions' simulations (§10). The caller owns the statement and decides to
commit or discard; this function only rolls back its own partial work.
"""

from __future__ import annotations

import numpy as np

from kai_ray.engine.gang import tasks_to_allocate
from kai_ray.engine.jobs import Job
from kai_ray.engine.placement import place_task
from kai_ray.engine.reasons import PendingCause, PendingReason
from kai_ray.engine.session import Session
from kai_ray.engine.statement import Statement


def allocate_job(
    session: Session,
    statement: Statement,
    job: Job,
    *,
    pipeline_only: bool = False,
    node_mask: np.ndarray | None = None,
    extra_pending: frozenset[int] | set[int] = frozenset(),
) -> bool:
    tasks = tasks_to_allocate(session, job, extra_pending)
    if not tasks:
        return False
    for plugin in session.plugins:
        problem = plugin.job_capacity_problem(job, tasks)
        if problem:
            session.note_reason(job, problem)
            return False
    checkpoint = statement.checkpoint()
    for placed, task in enumerate(tasks):
        reason = place_task(session, statement, task, node_mask, pipeline_only)
        if reason:
            statement.rollback(checkpoint)
            session.note_reason(job, _gang_reason(job, len(tasks), placed, reason))
            return False
    return True


def _gang_reason(job: Job, wanted: int, placed: int, reason: str) -> PendingReason:
    if wanted == 1:
        return PendingReason(PendingCause.NO_ROOM, reason)
    return PendingReason(
        PendingCause.NO_ROOM, f"gang needs {wanted} more pods together, only {placed} fit: {reason}"
    )
