"""What the coordinator checks of the parts' answers before it uses them.

A part is another process: it can answer from the wrong state, about pods or nodes it was not
dealt, or not at all. The plan is made from the answers only when each names only its own jobs'
pods and its own nodes, no pod is placed twice, and together they place every pending pod; a
cycle whose answers fail any of this is the local engine's, so a broken part can slow a cycle
down but never change its plan into one the design does not allow.
"""

from __future__ import annotations

import enum

from kai_ray.model.objects import TaskStatus
from kai_ray.model.snapshot import Snapshot
from kai_ray.split.part import PartAnswer
from kai_ray.split.replica import SplitLayout


class SplitOutcome(enum.StrEnum):
    """How a cycle given to split cycles was decided."""

    SPLIT = "split"
    """The parts placed every pending pod: the plan is theirs."""
    NOT_SPLIT = "not-split"
    """The snapshot did not qualify (too few pending pods, demand over free capacity, a stale
    gang, one part): the local engine's cycle from the start."""
    PENDING_LEFT = "pending-left"
    """A job was kept, refused, or left with a pending pod: the local engine's cycle."""
    UNTRUSTED = "untrusted"
    """An answer named another part's pods or nodes, or placed a pod twice: the local engine's cycle."""


def untrusted(layout: SplitLayout, answers: list[PartAnswer]) -> bool:
    seen: set[tuple[str, str]] = set()
    for index, answer in enumerate(answers):
        part = layout.deal.parts[index]
        if answer.part != index:
            return True
        jobs = {job.key for job in part.jobs}
        for pod in (*answer.binds, *answer.pipelined):
            key = (pod[0], pod[1])
            if pod[0] not in jobs or pod[2] not in part.node_names or key in seen:
                return True
            seen.add(key)
    return False


def every_pending_placed(snapshot: Snapshot, answers: list[PartAnswer]) -> bool:
    placed = {(pod[0], pod[1]) for answer in answers for pod in (*answer.binds, *answer.pipelined)}
    return all(
        (job.key, task.name) in placed
        for job in snapshot.jobs
        for task in job.tasks
        if task.status == TaskStatus.PENDING
    )
