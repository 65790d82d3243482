"""Properties of a full cycle over random small clusters (all five actions).

The cluster is first filled by the scheduler itself (allocate only, then the
bound pods start running), so the starting point is one KAI could reach;
then new jobs arrive and one full cycle runs.
"""

from __future__ import annotations

import numpy as np
import pytest
from builders import NO_LIMIT
from hypothesis import HealthCheck, given, settings
from random_clusters import (
    RACK,
    JobDraw,
    QueueDraw,
    full_cycle,
    plan_facts,
    running_cluster,
    scenarios,
    with_arrivals,
)

from kai_ray.engine.reasons import EvictionCause
from kai_ray.model.objects import ACTIVE_ALLOCATED
from kai_ray.model.resources import EPSILON

pytestmark = pytest.mark.unit


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios)
def test_a_full_cycle_keeps_kai_invariants(
    drawn: tuple[list[int], list[QueueDraw], list[JobDraw], list[JobDraw]],
) -> None:
    nodes, queues, first, later = drawn
    state = with_arrivals(running_cluster(nodes, queues, first), later)
    result = full_cycle(state)
    session, plan = result.session, result.plan
    book = session.queues

    limited = book.limit != NO_LIMIT
    assert np.all(~limited | (book.allocated <= book.limit + EPSILON)), "a queue ended above its limit"

    jobs = {job.key: job for job in session.jobs}
    for eviction in plan.evictions:
        if eviction.reason.cause in (EvictionCause.RECLAIM, EvictionCause.PREEMPT):
            assert jobs[eviction.job].spec.preemptible, (
                f"non-preemptible {eviction.job} evicted: {eviction.reason}"
            )

    bound_jobs = {bind.job for bind in plan.binds}
    for key in bound_jobs:
        for pod_set in jobs[key].pod_sets.values():
            active = pod_set.count(ACTIVE_ALLOCATED)
            assert active >= pod_set.min_available, f"{key} bound below its gang minimum"

    for job in session.jobs:
        constraint = job.root.topology
        if constraint is not None and constraint.required_level == RACK:
            racks = {
                session.nodes.table.specs[t.node].labels[RACK]
                for t in job.tasks
                if t.node is not None and t.status in ACTIVE_ALLOCATED
            }
            assert len(racks) <= 1, f"{job.key} must keep to one rack, holds pods in {sorted(racks)}"

    again = full_cycle(state)
    assert plan_facts(again.plan) == plan_facts(plan), "the same snapshot gave a different plan"
