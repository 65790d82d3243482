"""What the coordinator checks of the parts' answers before it uses them.

A part is another process: it can answer from the wrong state, about pods or nodes it was not
dealt, or not at all. The plan is made from the answers only when each names only its own jobs'
pods (of a divided job, only its share) and its own nodes, evicts only its own jobs' pods from
where they ran (or that it placed itself), no pod is placed or evicted twice, no job gets more
pods placed than it has pending, the parts divided the same fair shares, and together they
place every pending pod (each job exactly as many as it has pending); a cycle whose answers
fail any of this is the local engine's, so a broken part can slow a cycle down but never change
its plan into one the design does not allow.
"""

from __future__ import annotations

import enum
import math

from kai_ray.model.objects import ACTIVE_ALLOCATED, JobSpec, TaskSpec, TaskStatus
from kai_ray.split.part import PartAnswer
from kai_ray.split.replica import SplitLayout


class SplitOutcome(enum.StrEnum):
    """How a cycle given to split cycles was decided."""

    SPLIT = "split"
    """The parts placed every pending pod: the plan is theirs."""
    NOT_SPLIT = "not-split"
    """The snapshot did not qualify (too few pods, nothing pending, a stale gang, one part): the
    local engine's cycle from the start."""
    PENDING_LEFT = "pending-left"
    """A job was kept or left with a pending pod: the local engine's cycle."""
    REFUSED = "refused"
    """The parts' placements and evictions together break a queue rule (a limit, a quota, a
    reclaim rule) or take more GPUs from running pods than placing every pending pod needs: the
    local engine's cycle."""
    UNTRUSTED = "untrusted"
    """An answer named another part's pods or nodes, placed or evicted a pod twice, or divided
    other fair shares: the local engine's cycle."""


class TaskIndex:
    """The snapshot's pods by job key and name, built per job on first ask."""

    def __init__(self, jobs: dict[str, JobSpec]) -> None:
        self.jobs = jobs
        self._tasks: dict[str, dict[str, TaskSpec]] = {}

    def task(self, job_key: str, name: str) -> TaskSpec | None:
        found = self._tasks.get(job_key)
        if found is None:
            job = self.jobs.get(job_key)
            found = {} if job is None else {task.name: task for task in job.tasks}
            self._tasks[job_key] = found
        return found.get(name)


def moved_pods(answers: list[PartAnswer]) -> set[tuple[str, str]]:
    """Victims the parts evicted and placed again elsewhere (pipelined): not pending pods."""
    evicted = {(pod[0], pod[1]) for answer in answers for pod in answer.evictions}
    if not evicted:
        return set()
    return {(pod[0], pod[1]) for answer in answers for pod in answer.pipelined if (pod[0], pod[1]) in evicted}


def answers_outcome(
    layout: SplitLayout, answers: list[PartAnswer], tasks: TaskIndex, moved: set[tuple[str, str]]
) -> SplitOutcome:
    """UNTRUSTED, PENDING_LEFT or SPLIT (before the queue rules are applied); `moved` are the
    answers' `moved_pods`."""
    placed = _trusted_placements(layout, answers, tasks, moved)
    if placed is None:
        return SplitOutcome.UNTRUSTED
    if any(placed.get(job, 0) > count for job, count in layout.pending.items()) or len(placed) > len(
        layout.pending
    ):
        return SplitOutcome.UNTRUSTED
    if layout.deal.kept or placed != {job: count for job, count in layout.pending.items() if count}:
        return SplitOutcome.PENDING_LEFT
    return SplitOutcome.SPLIT


def _trusted_placements(
    layout: SplitLayout, answers: list[PartAnswer], tasks: TaskIndex, moved: set[tuple[str, str]]
) -> dict[str, int] | None:
    """Pending pods placed per job (re-placed victims left out), in the same pass that checks
    every answer names only what its part was dealt; None when one does not."""
    seen: set[tuple[str, str]] = set()
    evicted: set[tuple[str, str]] = set()
    placed: dict[str, int] = {}
    for index, answer in enumerate(answers):
        part = layout.deal.parts[index]
        if answer.part != index or not _same_shares(answers[0].fair_shares, answer.fair_shares):
            return None
        jobs, shares, nodes = part.job_keys, part.shares, part.node_names
        for pod in (*answer.binds, *answer.pipelined):
            job, name = pod[0], pod[1]
            key = (job, name)
            if job not in jobs or pod[2] not in nodes or key in seen:
                return None
            if shares and name not in shares.get(job, (name,)):
                return None
            seen.add(key)
            if not moved or key not in moved:
                placed[job] = placed.get(job, 0) + 1
        for victim in answer.evictions:
            key = (victim[0], victim[1])
            task = tasks.task(*key)
            if victim[0] not in jobs or key in evicted or task is None:
                return None
            ran = task.status in ACTIVE_ALLOCATED and task.node == victim[2]
            if not ran and task.status != TaskStatus.PENDING:
                return None
            evicted.add(key)
    return placed


def _same_shares(first: tuple[float, ...], other: tuple[float, ...]) -> bool:
    """Equal but for the order the parts' sessions added the same sums in."""
    return len(first) == len(other) and all(
        math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9) for a, b in zip(first, other, strict=True)
    )
