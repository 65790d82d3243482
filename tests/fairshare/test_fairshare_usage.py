"""Time-based fair share: the usage window arithmetic and the division it feeds (spec §7, Example 7)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kai_ray.fairshare import QueueDemand, divide
from kai_ray.fairshare.usage import UsageHistory, UsageWindow

pytestmark = pytest.mark.unit

MINUTE = 60.0
HOUR = 3600.0
CAPACITY = (0.0, 0.0, 16.0)


def _queue(name: str, usage: float, created: float) -> QueueDemand:
    return QueueDemand(
        name=name,
        deserved=0,
        limit=-1,
        over_quota_weight=1,
        priority=100,
        request=16,
        created=created,
        usage=usage,
    )


@pytest.mark.parametrize(
    ("k_value", "usage_a", "usage_b", "expected"),
    [
        (1.0, 0.6, 0.1, {"A": 5.0, "B": 11.0}),
        (2.0, 0.6, 0.1, {"A": 3.0, "B": 13.0}),
        (1.0, 0.0, 0.0, {"A": 8.0, "B": 8.0}),
    ],
)
def test_example_7_division(
    k_value: float, usage_a: float, usage_b: float, expected: dict[str, float]
) -> None:
    queues = [_queue("A", usage_a, 0), _queue("B", usage_b, 1)]
    assert divide(16, queues, k_value) == pytest.approx(expected)


def test_a_constant_allocation_is_its_share_of_capacity() -> None:
    history = UsageHistory(UsageWindow(size=HOUR, resolution=MINUTE))
    for minute in range(30):
        history.record(minute * MINUTE, CAPACITY, {"a": (0, 0, 4), "b": (0, 0, 12)})
    usage = history.usage(30 * MINUTE)
    assert usage["a"]["gpu"] == pytest.approx(0.25)
    assert usage["b"]["gpu"] == pytest.approx(0.75)
    assert usage["a"]["cpu"] == 0.0
    assert history.run_count == 1


def test_sliding_window_forgets_what_left_it() -> None:
    history = UsageHistory(UsageWindow(size=10 * MINUTE, resolution=MINUTE))
    history.record(0.0, CAPACITY, {"a": (0, 0, 16)})
    history.record(5 * MINUTE, CAPACITY, {"a": (0, 0, 0)})
    # Steps 0-4 held 16, step 5 on holds 0: at 9 min, steps 0..9 count, 5 of 10 full.
    assert history.usage(9 * MINUTE)["a"]["gpu"] == pytest.approx(0.5)
    history.record(14 * MINUTE, CAPACITY, {"a": (0, 0, 0)})
    assert history.usage(14 * MINUTE)["a"]["gpu"] == 0.0
    assert history.oldest_step == 5
    assert history.run_count == 1


def test_half_life_weighs_recent_steps_more() -> None:
    window = UsageWindow(size=HOUR, resolution=MINUTE, half_life=10 * MINUTE)
    history = UsageHistory(window)
    history.record(0.0, CAPACITY, {"a": (0, 0, 16)})
    history.record(10 * MINUTE, CAPACITY, {"a": (0, 0, 0)})
    ratio = 0.5 ** (1 / 10)
    recent = sum(ratio**age for age in range(0, 1))  # step 10 only, now = 10 min
    old = sum(ratio**age for age in range(1, 11))  # steps 0-9, 10 to 1 minutes old
    assert history.usage(10 * MINUTE)["a"]["gpu"] == pytest.approx(old / (old + recent))
    # The same history without decay counts every step alike.
    flat = UsageHistory(UsageWindow(size=HOUR, resolution=MINUTE))
    flat.record(0.0, CAPACITY, {"a": (0, 0, 16)})
    flat.record(10 * MINUTE, CAPACITY, {"a": (0, 0, 0)})
    assert flat.usage(10 * MINUTE)["a"]["gpu"] == pytest.approx(10 / 11)


def test_the_latest_sample_holds_until_now() -> None:
    window = UsageWindow(size=7 * 24 * HOUR, resolution=MINUTE, half_life=MINUTE)
    history = UsageHistory(window)
    history.record(0.0, CAPACITY, {"a": (0, 0, 8)})
    assert history.usage(6 * 24 * HOUR)["a"]["gpu"] == pytest.approx(0.5)


def test_tumbling_window_restarts_at_each_boundary() -> None:
    window = UsageWindow(size=HOUR, resolution=MINUTE, tumbling_start=0.0)
    history = UsageHistory(window)
    history.record(0.0, CAPACITY, {"a": (0, 0, 16)})
    history.record(59 * MINUTE, CAPACITY, {"a": (0, 0, 16)})
    assert history.usage(59 * MINUTE)["a"]["gpu"] == pytest.approx(1.0)
    history.record(61 * MINUTE, CAPACITY, {"a": (0, 0, 0)})
    # The new window holds steps 60 (still 16, filled) and 61 (0).
    assert history.usage(61 * MINUTE)["a"]["gpu"] == pytest.approx(0.5)
    assert window.first_step(61 * MINUTE) == 60


def test_a_step_keeps_its_latest_sample_and_old_samples_are_refused() -> None:
    history = UsageHistory(UsageWindow(size=HOUR, resolution=MINUTE))
    history.record(0.0, CAPACITY, {"a": (0, 0, 16)})
    history.record(30.0, CAPACITY, {"a": (0, 0, 0)})
    assert history.usage(30.0)["a"]["gpu"] == 0.0
    history.record(10 * MINUTE, CAPACITY, {"a": (0, 0, 8)})
    assert not history.record(5 * MINUTE, CAPACITY, {"a": (0, 0, 16)})
    assert history.run_count == 2


def test_seeded_usage_is_the_stated_fraction_and_ages_with_the_clock() -> None:
    window = UsageWindow(size=HOUR, resolution=MINUTE)
    history = UsageHistory(window)
    history.seed(HOUR, CAPACITY, {"a": {"gpu": 0.6}})
    assert history.usage(HOUR)["a"]["gpu"] == pytest.approx(0.6)
    history.record(HOUR, CAPACITY, {"a": (0, 0, 0)})
    history.record(HOUR + 30 * MINUTE, CAPACITY, {"a": (0, 0, 0)})
    assert history.usage(HOUR + 30 * MINUTE)["a"]["gpu"] == pytest.approx(0.6 * 29 / 60)


def test_persisted_form_round_trips_and_refuses_another_resolution() -> None:
    history = UsageHistory(UsageWindow(size=HOUR, resolution=MINUTE, half_life=10 * MINUTE))
    history.record(0.0, CAPACITY, {"a": (1000, 2**30, 4)})
    history.record(7 * MINUTE, CAPACITY, {"a": (0, 0, 2), "b": (0, 0, 6)})
    copy = UsageHistory(history.window)
    copy.load(history.to_dict())
    assert copy.to_dict() == history.to_dict()
    assert copy.usage(9 * MINUTE) == history.usage(9 * MINUTE)
    with pytest.raises(ValueError, match="every 30"):
        UsageHistory(UsageWindow(size=HOUR, resolution=30.0)).load(history.to_dict())
    broken = history.to_dict()
    broken["runs"].reverse()
    with pytest.raises(ValueError, match="out of order"):
        copy.load(broken)


@settings(max_examples=200, deadline=None)
@given(
    steps=st.lists(
        st.tuples(st.integers(0, 90), st.sampled_from([0.0, 2.0, 4.0]), st.sampled_from([0.0, 8.0])),
        min_size=1,
        max_size=40,
    ),
    half_life=st.sampled_from([None, 5 * MINUTE]),
)
def test_the_cached_sums_give_what_a_fresh_history_computes(
    steps: list[tuple[int, float, float]], half_life: float | None
) -> None:
    """Queried after every record, as a scheduler does, the history agrees with a copy of itself
    that never computed anything (what a restarted scheduler loads)."""
    window = UsageWindow(size=30 * MINUTE, resolution=MINUTE, half_life=half_life)
    history = UsageHistory(window)
    now = 0.0
    for advance, gpus_a, gpus_b in steps:
        now += advance * 10.0
        history.record(now, CAPACITY, {"a": (0, 0, gpus_a), "b": (0, 0, gpus_b)})
        for at in (now, now + 15 * MINUTE):
            fresh = UsageHistory(window)
            fresh.load(history.to_dict())
            assert history.usage(at) == fresh.usage(at)
