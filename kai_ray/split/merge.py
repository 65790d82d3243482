"""The split cycle's plan, from the parts' accepted placements when they placed every pending pod.

Only then is it used (`cycle`): nothing is left for another action (consolidation, reclaim and
preempt act for pending jobs, and no stale gang was let into a split cycle), so the plan is the
accepted placements and evictions and every other pod's unchanged state.

Most pods of a large cluster do not move, and what the plan says of them depends on the snapshot
alone: `standing_plan` states them while the parts work (`PartRunner.answers` runs it between
asking the parts and waiting for them), and `PartsMerge` only restates the pods the parts moved,
each answer's as it comes in.
"""

from __future__ import annotations

from dataclasses import dataclass
from operator import itemgetter

import numpy as np

from kai_ray.engine.plan import (
    Bind,
    Plan,
    StateFields,
    TaskState,
    new_bind,
    new_eviction,
    new_task_state,
    problem_reasons,
    shared_state,
)
from kai_ray.engine.reasons import EvictionCause, EvictionReason
from kai_ray.model.objects import ALLOCATED, OCCUPYING, PENDING, PIPELINED, RELEASING, JobSpec
from kai_ray.model.snapshot import Snapshot
from kai_ray.split.checks import TaskIndex
from kai_ray.split.part import EvictedPod, PartAnswer


@dataclass(frozen=True)
class StandingPlan:
    """What the coordinator reads of the snapshot whatever the parts answer."""

    jobs: dict[str, JobSpec]
    tasks: dict[tuple[str, str], TaskState]
    """Every pod's state if nothing moved (as `plan.task_state` states an unmoved task), in
    snapshot order: the plan's `tasks` once the moved pods are restated."""
    keys: list[tuple[str, str]]
    """Every pod's (job key, name) by position (`PodPositions`): that order."""
    order: dict[tuple[str, str], int]
    """Each pod's position: the plan lists binds and evictions in that order."""


def standing_plan(snapshot: Snapshot) -> StandingPlan:
    """Pods that stand alike share one state, as in the local plan (`plan.task_state`): pending
    ones with a positive zero of GPUs, placed ones with a GPU count that is a float other than
    zero (so equal fields print alike). A large cycle's pending pods are most of its states, and
    the parts restate each one they place; a large cluster's placed pods share a node by the
    dozen, and the states the parts' evictions replace then live on."""
    table = snapshot.nodes
    rows, memory = table.index, table.gpu_memory.tolist()
    states: dict[tuple[str, str], TaskState] = {}
    keys: list[tuple[str, str]] = []
    waiting: dict[tuple[str | None, tuple[str, ...]], TaskState] = {}
    alike: dict[StateFields, TaskState] = {}
    for job in snapshot.jobs:
        job_key = job.key
        for task in job.tasks:
            status, node, key = task.status, task.node, (job_key, task.name)
            keys.append(key)
            if status == PENDING:
                fields = (node, task.gpu_groups)
                state = waiting.get(fields)
                if state is None:
                    state = waiting[fields] = new_task_state(PENDING, node, task.gpu_groups, 0.0)
                states[key] = state
                continue
            row = rows.get(node) if node is not None else None
            accepted = 0.0
            if row is not None and status in OCCUPYING:
                accepted = task.accepted_gpus(memory[row])
                if type(accepted) is float and accepted != 0.0:
                    states[key] = shared_state(alike, status, node, task.gpu_groups, accepted)
                    continue
            elif row is None:
                node = None
            states[key] = new_task_state(status, node, task.gpu_groups, accepted)
    order = {key: position for position, key in enumerate(keys)}
    return StandingPlan({job.key: job for job in snapshot.jobs}, states, keys, order)


