"""Single-level division: spec §23 worked examples number for number, plus the §6.2 properties."""

from __future__ import annotations

import dataclasses
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kai_ray.fairshare.division import QueueDemand, divide

pytestmark = pytest.mark.unit

UNLIMITED = -1.0


def queue(
    name: str,
    *,
    deserved: float = 0.0,
    weight: float = 1.0,
    request: float = 0.0,
    priority: int = 100,
    limit: float = UNLIMITED,
    created: float = 0.0,
    usage: float = 0.0,
) -> QueueDemand:
    return QueueDemand(
        name=name,
        deserved=deserved,
        limit=limit,
        over_quota_weight=weight,
        priority=priority,
        request=request,
        created=created,
        usage=usage,
    )


def test_example_1_floors_surplus_and_returns_the_unit_to_the_largest_remainder() -> None:
    shares = divide(
        10, [queue("A", deserved=3, weight=1, request=10), queue("B", deserved=2, weight=3, request=10)]
    )
    assert shares == pytest.approx({"A": 4, "B": 6})


def test_example_2_runs_a_second_round_after_a_queue_is_capped_by_its_request() -> None:
    shares = divide(
        10,
        [
            queue("A", weight=1, request=2),
            queue("B", weight=1, request=20),
            queue("C", weight=2, request=20),
        ],
    )
    assert shares == pytest.approx({"A": 2, "B": 2, "C": 6})


def test_example_3a_lower_bucket_only_gets_what_the_higher_bucket_leaves() -> None:
    shares = divide(
        10,
        [
            queue("A", priority=200, weight=1, request=6),
            queue("B", priority=100, weight=100, request=10),
            queue("C", priority=100, weight=1, request=10),
        ],
    )
    assert shares == pytest.approx({"A": 6, "B": 4, "C": 0})


def test_example_3b_reproduces_the_rounding_leak_into_the_lower_bucket() -> None:
    shares = divide(
        10,
        [
            queue("X1", priority=200, request=100),
            queue("X2", priority=200, request=100),
            queue("X3", priority=200, request=100),
            queue("Y", priority=100, request=100),
        ],
    )
    assert shares == pytest.approx({"X1": 3, "X2": 3, "X3": 3, "Y": 1})


@pytest.mark.parametrize(
    ("k_value", "usage_a", "usage_b", "expected"),
    [
        (1.0, 0.6, 0.1, {"A": 5, "B": 11}),
        (2.0, 0.6, 0.1, {"A": 3, "B": 13}),
        (1.0, 0.0, 0.0, {"A": 8, "B": 8}),
    ],
    ids=["k1", "k2", "no-usage"],
)
def test_example_7_history_shifts_surplus_away_from_heavy_past_users(
    k_value: float, usage_a: float, usage_b: float, expected: dict[str, float]
) -> None:
    queues = [queue("A", request=16, usage=usage_a), queue("B", request=16, usage=usage_b)]
    assert divide(16, queues, k_value=k_value) == pytest.approx(expected)


@pytest.mark.parametrize("k_value", [0.0, -3.0])
def test_non_positive_k_value_disables_history(k_value: float) -> None:
    queues = [queue("A", request=16, usage=0.6), queue("B", request=16, usage=0.1)]
    assert divide(16, queues, k_value=k_value) == pytest.approx({"A": 8, "B": 8})


def test_history_can_zero_a_weight_entirely() -> None:
    queues = [queue("A", request=16, usage=1.0), queue("B", request=16, usage=0.0)]
    assert divide(16, queues, k_value=1.0) == pytest.approx({"A": 0, "B": 16})


def test_zero_weight_keeps_its_quota_but_gets_no_surplus() -> None:
    shares = divide(10, [queue("A", deserved=2, weight=0, request=10), queue("B", weight=1, request=3)])
    assert shares == pytest.approx({"A": 2, "B": 3})


def test_zero_weight_gets_no_surplus_whatever_its_history() -> None:
    shares = divide(10, [queue("A", weight=0, request=10, usage=-0.5), queue("B", weight=1, request=3)])
    assert shares == pytest.approx({"A": 0, "B": 3})


