"""Hierarchical driver: spec §23 Example 4 and the top-down, per-resource recursion of §6.2."""

from __future__ import annotations

import random
from collections.abc import Mapping

import pytest

from kai_ray.fairshare.tree import QueueNode, fair_shares

pytestmark = pytest.mark.unit

UNLIMITED = -1.0
NO_CAP = {"cpu": UNLIMITED, "memory": UNLIMITED, "gpu": UNLIMITED}


def node(
    name: str,
    parent: str | None = None,
    *,
    gpu_quota: float = 0.0,
    gpu_weight: float = 1.0,
    gpu_request: float = 0.0,
    priority: int = 100,
    created: float = 0.0,
    limit: Mapping[str, float] = NO_CAP,
    extra_request: Mapping[str, float] | None = None,
) -> QueueNode:
    return QueueNode(
        name=name,
        parent=parent,
        priority=priority,
        created=created,
        deserved={"cpu": UNLIMITED, "memory": UNLIMITED, "gpu": gpu_quota},
        limit=limit,
        over_quota_weight={"cpu": 1.0, "memory": 1.0, "gpu": gpu_weight},
        request={"gpu": gpu_request, **(extra_request or {})},
    )


def example_4() -> list[QueueNode]:
    return [
        node("D1", gpu_quota=6, created=1),
        node("D2", gpu_quota=2, created=2),
        node("P1", "D1", gpu_quota=4, gpu_request=5, created=3),
        node("P2", "D1", gpu_quota=0, gpu_request=5, created=4),
        node("P3", "D2", gpu_quota=2, gpu_request=6, created=5),
    ]


def gpu(shares: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    return {name: per_resource["gpu"] for name, per_resource in shares.items()}


def test_example_4_departments_then_projects() -> None:
    shares = fair_shares(example_4(), {"cpu": 64_000, "memory": 256e9, "gpu": 10})
    assert gpu(shares) == pytest.approx({"D1": 7, "D2": 3, "P1": 5, "P2": 2, "P3": 3})


def test_inner_queue_request_is_the_sum_of_its_leaves() -> None:
    # D1's leaves ask for 1 + 2 GPUs: with plenty of surplus the department still gets only 3.
    queues = [
        node("D1", created=1),
        node("D2", created=2),
        node("P1", "D1", gpu_request=1),
        node("P2", "D1", gpu_request=2),
        node("P3", "D2", gpu_request=50),
    ]
    assert gpu(fair_shares(queues, {"gpu": 20})) == pytest.approx(
        {"D1": 3, "D2": 17, "P1": 1, "P2": 2, "P3": 17}
    )


def test_children_divide_the_parent_share_not_the_cluster() -> None:
    queues = [node("D", limit={"gpu": 4}), node("P", "D", gpu_quota=UNLIMITED, gpu_request=10)]
    assert gpu(fair_shares(queues, {"gpu": 10})) == pytest.approx({"D": 4, "P": 4})


def test_each_resource_is_divided_independently() -> None:
    queues = [
        node("A", gpu_request=8, extra_request={"cpu": 1_000}, created=1),
        node("B", gpu_request=1, extra_request={"cpu": 9_000}, created=2),
    ]
    shares = fair_shares(queues, {"cpu": 10_000, "memory": 0, "gpu": 10})
    assert shares["A"] == pytest.approx({"cpu": 1_000, "memory": 0, "gpu": 8})
    assert shares["B"] == pytest.approx({"cpu": 9_000, "memory": 0, "gpu": 1})


def test_missing_settings_take_the_crd_defaults() -> None:
    # No limit keys means a limit of 0 (nothing allowed); missing totals are 0.
    bare = QueueNode(
        name="A",
        parent=None,
        priority=100,
        created=0,
        deserved={"gpu": 5},
        limit={},
        over_quota_weight={"gpu": 1},
        request={"gpu": 5, "cpu": 100},
    )
    assert fair_shares([bare], {"gpu": 10, "cpu": 1_000}) == {"A": {"cpu": 0, "memory": 0, "gpu": 0}}


def test_empty_parent_string_means_top_level() -> None:
    queues = [node("A", "", gpu_request=4)]
    assert gpu(fair_shares(queues, {"gpu": 10})) == pytest.approx({"A": 4})


def test_no_queues_gives_no_shares() -> None:
    assert fair_shares([], {"gpu": 10}) == {}


def test_usage_is_per_queue_and_feeds_the_surplus_split() -> None:
    queues = [
        QueueNode("A", None, 100, 0, {"gpu": 0}, NO_CAP, {"gpu": 1}, {"gpu": 16}, usage={"gpu": 0.6}),
        QueueNode("B", None, 100, 1, {"gpu": 0}, NO_CAP, {"gpu": 1}, {"gpu": 16}, usage={"gpu": 0.1}),
    ]
    assert gpu(fair_shares(queues, {"gpu": 16}, k_value=2.0)) == pytest.approx({"A": 3, "B": 13})


def test_shuffled_input_gives_identical_shares() -> None:
    queues = [
        *example_4(),
        node("P4", "D1", gpu_request=3, created=3),
        node("P5", "D2", gpu_request=1, created=5),
    ]
    expected = fair_shares(queues, {"cpu": 7_000, "memory": 1e9, "gpu": 13})
    rng = random.Random(11)
    for _ in range(20):
        shuffled = list(queues)
        rng.shuffle(shuffled)
        assert fair_shares(shuffled, {"cpu": 7_000, "memory": 1e9, "gpu": 13}) == expected


@pytest.mark.parametrize(
    ("queues", "message"),
    [
        ([node("A"), node("A")], "unique"),
        ([node("A", "ghost")], "unknown parent"),
        ([node("A", "B"), node("B", "A"), node("C")], "cycle"),
    ],
    ids=["duplicate", "orphan", "cycle"],
)
def test_malformed_hierarchies_are_rejected(queues: list[QueueNode], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        fair_shares(queues, {"gpu": 10})