class PartsMerge:
    """The plan of a split cycle whose parts placed every pending pod: binds and evictions in
    snapshot order, as the local plan lists them, and every pod's state. Each answer is taken as
    it comes in (`take`), so that once every part has answered only the last one's pods and the
    sorting are left (`plan`); nothing depends on the order the answers come in.

    It takes `standing`'s states as its own: a standing plan serves one cycle. Placed pods that
    stand alike share a state, as in the local plan (`plan.task_state`), where equal fields print
    alike."""

    def __init__(self, snapshot: Snapshot, standing: StandingPlan) -> None:
        self.snapshot = snapshot
        self.standing = standing
        self._placed: list[tuple[np.ndarray, list[Bind], int]] = []
        """Per answer taken: its pods' positions, their binds, how many of them are bound."""
        self._evicted: list[tuple[int, EvictedPod]] = []
        self._alike: dict[StateFields, TaskState] = {}

    def take(self, answer: PartAnswer, pods: np.ndarray) -> None:
        """States and binds of `answer`'s placed pods, at positions `pods` (as the checks that
        trusted the answer read them), its evictions kept for `plan` (where a victim some answer
        placed again keeps its new state)."""
        keys, states, alike = self.standing.keys, self.standing.tasks, self._alike
        placed, names = answer.placed, self.snapshot.nodes.names
        binds: list[Bind] = []
        at, rows, bound = pods.tolist(), placed.rows.tolist(), placed.bound
        for status, kind in ((ALLOCATED, slice(0, bound)), (PIPELINED, slice(bound, len(at)))):
            columns = (at[kind], rows[kind], placed.groups[kind], placed.gpus[kind], placed.actions[kind])
            for pod, row, groups, gpus, action in zip(*columns, strict=True):
                key, node = keys[pod], names[row]
                binds.append(new_bind(key[0], key[1], node, groups, gpus, action))
                states[key] = (
                    shared_state(alike, status, node, groups, gpus)
                    if type(gpus) is float and gpus != 0.0
                    else new_task_state(status, node, groups, gpus)
                )
        self._placed.append((pods, binds, bound))
        order = self.standing.order
        self._evicted.extend((order[(gone[0], gone[1])], gone) for gone in answer.evictions)

    def plan(self, index: TaskIndex, placed_pods: np.ndarray) -> Plan:
        """The plan from every answer taken; `placed_pods` says of each pod by position whether
        the answers placed it (a victim placed again keeps the state of its new place)."""
        snapshot, states = self.snapshot, self.standing.tasks
        plan = Plan(problems=list(snapshot.problems), tasks=states)
        if self._placed:
            positions = np.concatenate([pods for pods, _, _ in self._placed])
            binds = [bind for _, answer_binds, _ in self._placed for bind in answer_binds]
            bound = np.concatenate([np.arange(len(pods)) < count for pods, _, count in self._placed])
            ranked = np.argsort(positions, kind="stable")
            plan.binds = [binds[at] for at in ranked[bound[ranked]].tolist()]
            plan.pipelined = [binds[at] for at in ranked[~bound[ranked]].tolist()]
        self._evicted.sort(key=itemgetter(0))
        reasons: dict[tuple[str, str, str | None], EvictionReason] = {}
        """One reason per (action, message, preemptor): a reclaim gives thousands of victims one."""
        evictions = plan.evictions
        victims = np.fromiter((at for at, _ in self._evicted), dtype=np.int64, count=len(self._evicted))
        placed_again = placed_pods[victims].tolist()
        for (_, gone), again in zip(self._evicted, placed_again, strict=True):
            job_key, name, node, groups, cause, message, preemptor = gone
            key = (job_key, name)
            if not again:
                states[key] = self._releasing(index, key, node, groups)
            why = reasons.get((cause, message, preemptor))
            if why is None:
                why = reasons[(cause, message, preemptor)] = EvictionReason(
                    EvictionCause(cause), message, preemptor
                )
            evictions.append(new_eviction(job_key, name, node, why))
        for name, waiting in problem_reasons(snapshot.problems).items():
            plan.pending_reasons.setdefault(name, waiting)
        return plan

    def _releasing(
        self, index: TaskIndex, key: tuple[str, str], node: str, groups: tuple[str, ...]
    ) -> TaskState:
        """A victim's state: its GPUs are those it stood with on `node` (where the checks let a
        pod be evicted from, unless it was pending), shared with victims that stand alike."""
        standing = self.standing.tasks[key]
        if standing.node == node and standing.status in OCCUPYING:
            accepted = standing.accepted_gpus
        else:
            task = index.task(*key)
            assert task is not None, f"{key}: the checks let an eviction of an unknown pod through"
            table = self.snapshot.nodes
            accepted = task.accepted_gpus(float(table.gpu_memory[table.index[node]]))
        if type(accepted) is float and accepted != 0.0:
            return shared_state(self._alike, RELEASING, node, groups, accepted)
        return new_task_state(RELEASING, node, groups, accepted)
