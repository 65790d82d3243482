"""Where a sharded cycle's time goes, and what the cycle would take with K workers.

A cycle is the driver's own serial work plus the calls it waits on. Each sharded call (a batch)
is the shards' compute (the batch waits for its slowest shard), the coordinator's merge, and
the transfer (the rest of the wait: sending deltas and shapes, answers back, Ray's dispatch).

The projection keeps everything the driver does alone and rescales only the sharded part:

    projected(K) = serial + C + D·S/K + merge·K/S + a + b·K      (K > 1; K = 1: C + V for C + D·S/K)

measured on a run with S shards, where

- `serial` is the cycle minus the slowest shards, the merge and the transfer of its sharded
  calls (without faults: minus the time spent waiting in them);
- `C` is the fixed cost every shard pays per cycle whatever its share of the rows (applying its
  delta, one pass per pod shape), and `V = Σ shards − S·C` the work that divides over shards;
  with a 1-shard run too, `C = (Σ shards at S − shard at 1) / (S − 1)` (kept between 0 and the
  least busy shard's total), otherwise it is unknown and taken as 0 (all work divisible, the
  optimistic side);
- `D` is the divisible work on the critical path at S (per batch the slowest shard, less C),
  never below the even share `V/S`; `D·S/K` spreads it over K workers with the imbalance
  measured at S (`ι = D·S/V`) kept at every K > 1; one worker has no imbalance and does `V`;
- the merge handles K answers per shape, so it grows in proportion to K;
- transfer is `a + b·K`, the line through the 1-shard and S-shard runs, with neither `a` nor
  `b` below 0 (the line then goes through the S-shard run and 0 or flat); from one run only,
  all of it is taken as per-shard (`a = 0`), the pessimistic side.

With the clamps, the projection at K = S is always the S-shard split's own total.

It assumes a core per worker and per driver, so it stops holding where they share cores; see
docs/performance.md ("Sharded cycles: the model").
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

PROJECTED_WORKERS = (1, 2, 4, 8)


class BatchTimes(Protocol):
    """What the projection reads of one sharded call's timing; other fields are ignored."""

    @property
    def shard_seconds(self) -> Sequence[float]: ...

    @property
    def merge_seconds(self) -> float: ...

    @property
    def transfer_seconds(self) -> float: ...

    @property
    def total_seconds(self) -> float: ...


@runtime_checkable
class RecordsTimings(Protocol):
    """An executor that records a timing per sharded call, in call order (the Ray executor)."""

    @property
    def timings(self) -> Sequence[BatchTimes]: ...

    @property
    def fallbacks(self) -> int:
        """Calls that failed and were ranked in-process instead."""
        ...


@dataclass(frozen=True)
class CycleSplit:
    """One cycle's seconds by where they went; from `median_split`, the median of several cycles."""

    cycle_seconds: float
    batches: int = 0
    shard_seconds: tuple[float, ...] = ()
    """Each shard's compute summed over the cycle's batches."""
    critical_shard_seconds: float = 0.0
    """Per batch the slowest shard, summed: what shard compute adds to the cycle."""
    merge_seconds: float = 0.0
    transfer_seconds: float = 0.0
    waiting_seconds: float = 0.0
    """Time the driver spent waiting in sharded calls (their totals)."""

    @property
    def driver_serial_seconds(self) -> float:
        """The cycle less what sharded calls spent in shards, merging and transfer: the driver's
        own work, including any a call did in the driver (a failed shard's rows ranked there)."""
        sharded = self.critical_shard_seconds + self.merge_seconds + self.transfer_seconds
        return max(0.0, self.cycle_seconds - sharded)

    def as_json(self) -> dict[str, object]:
        return {
            "cycle_s": self.cycle_seconds,
            "driver_serial_s": self.driver_serial_seconds,
            "shard_compute_s": list(self.shard_seconds),
            "critical_shard_s": self.critical_shard_seconds,
            "merge_s": self.merge_seconds,
            "transfer_s": self.transfer_seconds,
            "waiting_s": self.waiting_seconds,
            "batches": self.batches,
        }


def split_cycle(cycle_seconds: float, timings: Sequence[BatchTimes]) -> CycleSplit:
    """The split of one cycle from the timings of the sharded calls it made."""
    shards = max((len(t.shard_seconds) for t in timings), default=0)
    per_shard = [0.0] * shards
    for timing in timings:
        for index, seconds in enumerate(timing.shard_seconds):
            per_shard[index] += seconds
    return CycleSplit(
        cycle_seconds=cycle_seconds,
        batches=len(timings),
        shard_seconds=tuple(per_shard),
        critical_shard_seconds=sum((max(t.shard_seconds, default=0.0) for t in timings), 0.0),
        merge_seconds=sum((t.merge_seconds for t in timings), 0.0),
        transfer_seconds=sum((t.transfer_seconds for t in timings), 0.0),
        waiting_seconds=sum((t.total_seconds for t in timings), 0.0),
    )


