"""Gang rules: which tasks one allocation attempt takes, and when a gang must wait.

§8.3: below its minimum a (sub)group is attempted as one gang of exactly
what it is missing; once satisfied it grows one pod per attempt, so elastic
growth competes with other jobs between attempts.
"""

from __future__ import annotations

from kai_ray.engine.jobs import Job, PodSet, SubGroupSet, Task
from kai_ray.engine.session import Session
from kai_ray.model.objects import ACTIVE_ALLOCATED, PENDING, PIPELINED, RELEASING

NO_EXTRA: frozenset[int] = frozenset()


def tasks_to_allocate(
    session: Session, job: Job, extra_pending: frozenset[int] | set[int] = NO_EXTRA
) -> list[Task]:
    """`extra_pending`: uids of evicted tasks a victim simulation may place again.

    Without extra tasks the answer is remembered until a task of the job moves: it reads only
    the job's own tasks (their statuses, order keys of their specs, SubGroup order keys of the
    job's own counts), and every action asks it of each pending job several times (ordering,
    pre-checks, the policy), a quarter of a full cluster's cycle before.
    """
    if extra_pending:
        return _collect(session, job.root, extra_pending)
    moves = session.job_move_counts.get(job, 0)
    known = session.gang_tasks.get(job)
    if known is None or known[0] != moves:
        known = (moves, _collect(session, job.root, NO_EXTRA))
        session.gang_tasks[job] = known
    return list(known[1])


def _collect(session: Session, node: SubGroupSet, extra: frozenset[int] | set[int]) -> list[Task]:
    """The tasks one attempt takes of the group; a group of one pod set the short way (gang
    collection runs for every job queue order weighs)."""
    if not node.sets and len(node.pod_sets) == 1:
        return _lone_pod_set(session, node, node.pod_sets[0], extra)
    return _walk(session, node, extra)


def _walk(session: Session, node: SubGroupSet, extra: frozenset[int] | set[int]) -> list[Task]:
    """§8.3 over the group's members in subgroup order: below the group's minimum the missing
    part of each unsatisfied member among its first members, once satisfied the first member's
    next pods. Each member's allocated pods are counted once, for whether it has its minimum and
    for how many it still needs."""
    members = session.sorted_members(node)
    counts: list[int | None] = []
    satisfied: list[bool] = []
    for member in members:
        if isinstance(member, PodSet):
            allocated = member.active_allocated()
            counts.append(allocated)
            satisfied.append(allocated >= member.min_available)
        else:
            counts.append(None)
            satisfied.append(member.min_satisfied())
    wanted = node.min_members()
    if satisfied.count(True) < wanted:
        found: list[Task] = []
        for member, have, done in zip(members[:wanted], counts, satisfied, strict=False):
            if not done:
                found.extend(_member_tasks(session, member, have, extra))
        return found
    for member, have in zip(members, counts, strict=True):
        tasks = _member_tasks(session, member, have, extra)
        if tasks:
            return tasks
    return []


def _lone_pod_set(
    session: Session, node: SubGroupSet, pod_set: PodSet, extra: frozenset[int] | set[int]
) -> list[Task]:
    """What `_walk` gives a group of one pod set (most jobs), without its lists: that pod set's
    tasks, unless it has its minimum and the group asks for more than one member (which its
    lone member cannot give). Its allocated and its waiting pods are found in one pass."""
    allocated = 0
    waiting = []
    for task in pod_set.tasks:
        status = task.status
        if status in ACTIVE_ALLOCATED:
            allocated += 1
        elif status is PENDING or (status is RELEASING and task.uid in extra):
            waiting.append(task)
    if allocated >= pod_set.min_available and node.min_members() > 1:
        return []
    return _first_waiting(session, pod_set, allocated, waiting)


def _member_tasks(
    session: Session, member: SubGroupSet | PodSet, have: int | None, extra: frozenset[int] | set[int]
) -> list[Task]:
    """`have`: a pod set's allocated pods, as `_collect` counted them (None for a SubGroupSet)."""
    if isinstance(member, SubGroupSet):
        return _collect(session, member, extra)
    assert have is not None  # counted for every pod set
    waiting = [t for t in member.tasks if t.status == PENDING or (t.uid in extra and t.status == RELEASING)]
    return _first_waiting(session, member, have, waiting)


def _first_waiting(session: Session, pod_set: PodSet, have: int, waiting: list[Task]) -> list[Task]:
    """Of a pod set's `waiting` tasks (pending, or evicted and allowed back), in task order, what
    it is missing below its minimum, or one once it has it; `have`: its allocated pods."""
    if not waiting:
        return waiting
    pending = session.sorted_tasks(waiting) if len(waiting) > 1 else waiting
    if have >= pod_set.min_available:
        return pending[:1]
    return pending[: pod_set.min_available - have]


def should_pipeline(job: Job) -> bool:
    """A gang whose minimum relies on a pipelined task must not bind any part yet (§8.4)."""
    for pod_set in job.pod_sets.values():
        # A plain loop, not a generator or a list comprehension (each a call of its own in
        # CPython 3.11): asked after every job the allocate action places.
        for task in pod_set.tasks:
            if task.status is PIPELINED:
                break
        else:
            continue
        placed_now = pod_set.active_allocated() - pod_set.count(frozenset({PIPELINED}))
        if placed_now < pod_set.min_available:
            return True
    return False
