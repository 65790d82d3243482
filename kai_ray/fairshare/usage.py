"""Queue usage history for time-based fair share (spec §7): record, decay, window, normalise.

KAI asks Prometheus for `sum_over_time((allocated * decay)[window:resolution])` per queue and
divides it by the same sum over cluster capacity. That sum samples the allocation once per
`resolution` step, at steps aligned to multiples of the resolution, and weighs the step at time t
by 0.5 ^ ((now - t) / halfLife). This module keeps the same samples without storing one per step:
allocations change far more rarely than steps pass, so the history is a list of runs (consecutive
steps with the same capacity and allocations), and a run's decayed weight is a geometric series in
closed form. Memory and the persisted form therefore grow with how often allocations changed inside
the window, and never past one run per step.

Usage is a ratio of two sums decayed alike, so the decay is measured back from the newest counted
step rather than from `now`: the ratio is the same, and a week of 10-minute half-lives cannot
underflow both sums to zero.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kai_ray.fairshare.constants import FAIRNESS_RESOURCES

Vector = tuple[float, float, float]
"""One value per fairness resource, in `FAIRNESS_RESOURCES` order (cpu, memory, gpu)."""

QueueUsage = dict[str, dict[str, float]]
"""Normalised usage U per queue name and resource name, the division's `usage` input."""

PERSISTED_VERSION = 1


@dataclass(frozen=True)
class UsageWindow:
    """Which past steps count and how much: KAI's `usageParams` in seconds.

    `tumbling_start` None means a sliding window (the last `size` seconds); otherwise the window
    restarts every `size` seconds counted from it. `half_life` None means no decay.
    """

    size: float
    resolution: float = 60.0
    half_life: float | None = None
    tumbling_start: float | None = None

    def __post_init__(self) -> None:
        if self.size <= 0 or self.resolution <= 0:
            raise ValueError("a usage window needs a positive size and resolution")
        if self.half_life is not None and self.half_life <= 0:
            raise ValueError("a half-life must be positive (None turns decay off)")

    def step(self, now: float) -> int:
        """The step a sample taken at `now` belongs to: the latest sample in a step stands for it."""
        return math.floor(now / self.resolution)

    def first_step(self, now: float) -> int:
        """The oldest step that still counts at `now`."""
        if self.tumbling_start is None:
            return math.floor((now - self.size) / self.resolution) + 1
        reset = now
        if self.tumbling_start <= now:
            reset = self.tumbling_start + math.floor((now - self.tumbling_start) / self.size) * self.size
        return math.ceil(reset / self.resolution)

    def weight(self, start: int, end: int, newest: int) -> float:
        """Sum of the decay factors of steps [start, end), measured back from step `newest`."""
        count = end - start
        if count <= 0:
            return 0.0
        if self.half_life is None:
            return float(count)
        ratio: float = 0.5 ** (self.resolution / self.half_life)
        newest_in_run: float = ratio ** (newest - (end - 1))
        return newest_in_run * (1.0 - ratio**count) / (1.0 - ratio)


@dataclass
class _Run:
    """Steps [start, end) over which capacity and every queue's allocation stayed the same."""

    start: int
    end: int
    capacity: Vector
    allocated: dict[str, Vector]

    def same_values(self, capacity: Vector, allocated: Mapping[str, Vector]) -> bool:
        return self.capacity == capacity and self.allocated == allocated


