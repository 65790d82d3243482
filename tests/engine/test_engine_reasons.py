"""Typed explanations: causes map to KAI's machine-readable reasons without reading any message."""

from __future__ import annotations

import pytest

from kai_ray.engine.reasons import GENERIC_KAI_REASON, PendingCause, main_cause

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("cause", "kai_reason"),
    [
        (PendingCause.OVER_LIMIT, "OverLimit"),
        (PendingCause.NON_PREEMPTIBLE_OVER_QUOTA, "NonPreemptibleOverQuota"),
        (PendingCause.PREEMPTION_DELAY, "PreemptionDelayNotElapsed"),
        (PendingCause.QUEUE_DOES_NOT_EXIST, "QueueDoesNotExist"),
        (PendingCause.NO_ROOM, GENERIC_KAI_REASON),
        (PendingCause.OVER_FAIR_SHARE, GENERIC_KAI_REASON),
        (PendingCause.NOT_REACHED, GENERIC_KAI_REASON),
        (PendingCause.EVICTION_BLOCKED, "EvictionBlocked"),
        (PendingCause.NO_TOPOLOGY_DOMAIN, "Not enough resources for the workload"),
        (PendingCause.TOPOLOGY_MISCONFIGURED, "TopologyMisconfigured"),
    ],
)
def test_causes_map_to_kai_explanation_reasons(cause: PendingCause, kai_reason: str) -> None:
    assert cause.kai_reason == kai_reason


def test_the_most_telling_cause_wins_over_generic_ones() -> None:
    causes = [PendingCause.NO_ROOM, PendingCause.OVER_FAIR_SHARE, PendingCause.OVER_LIMIT]
    assert main_cause(causes) == PendingCause.OVER_LIMIT
    assert main_cause([PendingCause.NO_ROOM, PendingCause.OVER_FAIR_SHARE]) == PendingCause.NO_ROOM
    assert main_cause([]) == PendingCause.NOT_REACHED
