"""`allocate_job`: one all-or-nothing attempt to place a job's next tasks.

Shared by the allocate action and, with `pipeline_only`, by the victim
actions' simulations (§10). The caller owns the statement and decides to
commit or discard; this function only rolls back its own partial work.
Tasks are placed in gang order; a job whose (sub)groups a plugin restricts
to node subsets (topology constraints, §18) is placed down its PodGroup tree
instead, subset by subset.
"""

from __future__ import annotations

import numpy as np

from kai_ray.engine.gang import tasks_to_allocate
from kai_ray.engine.jobs import Job, PodSet, SubGroupSet, Task
from kai_ray.engine.placement import place_task
from kai_ray.engine.reasons import PendingCause, PendingReason
from kai_ray.engine.session import Session
from kai_ray.engine.statement import Statement
from kai_ray.model.objects import TaskStatus

PLACED_NOW = frozenset({TaskStatus.ALLOCATED, TaskStatus.PIPELINED})


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
    for plugin in session.hooked["job_capacity_problem"]:
        problem = plugin.job_capacity_problem(job, tasks)
        if problem:
            session.note_reason(job, problem)
            return False
    checkpoint = statement.checkpoint()
    splits_nodes = False
    for plugin in session.hooked["splits_nodes"]:
        # A plain loop in place, not `any` over a generator nor a function of its own (each a
        # call in CPython 3.11): asked of every job attempt, of one plugin or two.
        if plugin.splits_nodes(job):
            splits_nodes = True
            break
    if splits_nodes:
        mask = np.ones(len(session.nodes.table), dtype=bool) if node_mask is None else node_mask
        walk = _GroupWalk(session, statement, job, tasks, pipeline_only)
        failure = walk.group(job.root, tasks, mask, None)
        if failure is None:
            return True
        statement.rollback(checkpoint)
        session.note_reason(job, failure)
        return False
    for placed, task in enumerate(tasks):
        reason = place_task(session, statement, task, node_mask, pipeline_only)
        if reason is not None:
            statement.rollback(checkpoint)
            if _in_some_domain(session, statement, tasks, node_mask, pipeline_only):
                return True
            session.note_reason(job, _gang_reason(job, len(tasks), placed, reason))
            return False
    return True


def _in_some_domain(
    session: Session,
    statement: Statement,
    tasks: list[Task],
    node_mask: np.ndarray | None,
    pipeline_only: bool,
) -> bool:
    """A gang whose pods require each other's company, tried whole in each domain that could hold
    it (`PodConstraints.self_affine_domains`); only asked after the plain attempt failed."""
    constraints = session.pod_constraints
    if constraints is None:
        return False
    for domain in constraints.self_affine_domains(tasks, node_mask):
        checkpoint = statement.checkpoint()
        if all(place_task(session, statement, task, domain, pipeline_only) is None for task in tasks):
            return True
        statement.rollback(checkpoint)
    return False


class _GroupWalk:
    """Allocation down the PodGroup tree, for jobs whose (sub)groups restrict their nodes (§18).

    KAI's order: a group asks the plugins for node subsets, then on each subset in turn places
    its child SubGroupSets and then its pod sets (each may narrow the subset further), and
    keeps the first subset on which everything below fits, rolling back the others.
    """

    def __init__(
        self, session: Session, statement: Statement, job: Job, tasks: list[Task], pipeline_only: bool
    ) -> None:
        self.session = session
        self.statement = statement
        self.job = job
        self.tasks = tasks
        self.pipeline_only = pipeline_only

    def group(
        self, group: SubGroupSet | PodSet, tasks: list[Task], mask: np.ndarray, bonus: np.ndarray | None
    ) -> PendingReason | None:
        subsets = self._subsets(group, tasks, mask)
        if isinstance(subsets, PendingReason):
            return subsets
        masks, own_bonus = subsets
        bonus = bonus if own_bonus is None else own_bonus
        first_failure: PendingReason | None = None
        for subset in masks:
            checkpoint = self.statement.checkpoint()
            failure = self._members(group, tasks, subset, bonus)
            if failure is None:
                return None
            self.statement.rollback(checkpoint)
            first_failure = first_failure or failure
        if first_failure is None:
            return PendingReason(PendingCause.NO_ROOM, f"no nodes left for {group.name or 'the job'}")
        if len(masks) > 1:
            message = f"none of {len(masks)} candidate domains held it; first: {first_failure}"
            return PendingReason(first_failure.cause, message, first_failure.refusals)
        return first_failure

    def _subsets(
        self, group: SubGroupSet | PodSet, tasks: list[Task], mask: np.ndarray
    ) -> tuple[list[np.ndarray], np.ndarray | None] | PendingReason:
        masks, bonus = [mask], None
        for plugin in self.session.plugins:
            answer = plugin.node_subsets(self.job, group, tasks, mask)
            if isinstance(answer, PendingReason):
                return answer
            if answer is not None:
                masks, bonus = answer.masks, answer.scores if answer.scores is not None else bonus
        return masks, bonus

    def _members(
        self, group: SubGroupSet | PodSet, tasks: list[Task], mask: np.ndarray, bonus: np.ndarray | None
    ) -> PendingReason | None:
        if isinstance(group, PodSet):
            return self._place(tasks, mask, bonus)
        members = self.session.sorted_members(group)
        ordered = [m for m in members if isinstance(m, SubGroupSet)] + [
            m for m in members if isinstance(m, PodSet)
        ]
        for member in ordered:
            pod_sets = (
                set(map(id, member.all_pod_sets())) if isinstance(member, SubGroupSet) else {id(member)}
            )
            failure = self.group(member, [t for t in tasks if id(t.pod_set) in pod_sets], mask, bonus)
            if failure is not None:
                return failure
        return None

    def _place(self, tasks: list[Task], mask: np.ndarray, bonus: np.ndarray | None) -> PendingReason | None:
        for task in tasks:
            reason = place_task(self.session, self.statement, task, mask, self.pipeline_only, bonus)
            if reason is not None:
                placed = sum(1 for t in self.tasks if t.status in PLACED_NOW)
                return _gang_reason(self.job, len(self.tasks), placed, reason)
        return None


def _gang_reason(job: Job, wanted: int, placed: int, reason: PendingReason) -> PendingReason:
    """The pod's failure as the job's: the gang's count added; the pod's refusals kept."""
    if wanted == 1:
        return reason
    message = f"gang needs {wanted} more pods together, only {placed} fit: {reason.message}"
    return PendingReason(reason.cause, message, reason.refusals)