def median_split(splits: Sequence[CycleSplit]) -> CycleSplit:
    """Field by field, the median over cycles (a shard missing from a cycle counts as 0 s there)."""
    if not splits:
        raise ValueError("no cycles to take the median of")
    shards = max(len(s.shard_seconds) for s in splits)
    return CycleSplit(
        cycle_seconds=statistics.median(s.cycle_seconds for s in splits),
        batches=statistics.median_low(s.batches for s in splits),
        shard_seconds=tuple(
            statistics.median(s.shard_seconds[i] if i < len(s.shard_seconds) else 0.0 for s in splits)
            for i in range(shards)
        ),
        critical_shard_seconds=statistics.median(s.critical_shard_seconds for s in splits),
        merge_seconds=statistics.median(s.merge_seconds for s in splits),
        transfer_seconds=statistics.median(s.transfer_seconds for s in splits),
        waiting_seconds=statistics.median(s.waiting_seconds for s in splits),
    )


@dataclass(frozen=True)
class Projection:
    """Projected cycle seconds per worker count, and the measured terms they come from."""

    cycle_seconds: dict[int, float]
    basis: str
    """Which runs it rests on and what it had to assume, in words, for the output."""
    serial_seconds: float = 0.0
    fixed_shard_seconds: float = 0.0
    divisible_shard_seconds: float = 0.0
    critical_divisible_seconds: float = 0.0
    """`D`: the critical path's divisible shard work at the reference shard count."""
    reference_shards: int = 1

    merge_per_shard_seconds: float = 0.0
    transfer_fixed_seconds: float = 0.0
    transfer_per_shard_seconds: float = 0.0

    @property
    def imbalance(self) -> float:
        """The slowest shard's divisible work over the even share, at the reference shard count."""
        even = self.divisible_shard_seconds / self.reference_shards
        return self.critical_divisible_seconds / even if even > 0 else 1.0

    def as_json(self) -> dict[str, float]:
        """`projected_cycle_seconds`: worker counts as strings, as JSON object keys must be."""
        return {str(workers): seconds for workers, seconds in sorted(self.cycle_seconds.items())}


def project(measured: Mapping[int, CycleSplit], workers: Sequence[int] = PROJECTED_WORKERS) -> Projection:
    """The projected cycle for each worker count, from splits measured at one or more shard counts.

    The largest measured shard count is the reference; a 1-shard split, when there is one,
    separates fixed from divisible shard work and fixed from per-shard transfer.
    """
    if not measured:
        raise ValueError("no measured cycle to project from")
    shards = max(measured)
    ref = measured[shards]
    if ref.batches == 0:
        return Projection(
            cycle_seconds={k: ref.cycle_seconds for k in workers},
            basis="nothing was sharded: every K is the measured cycle",
            serial_seconds=ref.cycle_seconds,
        )
    total_work = sum(ref.shard_seconds)
    one = measured.get(1)
    if shards > 1 and one is not None and one.batches:
        fixed = (total_work - sum(one.shard_seconds)) / (shards - 1)
        fixed = min(max(0.0, fixed), min(ref.shard_seconds, default=0.0))
        per_shard_transfer = max(0.0, (ref.transfer_seconds - one.transfer_seconds) / (shards - 1))
        fixed_transfer = ref.transfer_seconds - per_shard_transfer * shards
        if fixed_transfer < 0:
            # Steeper than through the origin: keep the line through the reference run.
            fixed_transfer, per_shard_transfer = 0.0, ref.transfer_seconds / shards
        basis = f"runs with 1 and {shards} shards: fixed shard cost and transfer growth measured"
    else:
        fixed = 0.0
        per_shard_transfer = ref.transfer_seconds / shards
        fixed_transfer = 0.0
        basis = (
            f"one run with {shards} shard(s): fixed shard cost unknown (taken as 0), "
            "transfer taken to grow in proportion to K"
        )
    divisible = max(0.0, total_work - shards * fixed)
    critical = max(ref.critical_shard_seconds - fixed, divisible / shards)
    merge_per_shard = ref.merge_seconds / shards
    cycle = {
        k: ref.driver_serial_seconds
        + fixed
        + (critical * shards / k if k > 1 else divisible)
        + merge_per_shard * k
        + fixed_transfer
        + per_shard_transfer * k
        for k in workers
    }
    return Projection(
        cycle_seconds=cycle,
        basis=basis,
        serial_seconds=ref.driver_serial_seconds,
        fixed_shard_seconds=fixed,
        divisible_shard_seconds=divisible,
        critical_divisible_seconds=critical,
        reference_shards=shards,
        merge_per_shard_seconds=merge_per_shard,
        transfer_fixed_seconds=fixed_transfer,
        transfer_per_shard_seconds=per_shard_transfer,
    )
