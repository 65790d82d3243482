"""What the coordinator checks of the parts' answers before it uses them.

A part is another process: it can answer from the wrong state, about pods or nodes it was not
dealt, or not at all. The plan is made from the answers only when each names only its own jobs'
pods and its own nodes, no pod is placed twice, no job gets more pods placed than it has
pending, and together they place every pending pod (each job exactly as many as it has
pending); a cycle whose answers fail any of this is the local engine's, so a broken part can
slow a cycle down but never change its plan into one the design does not allow.
"""

from __future__ import annotations

import enum

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


def answers_outcome(layout: SplitLayout, answers: list[PartAnswer]) -> SplitOutcome:
    """UNTRUSTED, PENDING_LEFT or SPLIT (before the queue rules are applied), in one pass."""
    seen: set[tuple[str, str]] = set()
    placed: dict[str, int] = {}
    for index, answer in enumerate(answers):
        part = layout.deal.parts[index]
        if answer.part != index:
            return SplitOutcome.UNTRUSTED
        jobs = part.job_keys
        for pod in (*answer.binds, *answer.pipelined):
            key = (pod[0], pod[1])
            if pod[0] not in jobs or pod[2] not in part.node_names or key in seen:
                return SplitOutcome.UNTRUSTED
            seen.add(key)
            placed[pod[0]] = placed.get(pod[0], 0) + 1
    if any(placed.get(job, 0) > count for job, count in layout.pending.items()) or len(placed) > len(
        layout.pending
    ):
        return SplitOutcome.UNTRUSTED
    if layout.deal.kept or placed != {job: count for job, count in layout.pending.items() if count}:
        return SplitOutcome.PENDING_LEFT
    return SplitOutcome.SPLIT