class UsageHistory:
    """Recorded queue allocations over time, pruned to the window, and the usage they add up to.

    A recorded allocation holds until the next record (the cluster kept running between two
    scheduling cycles), so a sample fills the steps since the previous one. Records older than the
    newest recorded step are dropped: the clock does not run backwards for a single scheduler, and
    a leader change with a skewed clock must not rewrite history it cannot see.
    """

    def __init__(self, window: UsageWindow) -> None:
        self.window = window
        self._runs: list[_Run] = []
        self._closed: tuple[tuple[int, ...], list[float], dict[str, list[float]]] | None = None

    @property
    def run_count(self) -> int:
        return len(self._runs)

    @property
    def oldest_step(self) -> int | None:
        return self._runs[0].start if self._runs else None

    def record(self, now: float, capacity: Vector, allocated: Mapping[str, Vector]) -> bool:
        """Add one cycle's sample; False (and nothing changed) when it is older than the history."""
        step = self.window.step(now)
        values = {name: _vector(vector) for name, vector in sorted(allocated.items())}
        capacity = _vector(capacity)
        last = self._runs[-1] if self._runs else None
        if last is not None and step < last.end - 1:
            return False
        if last is not None and step == last.end - 1:
            if last.same_values(capacity, values):
                return True
            last.end = step
            if last.start == last.end:
                self._runs.pop()
        elif last is not None:
            last.end = step
        previous = self._runs[-1] if self._runs else None
        if previous is not None and previous.end == step and previous.same_values(capacity, values):
            previous.end = step + 1
        else:
            self._runs.append(_Run(step, step + 1, capacity, values))
        self.prune(now)
        return True

    def seed(self, now: float, capacity: Vector, fractions: Mapping[str, Mapping[str, float]]) -> None:
        """Past usage stated by hand: each queue held `fraction x capacity` over the whole window
        before `now`, so that usage at `now` is exactly the stated fraction."""
        step = self.window.step(now)
        first = self.window.first_step(now)
        if step <= first:
            return
        allocated = {
            name: _vector(
                [share.get(resource, 0.0) * capacity[i] for i, resource in enumerate(FAIRNESS_RESOURCES)]
            )
            for name, share in sorted(fractions.items())
        }
        self._runs = [_Run(first, step, _vector(capacity), allocated)]
        self._closed = None

    def prune(self, now: float) -> None:
        """Forget steps the window no longer counts (memory stays bounded by the window)."""
        first = self.window.first_step(now)
        kept = [run for run in self._runs if run.end > first]
        if kept and kept[0].start < first:
            kept[0].start = first
        self._runs = kept

    def usage(self, now: float) -> QueueUsage:
        """U per queue and resource at `now`: decayed allocation over decayed capacity, in [0, ...).

        The latest sample still holds at `now` (nothing newer was seen), as the latest scrape does
        for Prometheus. A resource the cluster never had has usage 0 (KAI would divide by zero).
        """
        first = self.window.first_step(now)
        newest = self.window.step(now)
        capacity_sum, allocated_sum = self._closed_sums(first, newest)
        if self._runs:
            last = self._runs[-1]
            _add_run(
                capacity_sum,
                allocated_sum,
                last,
                self.window.weight(max(last.start, first), newest + 1, newest),
            )
        return {
            name: {
                resource: sums[i] / capacity_sum[i] if capacity_sum[i] > 0 else 0.0
                for i, resource in enumerate(FAIRNESS_RESOURCES)
            }
            for name, sums in sorted(allocated_sum.items())
        }

    def _closed_sums(self, first: int, newest: int) -> tuple[list[float], dict[str, list[float]]]:
        """Decayed sums over every run but the last, computed again only when they can change.

        Why: a scheduler asks every cycle (each second) while the step moves once a minute, and a
        busy week holds thousands of runs. Runs other than the last change only when one closes
        (their count changes) or the window start moves, both part of the key; `load` and `seed`
        replace the runs and drop the cache. Copies are returned, so callers may add to them.
        """
        closed = self._runs[:-1]
        key = (first, newest, len(closed), closed[0].start if closed else 0, closed[-1].end if closed else 0)
        if self._closed is None or self._closed[0] != key:
            capacity_sum = [0.0, 0.0, 0.0]
            allocated_sum: dict[str, list[float]] = {}
            for run in closed:
                weight = self.window.weight(max(run.start, first), min(run.end, newest + 1), newest)
                _add_run(capacity_sum, allocated_sum, run, weight)
            self._closed = (key, capacity_sum, allocated_sum)
        _, capacity_sum, allocated_sum = self._closed
        return list(capacity_sum), {name: list(sums) for name, sums in allocated_sum.items()}

    def to_dict(self) -> dict[str, Any]:
        """The persisted form: plain JSON-able data, steps as integers of `resolution` seconds."""
        return {
            "version": PERSISTED_VERSION,
            "resolution": self.window.resolution,
            "runs": [
                {
                    "start": run.start,
                    "end": run.end,
                    "capacity": list(run.capacity),
                    "queues": {name: list(vector) for name, vector in run.allocated.items()},
                }
                for run in self._runs
            ],
        }

    def load(self, data: Mapping[str, Any]) -> None:
        """Replace the history with a persisted one; ValueError if it was recorded differently.

        A different resolution would put the steps elsewhere in time, so such a history is refused
        rather than reinterpreted.
        """
        if data.get("version") != PERSISTED_VERSION:
            raise ValueError(f"unknown usage history version {data.get('version')!r}")
        if float(data.get("resolution", 0.0)) != self.window.resolution:
            raise ValueError(
                f"usage history was recorded every {data.get('resolution')} s, "
                f"not every {self.window.resolution} s"
            )
        runs = []
        for raw in data.get("runs", []):
            runs.append(
                _Run(
                    int(raw["start"]),
                    int(raw["end"]),
                    _vector(raw["capacity"]),
                    {str(name): _vector(values) for name, values in sorted(raw["queues"].items())},
                )
            )
        if any(run.start >= run.end for run in runs) or any(
            earlier.end > later.start for earlier, later in itertools.pairwise(runs)
        ):
            raise ValueError("usage history runs are empty or out of order")
        self._runs = runs
        self._closed = None


def _add_run(
    capacity_sum: list[float], allocated_sum: dict[str, list[float]], run: _Run, weight: float
) -> None:
    if weight == 0.0:
        return
    for i in range(3):
        capacity_sum[i] += weight * run.capacity[i]
    for name, vector in run.allocated.items():
        sums = allocated_sum.setdefault(name, [0.0, 0.0, 0.0])
        for i in range(3):
            sums[i] += weight * vector[i]


def _vector(values: Any) -> Vector:
    first, second, third = (float(value) for value in values)
    return (first, second, third)
