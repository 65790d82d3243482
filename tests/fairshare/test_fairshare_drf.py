"""Allocatable share (§6.1) and dominant resource share (§5.2 rule 5, §6.3)."""

from __future__ import annotations

import pytest

from kai_ray.fairshare.drf import allocatable_share, dominant_share

pytestmark = pytest.mark.unit

UNLIMITED = -1.0
CLUSTER = {"cpu": 100_000.0, "memory": 1e12, "gpu": 16.0}


@pytest.mark.parametrize(
    ("deserved", "fair_share", "limit", "expected"),
    [
        (4, 7, UNLIMITED, 7),
        (4, 2, UNLIMITED, 4),
        (4, 7, 5, 5),
        (4, 2, 3, 3),
        (UNLIMITED, 7, 5, 5),
        (UNLIMITED, 7, UNLIMITED, UNLIMITED),
        (0, 0, 0, 0),
    ],
    ids=[
        "fair-share-above-quota",
        "quota-above-fair-share",
        "limit-caps",
        "limit-caps-quota",
        "unlimited-quota-uses-limit",
        "all-unlimited",
        "nothing",
    ],
)
def test_allocatable_share(deserved: float, fair_share: float, limit: float, expected: float) -> None:
    assert allocatable_share(deserved, fair_share, limit) == expected


def test_dominant_share_is_the_largest_ratio() -> None:
    allocated = {"cpu": 10_000, "memory": 1e9, "gpu": 3}
    allocatable = {"cpu": 40_000, "memory": 1e10, "gpu": 4}
    assert dominant_share(allocated, allocatable, CLUSTER) == pytest.approx(0.75)


def test_unlimited_allocatable_is_measured_against_the_cluster() -> None:
    allocated = {"cpu": 0, "memory": 0, "gpu": 8}
    allocatable = {"cpu": 1, "memory": 1, "gpu": UNLIMITED}
    assert dominant_share(allocated, allocatable, CLUSTER) == pytest.approx(0.5)


def test_usage_without_entitlement_gets_the_penalty_multiplier() -> None:
    allocated = {"cpu": 0, "memory": 0, "gpu": 2}
    allocatable = {"cpu": 1, "memory": 1, "gpu": 0}
    assert dominant_share(allocated, allocatable, CLUSTER) == pytest.approx(2_000)


def test_no_usage_and_no_entitlement_is_zero() -> None:
    assert dominant_share({}, {"cpu": 0, "memory": 0, "gpu": 0}, CLUSTER) == 0


def test_dominant_share_never_goes_negative() -> None:
    # Victim-queue mode subtracts victims' allocation, which can leave a negative remainder.
    allocated = {"cpu": -5, "memory": -1, "gpu": -2}
    allocatable = {"cpu": 10, "memory": 10, "gpu": 4}
    assert dominant_share(allocated, allocatable, CLUSTER) == 0


def test_only_fairness_resources_count() -> None:
    allocated = {"gpu": 1, "pods": 100}
    allocatable = {"cpu": 10, "memory": 10, "gpu": 4, "pods": 1}
    assert dominant_share(allocated, allocatable, CLUSTER) == pytest.approx(0.25)
