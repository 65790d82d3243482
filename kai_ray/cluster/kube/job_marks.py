"""What the engine keeps with a job from one cycle to the next, written on its PodGroup.

Every cycle opens a fresh session from the cache, so a clock the engine starts in one
cycle (when a gang fell below its minimum, when it was started, when it was last a victim)
lasts only if it is written where the next cycle reads it: KAI's PodGroup annotations
(spec/kubernetes-api.md §3.7), which `convert.podgroups` reads back.  Kept there, each
clock also survives a restart and a change of leader, as KAI's do.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Collection, Mapping

from kai_ray.api.constants import (
    LAST_EVICTION_TIMESTAMP_ANNOTATION,
    LAST_START_TIMESTAMP_ANNOTATION,
    STALE_PODGROUP_TIMESTAMP_ANNOTATION,
)
from kai_ray.cluster.kube.calls import rfc3339
from kai_ray.engine.plan import Plan
from kai_ray.engine.reasons import EvictionCause

__all__ = ["JobMarks", "job_marks", "newly_stale"]

JobMarks = dict[str, str | None]
"""Annotation → value for one PodGroup's merge patch; None removes the annotation."""


def job_marks(plan: Plan, evicted: Collection[str], now: float) -> dict[str, JobMarks]:
    """Job key → the annotations this cycle sets or clears on its PodGroup.

    `evicted`: the jobs a pod of which was evicted this cycle.  A stale gang's own eviction
    does not restart the preemption-delay window (KAI's stale evictions leave
    `last-eviction-timestamp` alone, spec/scheduling.md §8.6), so only victims of other
    actions are marked.
    """
    marks: dict[str, JobMarks] = {}
    victims = {e.job for e in plan.evictions if e.reason.cause is not EvictionCause.STALE_GANG}
    for job in sorted(victims & set(evicted)):
        marks.setdefault(job, {})[LAST_EVICTION_TIMESTAMP_ANNOTATION] = _timestamp(now)
    for job, started in plan.started.items():
        marks.setdefault(job, {})[LAST_START_TIMESTAMP_ANNOTATION] = _timestamp(started)
    for job, mark in plan.stale_marks.items():
        since = None if mark.since is None else _timestamp(mark.since)
        marks.setdefault(job, {})[STALE_PODGROUP_TIMESTAMP_ANNOTATION] = since
    return marks


def newly_stale(plan: Plan) -> Mapping[str, str]:
    """Job key → KAI's `StaleJob` words, for the jobs that fell below their minimum this cycle."""
    return {job: mark.describe() for job, mark in plan.stale_marks.items() if mark.since is not None}


def _timestamp(epoch: float) -> str:
    return rfc3339(_dt.datetime.fromtimestamp(epoch, _dt.UTC))
