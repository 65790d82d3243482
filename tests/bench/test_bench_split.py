"""The runner splits each cycle by the sharded calls made during it, and compares executors."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from kai_ray.bench.runner import run_compare, run_shape
from kai_ray.distributed.executor import LocalExecutor
from kai_ray.distributed.kernels import NodeRanking, NodeRows, RankedRows, TaskShape
from kai_ray.distributed.ray_executor import BatchTiming

pytestmark = pytest.mark.unit


@dataclass
class RecordingExecutor(LocalExecutor):
    """Ranks in-process like the local executor but records a made-up timing per batch, as a
    sharded executor would: each shard's given seconds, merge 1 ms, 10 ms in all."""

    shard_times: list[float]
    calls: list[int] = field(default_factory=list)
    """Shared between executors: the shard count of each batch, in the order they came."""
    timings: list[BatchTiming] = field(default_factory=list)
    fallbacks: int = 0
    closed: bool = False

    def rank_shapes(
        self, nodes: NodeRows, ranking: NodeRanking, shapes: list[TaskShape], copies: list[int]
    ) -> list[RankedRows] | None:
        self.timings.append(BatchTiming(list(self.shard_times), merge_seconds=0.001, total_seconds=0.01))
        self.calls.append(len(self.shard_times))
        return None

    def close(self) -> None:
        self.closed = True


@dataclass
class Maker:
    """The factory `run_compare` is given: makes recording executors and keeps them."""

    shard_times: Callable[[int], list[float]] = lambda count: [0.001] * count
    refuse_above: int | None = None
    """A shard count above which making an executor fails, as a Ray that cannot start would."""
    made: list[RecordingExecutor] = field(default_factory=list)
    calls: list[int] = field(default_factory=list)

    def __call__(self, count: int) -> RecordingExecutor:
        if self.refuse_above is not None and count > self.refuse_above:
            raise RuntimeError("no room for another shard")
        self.made.append(RecordingExecutor(self.shard_times(count), self.calls))
        return self.made[-1]


def test_each_cycle_is_split_by_the_batches_it_made_not_by_earlier_ones() -> None:
    executor = RecordingExecutor([0.001, 0.002])
    result = run_shape("kai-full-cycle-4x10", repeat=3, executor=executor, shards=2)
    split = result.time_split
    assert split is not None
    per_cycle = len(executor.timings) // 3
    assert per_cycle >= 1
    assert len(executor.timings) == 3 * per_cycle
    assert split.batches == per_cycle
    assert split.shard_seconds == pytest.approx((0.001 * per_cycle, 0.002 * per_cycle))
    assert split.critical_shard_seconds == pytest.approx(0.002 * per_cycle)
    assert split.merge_seconds == pytest.approx(0.001 * per_cycle)
    assert split.transfer_seconds == pytest.approx(0.007 * per_cycle)
    assert split.waiting_seconds == pytest.approx(0.01 * per_cycle)
    assert split.cycle_seconds == result.median_cycle_seconds
    assert result.projection is not None
    assert set(result.projection.cycle_seconds) == {1, 2, 4, 8}
    # The shards' CPU is not this process's: no CPU split is claimed for a sharded executor.
    assert result.cpu_seconds is None and result.against_kai is None
    document = result.as_json()
    split_json = document["time_split"]
    assert isinstance(split_json, dict)
    assert split_json["shard_compute_s"] == pytest.approx(list(split.shard_seconds))
    assert document["projected_cycle_seconds"] == result.projection.as_json()
    assert document["ratio_to_local"] is None
    assert "projection" not in document


def test_compare_times_local_one_and_k_shards_in_turns_and_closes_each_executor() -> None:
    # Every shard pays 1 ms; 2 ms of work divides over the shards.
    maker = Maker(shard_times=lambda count: [0.001 + 0.002 / count] * count)
    made, calls = maker.made, maker.calls
    results = run_compare("kai-allocate-4x10", 2, maker, 2)
    assert [(r.executor, r.shards) for r in results] == [("local", 1), ("ray", 1), ("ray", 2)]
    assert [len(e.shard_times) for e in made] == [1, 2]
    assert all(e.closed for e in made)
    per_cycle = len(calls) // 4
    assert calls == ([1] * per_cycle + [2] * per_cycle) * 2
    local = results[0]
    assert local.ratio_to_local == 1.0
    for result in results[1:]:
        assert result.ratio_to_local == pytest.approx(
            result.median_cycle_seconds / local.median_cycle_seconds
        )
        assert result.pods_placed == local.pods_placed
    widest = results[2].projection
    assert widest is not None
    assert "1 and 2 shards" in widest.basis
    # The fixed cost per shard: the 2-shard run's 4 ms of shard work less the 1-shard run's 3 ms.
    batches = results[2].time_split.batches if results[2].time_split else 0
    assert batches >= 1
    assert widest.fixed_shard_seconds == pytest.approx(0.001 * batches)
    assert widest.divisible_shard_seconds == pytest.approx(0.002 * batches)
    assert results[1].projection is not None
    assert "one run with 1 shard" in results[1].projection.basis


def test_compare_with_one_shard_runs_it_once() -> None:
    maker = Maker()
    results = run_compare("kai-allocate-4x10", 1, maker, 1)
    assert [(r.executor, r.shards) for r in results] == [("local", 1), ("ray", 1)]
    assert len(maker.made) == 1
    assert results[1].projection is not None
    assert "one run with 1 shard" in results[1].projection.basis


def test_compare_refuses_churn_shapes_before_making_an_executor() -> None:
    maker = Maker()
    with pytest.raises(ValueError, match="churn shapes"):
        run_compare("churn-4x8", 1, maker, 2)
    assert not maker.made


def test_an_executor_that_fails_to_start_still_has_the_others_closed() -> None:
    maker = Maker(refuse_above=1)
    with pytest.raises(RuntimeError, match="no room"):
        run_compare("kai-allocate-4x10", 1, maker, 2)
    assert [e.closed for e in maker.made] == [True]
