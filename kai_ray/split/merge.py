"""The split cycle's plan, from the parts' accepted placements when they placed every pending pod.

Only then is it used (`cycle`): nothing is left for another action (consolidation, reclaim and
preempt act for pending jobs, and no stale gang was let into a split cycle), so the plan is the
accepted placements and every other pod's unchanged state.
"""

from __future__ import annotations

from kai_ray.engine.plan import Bind, Plan, TaskState, problem_reasons
from kai_ray.model.objects import OCCUPYING, JobSpec, TaskSpec, TaskStatus
from kai_ray.model.snapshot import NodeTable, Snapshot
from kai_ray.split.part import PartAnswer, PlacedPod

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
    """The plan of a split cycle whose parts placed every pending pod: binds in snapshot job order,
    as the local plan lists them, and every pod's state."""
    placed: dict[tuple[str, str], tuple[PlacedPod, bool]] = {}
    for answer in answers:
        for binds, pods in ((True, answer.binds), (False, answer.pipelined)):
            for pod in pods:
                placed[(pod[0], pod[1])] = (pod, binds)
    plan = Plan(problems=list(snapshot.problems))
    table = snapshot.nodes
    for job in snapshot.jobs:
        for task in job.tasks:
            key = (job.key, task.name)
            found = placed.get(key)
            if found is None:
                plan.tasks[key] = unmoved_state(task, table)
                continue
            (job_key, name, node, groups, gpus), binds = found
            plan.tasks[key] = TaskState(ACCEPTED_STATUS[binds], node, groups, gpus)
            (plan.binds if binds else plan.pipelined).append(Bind(job_key, name, node, groups, gpus))
    for name, reason in problem_reasons(snapshot.problems).items():
        plan.pending_reasons.setdefault(name, reason)
    return plan


def jobs_by_key(jobs: list[JobSpec]) -> dict[str, JobSpec]:
    return {job.key: job for job in jobs}
