"""The cycle split and the K-worker projection, on hand-made timings with known answers.

The timings are the Ray executor's own `BatchTiming` (constructing one starts nothing), so a
field it gains or a change to its transfer rule is seen here."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kai_ray.bench.projection import CycleSplit, median_split, project, split_cycle
from kai_ray.distributed.ray_executor import BatchTiming

pytestmark = pytest.mark.unit


def test_a_cycle_splits_into_shards_merge_transfer_and_the_drivers_own_time() -> None:
    timings = [
        BatchTiming(shard_seconds=[0.25, 0.5], merge_seconds=0.125, total_seconds=1.0),
        BatchTiming(shard_seconds=[0.5, 0.25], merge_seconds=0.0, total_seconds=0.75),
    ]
    split = split_cycle(4.0, timings)
    assert split.batches == 2
    assert split.shard_seconds == (0.75, 0.75)
    assert split.critical_shard_seconds == 1.0
    assert split.merge_seconds == 0.125
    assert split.transfer_seconds == pytest.approx(0.375 + 0.25)
    assert split.waiting_seconds == 1.75
    assert split.driver_serial_seconds == pytest.approx(4.0 - 1.75)


def test_time_inside_a_call_that_no_shard_merge_or_transfer_explains_counts_as_the_drivers() -> None:
    # A batch whose total includes work the driver did itself (a failed shard's rows ranked
    # in-process): the timing's own transfer leaves it out, so it stays serial.
    split = split_cycle(2.0, [BatchTiming(shard_seconds=[0.25], total_seconds=1.0, local_seconds=0.5)])
    assert split.transfer_seconds == 0.25
    assert split.driver_serial_seconds == pytest.approx(2.0 - 0.25 - 0.25)


def test_a_cycle_without_sharded_calls_is_all_driver() -> None:
    split = split_cycle(3.0, [])
    assert (split.batches, split.shard_seconds, split.waiting_seconds) == (0, (), 0.0)
    assert split.driver_serial_seconds == 3.0


def test_the_median_split_takes_each_field_and_each_shard_separately() -> None:
    splits = [
        CycleSplit(cycle_seconds=1.0, batches=2, shard_seconds=(0.1, 0.9), transfer_seconds=0.3),
        CycleSplit(cycle_seconds=5.0, batches=3, shard_seconds=(0.2, 0.1), transfer_seconds=0.1),
        CycleSplit(cycle_seconds=2.0, batches=3, shard_seconds=(0.3,), transfer_seconds=0.2),
    ]
    median = median_split(splits)
    assert median.cycle_seconds == 2.0
    assert median.batches == 3
    assert median.shard_seconds == (0.2, 0.1)
    assert median.transfer_seconds == 0.2
    with pytest.raises(ValueError, match="no cycles"):
        median_split([])


def test_nothing_sharded_projects_the_measured_cycle_for_every_k() -> None:
    projection = project({1: CycleSplit(cycle_seconds=18.0)})
    assert projection.cycle_seconds == {1: 18.0, 2: 18.0, 4: 18.0, 8: 18.0}
    assert "nothing was sharded" in projection.basis
    assert projection.as_json() == {"1": 18.0, "2": 18.0, "4": 18.0, "8": 18.0}


# Two runs of the same shape. One shard: 1.25 s of shard work, 0.25 s transfer. Two shards:
# 0.75 + 1.0 s (so each shard pays a fixed 0.5 s per cycle and 0.75 s divides), 0.5 s
# transfer (so 0.25 s per shard and nothing fixed), merge 0.125 s, 4 s of the driver's own.
ONE = CycleSplit(
    cycle_seconds=5.5,
    batches=3,
    shard_seconds=(1.25,),
    critical_shard_seconds=1.25,
    transfer_seconds=0.25,
    waiting_seconds=1.5,
)
TWO = CycleSplit(
    cycle_seconds=5.625,
    batches=3,
    shard_seconds=(0.75, 1.0),
    critical_shard_seconds=1.0,
    merge_seconds=0.125,
    transfer_seconds=0.5,
    waiting_seconds=1.625,
)


def test_two_shard_counts_separate_fixed_from_divisible_work_and_fit_the_transfer() -> None:
    projection = project({1: ONE, 2: TWO})
    assert projection.serial_seconds == 4.0
    assert projection.fixed_shard_seconds == 0.5
    assert projection.divisible_shard_seconds == 0.75
    # The slowest shard did 0.5 s of divisible work where the mean was 0.375 s.
    assert projection.imbalance == pytest.approx(0.5 / 0.375)
    assert projection.transfer_fixed_seconds == 0.0
    assert projection.transfer_per_shard_seconds == 0.25
    assert projection.merge_per_shard_seconds == 0.0625
    expected = {k: 4.0 + 0.5 + (0.5 * 2 / k if k > 1 else 0.75) + 0.0625 * k + 0.25 * k for k in (1, 2, 4, 8)}
    assert projection.cycle_seconds == pytest.approx(expected)
    assert "1 and 2 shards" in projection.basis


def test_the_projection_passes_through_the_measured_cycle_at_the_measured_shard_count() -> None:
    projection = project({1: ONE, 2: TWO}, workers=(2,))
    assert projection.cycle_seconds[2] == pytest.approx(TWO.cycle_seconds)


def test_with_one_run_the_fixed_cost_is_taken_as_zero_and_transfer_as_per_shard() -> None:
    projection = project({2: TWO})
    assert projection.fixed_shard_seconds == 0.0
    assert projection.divisible_shard_seconds == 1.75
    assert projection.transfer_fixed_seconds == 0.0
    assert projection.transfer_per_shard_seconds == 0.25
    assert projection.cycle_seconds[2] == pytest.approx(TWO.cycle_seconds)
    assert projection.cycle_seconds[8] == pytest.approx(4.0 + 1.0 * 2 / 8 + 0.0625 * 8 + 0.25 * 8)
    assert "fixed shard cost unknown" in projection.basis


def test_noisy_runs_never_give_a_negative_fixed_cost_or_a_shrinking_transfer() -> None:
    # More work with one shard than two in total, and more transfer with one shard: noise
    # that must not make later shards free or transfer fall below what was measured.
    one = CycleSplit(cycle_seconds=6.0, batches=3, shard_seconds=(2.0,), transfer_seconds=0.75)
    projection = project({1: one, 2: TWO})
    assert projection.fixed_shard_seconds == 0.0
    assert projection.transfer_per_shard_seconds == 0.0
    assert projection.transfer_fixed_seconds == 0.5
    eight = projection.cycle_seconds[8]
    assert eight == pytest.approx(4.0 + 1.75 * projection.imbalance / 8 + 0.0625 * 8 + 0.5)


def test_a_transfer_steeper_than_through_the_origin_is_taken_through_it() -> None:
    one = CycleSplit(cycle_seconds=5.3, batches=3, shard_seconds=(1.25,), transfer_seconds=0.05)
    projection = project({1: one, 2: TWO})
    assert projection.transfer_fixed_seconds == 0.0
    assert projection.transfer_per_shard_seconds == 0.25
    assert projection.cycle_seconds[2] == pytest.approx(TWO.cycle_seconds)


seconds = st.floats(min_value=0.0, max_value=10.0, allow_nan=False)


@st.composite
def splits(draw: st.DrawFn, shards: int) -> CycleSplit:
    """A split a real cycle could give: the per-batch slowest shards sum to at least any one
    shard's total and at most all shards' work."""
    per_shard = tuple(draw(st.lists(seconds, min_size=shards, max_size=shards)))
    critical = max(per_shard) + draw(st.floats(0.0, 1.0)) * (sum(per_shard) - max(per_shard))
    merge, transfer, serial = draw(seconds), draw(seconds), draw(seconds)
    return CycleSplit(
        cycle_seconds=serial + critical + merge + transfer,
        batches=draw(st.integers(min_value=1, max_value=5)),
        shard_seconds=per_shard,
        critical_shard_seconds=critical,
        merge_seconds=merge,
        transfer_seconds=transfer,
    )


@given(st.integers(min_value=2, max_value=8).flatmap(lambda s: st.tuples(splits(1), splits(s))))
def test_at_the_measured_shard_count_the_projection_is_the_measured_cycle(
    pair: tuple[CycleSplit, CycleSplit],
) -> None:
    one, ref = pair
    shards = len(ref.shard_seconds)
    projection = project({1: one, shards: ref}, workers=(1, shards, 64))
    assert projection.cycle_seconds[shards] == pytest.approx(ref.cycle_seconds, abs=1e-9)
    assert min(projection.cycle_seconds.values()) >= ref.driver_serial_seconds - 1e-9
    assert min(projection.fixed_shard_seconds, projection.transfer_fixed_seconds) >= 0.0
    assert projection.transfer_per_shard_seconds >= 0.0


def test_more_workers_never_remove_the_drivers_serial_time() -> None:
    projection = project({1: ONE, 2: TWO}, workers=(1, 2, 4, 8, 64, 1024))
    assert min(projection.cycle_seconds.values()) > TWO.driver_serial_seconds


def test_a_cycle_whose_shards_all_failed_projects_its_driver_time() -> None:
    # Every shard call failed (the lead's executor then records no shard seconds) and the
    # driver ranked the rows itself: nothing divides, the cycle stays what it was.
    failed = CycleSplit(cycle_seconds=3.0, batches=1, waiting_seconds=1.0)
    projection = project({1: ONE, 2: failed})
    assert projection.fixed_shard_seconds == 0.0
    assert projection.cycle_seconds == {k: 3.0 for k in (1, 2, 4, 8)}


def test_no_measurement_is_refused() -> None:
    with pytest.raises(ValueError, match="no measured cycle"):
        project({})