def test_a_later_round_overwrites_the_earlier_remainder() -> None:
    # Round 1 (shares 1.2 / 0.6 / 1.2): A is satisfied with 1, B floors to 0 (remainder 0.6), C to 1
    # (remainder 0.2). Round 2 over {B, C} with 1 left: shares 1/3, 2/3, both floor to 0 and their
    # remainders become 0.33 / 0.67, so the last unit goes to C, not to B's stale 0.6.
    shares = divide(
        3,
        [
            queue("A", weight=2, request=1),
            queue("B", weight=1, request=2),
            queue("C", weight=2, request=2),
        ],
    )
    assert shares == pytest.approx({"A": 1, "B": 0, "C": 2})


def test_an_integral_share_keeps_the_earlier_remainder() -> None:
    # Round 1 (shares 0.4 / 0.8 / 0.8): A floors to 0 (remainder 0.4), B is satisfied with 0.5, C floors
    # to 0 (remainder 0.8). Round 2 over {A, C} with 1.5 left: A 0.5 -> 0 (remainder 0.5), C exactly
    # 1.0 -> 1 with nothing to record, so C keeps 0.8 and wins the last 0.5 over A (KAI records only
    # positive remainders; a zero would have overwritten C's entry and handed the 0.5 to A).
    shares = divide(
        2,
        [
            queue("A", weight=1, request=1),
            queue("B", weight=2, request=0.5),
            queue("C", weight=2, request=2),
        ],
    )
    assert shares == pytest.approx({"A": 0, "B": 0.5, "C": 1.5})


def test_a_queue_satisfied_in_a_later_round_loses_its_remainder() -> None:
    # Round 1 (shares 0.4 / 0.4 / 1.2): A and B floor to 0 with remainders 0.4, C is satisfied. Round 2
    # satisfies A and B exactly, so phase 3 has nobody to give the last 0.5 to: it stays undivided.
    shares = divide(
        2,
        [
            queue("A", weight=1, request=0.5),
            queue("B", weight=1, request=0.5),
            queue("C", weight=3, request=0.5),
        ],
    )
    assert shares == pytest.approx({"A": 0.5, "B": 0.5, "C": 0.5})


def test_limit_caps_the_share_and_frees_surplus_for_others() -> None:
    shares = divide(10, [queue("A", weight=1, request=10, limit=3), queue("B", weight=1, request=10)])
    assert shares == pytest.approx({"A": 3, "B": 7})


def test_limit_below_quota_caps_the_quota_grant() -> None:
    assert divide(10, [queue("A", deserved=5, weight=1, request=10, limit=2)]) == pytest.approx({"A": 2})


def test_zero_limit_means_nothing_allowed() -> None:
    shares = divide(10, [queue("A", deserved=5, weight=1, request=10, limit=0), queue("B", request=10)])
    assert shares == pytest.approx({"A": 0, "B": 10})


def test_over_committed_quotas_are_each_granted_in_full() -> None:
    shares = divide(
        10,
        [
            queue("A", deserved=8, weight=1, request=10, priority=50),
            queue("B", deserved=6, weight=1, request=10, priority=200),
        ],
    )
    assert shares == pytest.approx({"A": 8, "B": 6})


def test_unlimited_quota_grants_the_whole_request_up_to_the_total() -> None:
    assert divide(10, [queue("A", deserved=UNLIMITED, weight=0, request=7)]) == pytest.approx({"A": 7})
    assert divide(10, [queue("A", deserved=UNLIMITED, weight=0, request=30)]) == pytest.approx({"A": 10})


def test_unlimited_quotas_may_over_commit_the_total() -> None:
    shares = divide(
        10,
        [queue("A", deserved=UNLIMITED, request=4), queue("B", deserved=UNLIMITED, request=20)],
    )
    assert shares == pytest.approx({"A": 4, "B": 10})


def test_empty_sibling_set_divides_nothing() -> None:
    assert divide(10, []) == {}


def test_queue_without_request_gets_nothing_even_with_quota_and_weight() -> None:
    shares = divide(10, [queue("A", deserved=4, weight=5, request=0), queue("B", weight=1, request=10)])
    assert shares == pytest.approx({"A": 0, "B": 10})


def test_fractional_request_is_satisfied_exactly() -> None:
    shares = divide(4, [queue("A", weight=1, request=0.7), queue("B", weight=1, request=10)])
    assert shares == pytest.approx({"A": 0.7, "B": 3.3})


