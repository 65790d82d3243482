"""Which PodGroup annotations a cycle's plan sets or clears (`job_marks`), without a cluster."""

from __future__ import annotations

import pytest

from kai_ray.cluster.kube.job_marks import job_marks, newly_stale
from kai_ray.engine.plan import Eviction, Plan
from kai_ray.engine.reasons import EvictionCause, EvictionReason, StaleMark

pytestmark = pytest.mark.unit

NOW = 1_800_000_000.0  # 2027-01-15T08:00:00Z


def eviction(job: str, cause: EvictionCause) -> Eviction:
    return Eviction(job, f"{job}-0", "n1", EvictionReason(cause, "why"))


def test_each_clock_becomes_its_annotation_and_a_whole_gang_clears_its_mark() -> None:
    plan = Plan(
        evictions=[
            eviction("ns/victim", EvictionCause.RECLAIM),
            eviction("ns/stale", EvictionCause.STALE_GANG),
        ],
        started={"ns/new": NOW - 60},
        stale_marks={"ns/broken": StaleMark(NOW, 2, 3), "ns/whole": StaleMark(None, 3, 3)},
    )
    marks = job_marks(plan, {"ns/victim", "ns/stale"}, NOW)
    assert marks == {
        "ns/victim": {"kai.scheduler/last-eviction-timestamp": "2027-01-15T08:00:00Z"},
        "ns/new": {"kai.scheduler/last-start-timestamp": "2027-01-15T07:59:00Z"},
        "ns/broken": {"kai.scheduler/stale-podgroup-timestamp": "2027-01-15T08:00:00Z"},
        "ns/whole": {"kai.scheduler/stale-podgroup-timestamp": None},
    }  # a stale gang's own eviction leaves the preemption-delay window alone, as KAI's does
    assert newly_stale(plan) == {"ns/broken": "Job is stale. 2 pods are active, minMember is 3"}


def test_an_eviction_the_api_refused_marks_nothing() -> None:
    plan = Plan(evictions=[eviction("ns/victim", EvictionCause.PREEMPT)])
    assert job_marks(plan, set(), NOW) == {}
