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
from array import array

import numpy as np

from kai_ray.model.objects import ACTIVE_ALLOCATED, JobSpec, TaskSpec, TaskStatus
from kai_ray.split.part import PartAnswer, PlacedPods
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


def moved_pods(answers: list[PartAnswer], jobs: list[JobSpec]) -> set[tuple[str, str]]:
    """Victims the parts evicted and placed again elsewhere (pipelined): not pending pods. `jobs`
    are the snapshot's, which the answers name pods by position in."""
    evicted = {(pod[0], pod[1]) for answer in answers for pod in answer.evictions}
    if not evicted:
        return set()
    moved = set()
    for answer in answers:
        placed = answer.placed
        for position, index in zip(placed.jobs[placed.bound :], placed.tasks[placed.bound :], strict=True):
            job = jobs[position]
            key = (job.key, job.tasks[index].name)
            if key in evicted:
                moved.add(key)
    return moved


class AnswerChecks:
    """The checks, taken one answer at a time as the answers come in, so that only the last one's
    share is left once every part has answered. Every check is of sets and sums, so the order the
    answers come in changes nothing; the fair shares are compared in part order at the end."""

    def __init__(self, layout: SplitLayout, tasks: TaskIndex, order: dict[tuple[str, str], int]) -> None:
        """`order`: each pod's position by (job key, name)."""
        self.layout = layout
        self.tasks = tasks
        self.order = order
        self.answers: dict[int, PartAnswer] = {}
        self.pods: dict[int, np.ndarray] = {}
        """Per part answered, the positions of the pods it placed (as `PlacedPods` lists them)."""
        self.seen = np.zeros(int(layout.positions.offsets[-1]), dtype=bool)
        """Per pod, whether an answer placed it (pending pods and re-placed victims)."""
        self._evicted: set[tuple[str, str]] = set()
        self._placed = np.zeros(len(layout.positions.pending), dtype=np.int64)
        """Pods placed per job, re-placed victims included until `outcome` takes them out."""
        self.trusted = True
        """False once an answer named what its part was not dealt: later answers go unchecked."""

    def take(self, answer: PartAnswer) -> bool:
        """Check `answer`; whether every answer so far is trusted."""
        if self.trusted:
            self.trusted = self._trusted(answer)
        return self.trusted

    def outcome(self, moved: set[tuple[str, str]]) -> SplitOutcome:
        """UNTRUSTED, PENDING_LEFT or SPLIT (before the queue rules are applied) once every part
        answered; `moved` are the answers' `moved_pods`."""
        parts = self.layout.deal.parts
        if not self.trusted or sorted(self.answers) != list(range(len(parts))):
            return SplitOutcome.UNTRUSTED
        first = self.answers[0].fair_shares
        if not all(_same_shares(first, self.answers[index].fair_shares) for index in range(len(parts))):
            return SplitOutcome.UNTRUSTED
        positions, placed = self.layout.positions, self._placed
        for key in moved:
            placed[positions.job_of(self.order[key])] -= 1
        if (placed > positions.pending).any():
            return SplitOutcome.UNTRUSTED
        if self.layout.deal.kept or (placed != positions.pending).any():
            return SplitOutcome.PENDING_LEFT
        return SplitOutcome.SPLIT

    def _trusted(self, answer: PartAnswer) -> bool:
        """Whether `answer` names only what its part was dealt, placing and evicting no pod an
        earlier answer did, counting its placements per job on the way."""
        parts = self.layout.deal.parts
        if not 0 <= answer.part < len(parts) or answer.part in self.answers:
            return False
        self.answers[answer.part] = answer
        if not self._placements_trusted(answer.part, answer.placed):
            return False
        jobs = parts[answer.part].job_keys
        evicted = self._evicted
        for victim in answer.evictions:
            key = (victim[0], victim[1])
            task = self.tasks.task(*key)
            if victim[0] not in jobs or key in evicted or task is None:
                return False
            ran = task.status in ACTIVE_ALLOCATED and task.node == victim[2]
            if not ran and task.status != TaskStatus.PENDING:
                return False
            evicted.add(key)
        return True

    def _placements_trusted(self, part: int, placed: PlacedPods) -> bool:
        """Whether `part` placed only pods it was dealt (of a divided job, its share), on its own
        rows, none placed before; counting them per job on the way."""
        count = len(placed)
        columns = (placed.jobs, placed.tasks, placed.rows)
        if not all(isinstance(column, array) and column.typecode == "q" for column in columns):
            return False
        if any(len(column) != count for column in (*columns, placed.groups, placed.gpus, placed.actions)):
            return False
        if not isinstance(placed.bound, int) or not 0 <= placed.bound <= count:
            return False
        if not count:
            self.pods[part] = np.zeros(0, dtype=np.int64)
            return True
        jobs, tasks, rows = (np.frombuffer(column, dtype=np.int64) for column in columns)
        positions = self.layout.positions
        offsets, owners, row_owners = positions.offsets, positions.owners, positions.row_owners
        if jobs.min() < 0 or jobs.max() >= len(offsets) - 1:
            return False
        if rows.min() < 0 or rows.max() >= len(row_owners):
            return False
        if tasks.min() < 0 or (tasks >= offsets[jobs + 1] - offsets[jobs]).any():
            return False
        pods = positions.pods(jobs, tasks)
        if (owners[pods] != part).any() or (row_owners[rows] != part).any():
            return False
        seen = self.seen
        before = np.count_nonzero(seen)
        seen[pods] = True
        if np.count_nonzero(seen) - before != count:
            return False
        self._placed += np.bincount(jobs, minlength=len(self._placed))
        self.pods[part] = pods
        return True


def _same_shares(first: tuple[float, ...], other: tuple[float, ...]) -> bool:
    """Equal but for the order the parts' sessions added the same sums in."""
    return len(first) == len(other) and all(
        math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9) for a, b in zip(first, other, strict=True)
    )