def test_phase_three_may_overshoot_a_request_by_less_than_one_unit() -> None:
    # Shares 1.5 / 1.5: A needs 1.7 so it is floored to 1 with remainder 0.5; the tie on remainders goes
    # to the older queue A, whose phase-3 unit lifts it to 2 > 1.7 (KAI does not re-check demand here).
    shares = divide(
        3,
        [queue("A", request=1.7, created=1.0), queue("B", request=20, created=2.0)],
    )
    assert shares == pytest.approx({"A": 2, "B": 1})


@pytest.mark.parametrize(
    ("created_a", "created_b", "winner"),
    [(1.0, 2.0, "A"), (2.0, 1.0, "B"), (1.0, 1.0, "A")],
    ids=["older-A", "older-B", "same-age-name"],
)
def test_equal_remainders_go_to_the_older_queue_then_the_smaller_name(
    created_a: float, created_b: float, winner: str
) -> None:
    shares = divide(
        1,
        [queue("B", request=5, created=created_b), queue("A", request=5, created=created_a)],
    )
    assert shares == pytest.approx({"A": 0, "B": 0} | {winner: 1})


def test_remainders_of_the_higher_bucket_are_served_first() -> None:
    # Bucket 200 has remainder 0.5 for H; bucket 100 then gets 0.5 of capacity and floors it to nothing
    # with remainder 0.5 for L: the single leftover unit's worth goes to H, though L is older.
    shares = divide(
        2.5,
        [
            queue("H", priority=200, request=100, created=5.0),
            queue("H2", priority=200, request=1, created=6.0),
            queue("L", priority=100, request=100, created=0.0),
        ],
    )
    assert shares == pytest.approx({"H": 1.5, "H2": 1, "L": 0})


def test_duplicate_names_are_rejected() -> None:
    with pytest.raises(ValueError, match="unique"):
        divide(10, [queue("A", request=1), queue("A", request=2)])


def test_shuffled_input_gives_bit_identical_shares() -> None:
    queues = [
        queue(
            f"q{i}", deserved=i % 3, weight=1 + i % 4, request=3 + 7 * (i % 5), priority=100 + 100 * (i % 2)
        )
        for i in range(12)
    ]
    expected = divide(37.0, queues, k_value=1.0)
    rng = random.Random(7)
    for _ in range(20):
        shuffled = list(queues)
        rng.shuffle(shuffled)
        result = divide(37.0, shuffled, k_value=1.0)
        assert result == expected
        assert list(result) == list(expected)


_demands = st.lists(
    st.builds(
        QueueDemand,
        name=st.just(""),
        deserved=st.one_of(st.just(UNLIMITED), st.integers(0, 8).map(float)),
        limit=st.one_of(st.just(UNLIMITED), st.integers(0, 12).map(float)),
        over_quota_weight=st.integers(0, 4).map(float),
        priority=st.sampled_from([50, 100, 200]),
        request=st.one_of(st.integers(0, 20).map(float), st.floats(0, 20)),
        created=st.integers(0, 3).map(float),
        usage=st.floats(0, 1),
    ),
    max_size=6,
).map(lambda qs: [dataclasses.replace(q, name=f"q{i}") for i, q in enumerate(qs)])


@settings(max_examples=300, deadline=None)
@given(total=st.integers(0, 40).map(float), queues=_demands, k_value=st.sampled_from([0.0, 1.0, 2.5]))
def test_division_invariants(total: float, queues: list[QueueDemand], k_value: float) -> None:
    shares = divide(total, queues, k_value=k_value)
    quota = {q.name: min(total if q.deserved == UNLIMITED else q.deserved, q.requestable) for q in queues}
    assert set(shares) == set(quota)
    for q in queues:
        assert shares[q.name] >= quota[q.name] - 1e-9, "quota comes first"
        assert shares[q.name] <= q.requestable + 1 + 1e-9, "phase 3 overshoots by at most one unit"
        if q.over_quota_weight == 0:
            assert shares[q.name] == pytest.approx(quota[q.name]), "no surplus without weight"
    if sum(quota.values()) <= total:
        assert sum(shares.values()) <= total + 1e-9, "surplus never exceeds what phase 1 left"
