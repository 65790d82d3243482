"""The split cycle's plan, from the parts' accepted placements when they placed every pending pod.

Only then is it used (`cycle`): nothing is left for another action (consolidation, reclaim and
preempt act for pending jobs, and no stale gang was let into a split cycle), so the plan is the
accepted placements and evictions and every other pod's unchanged state.
"""

from __future__ import annotations

from kai_ray.engine.plan import Eviction, Plan, StateFields, TaskState, new_bind, problem_reasons
from kai_ray.engine.reasons import EvictionCause, EvictionReason
from kai_ray.model.objects import OCCUPYING, JobSpec, TaskSpec, TaskStatus
from kai_ray.model.snapshot import NodeTable, Snapshot
from kai_ray.split.part import EvictedPod, PartAnswer, PlacedPod

ACCEPTED_STATUS = {True: TaskStatus.ALLOCATED, False: TaskStatus.PIPELINED}


def unmoved_state(task: TaskSpec, table: NodeTable) -> TaskState:
    """What the plan says of a pod no action moved (as `plan.task_state` for an unmoved task)."""
    row = table.index.get(task.node) if task.node is not None else None
    accepted = 0.0
    if row is not None and task.status in OCCUPYING:
        accepted = task.accepted_gpus(float(table.gpu_memory[row]))
    node = task.node if task.status == TaskStatus.PENDING or row is not None else None
    return TaskState(task.status, node, task.gpu_groups, accepted)


def parts_plan(snapshot: Snapshot, answers: list[PartAnswer]) -> Plan:
    """The plan of a split cycle whose parts placed every pending pod: binds and evictions in
    snapshot job order, as the local plan lists them, and every pod's state."""
    placed: dict[tuple[str, str], tuple[PlacedPod, bool]] = {}
    evicted: dict[tuple[str, str], EvictedPod] = {}
    for answer in answers:
        for binds, pods in ((True, answer.binds), (False, answer.pipelined)):
            for pod in pods:
                placed[(pod[0], pod[1])] = (pod, binds)
        for gone in answer.evictions:
            evicted[(gone[0], gone[1])] = gone
    plan = Plan(problems=list(snapshot.problems))
    table = snapshot.nodes
    reasons: dict[tuple[str, str, str | None], EvictionReason] = {}
    """One reason per (action, message, preemptor): a reclaim gives thousands of victims one."""
    alike: dict[StateFields, TaskState] = {}
    for job in snapshot.jobs:
        job_key = job.key
        for task in job.tasks:
            key = (job_key, task.name)
            found = placed.get(key)
            victim = evicted.get(key) if evicted else None
            if found is not None:
                (_, name, node, groups, gpus, action), binds = found
                plan.tasks[key] = _shared(alike, (ACCEPTED_STATUS[binds], node, groups, gpus))
                bind = new_bind(job_key, name, node, groups, gpus, action)
                (plan.binds if binds else plan.pipelined).append(bind)
            elif victim is not None:
                accepted = task.accepted_gpus(float(table.gpu_memory[table.index[victim[2]]]))
                plan.tasks[key] = _shared(alike, (TaskStatus.RELEASING, victim[2], victim[3], accepted))
            else:
                plan.tasks[key] = unmoved_state(task, table)
            if victim is not None:
                why = reasons.get(victim[4:])
                if why is None:
                    why = reasons[victim[4:]] = EvictionReason(EvictionCause(victim[4]), victim[5], victim[6])
                plan.evictions.append(Eviction(job_key, task.name, victim[2], why))
    for name, waiting in problem_reasons(snapshot.problems).items():
        plan.pending_reasons.setdefault(name, waiting)
    return plan


def _shared(alike: dict[StateFields, TaskState], fields: StateFields) -> TaskState:
    """One frozen state for the pods that stand alike, as the local plan shares them
    (`plan.task_state`): only where equal fields print alike (a float GPU count, not zero)."""
    gpus = fields[3]
    if type(gpus) is not float or gpus == 0.0:
        return TaskState(*fields)
    state = alike.get(fields)
    if state is None:
        state = alike[fields] = TaskState(*fields)
    return state


def jobs_by_key(jobs: list[JobSpec]) -> dict[str, JobSpec]:
    return {job.key: job for job in jobs}
