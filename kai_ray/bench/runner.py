"""Runs one benchmark shape and measures scheduling cycles (not set-up)."""

from __future__ import annotations

import resource
import statistics
import time
from dataclasses import asdict, dataclass

from kai_ray.api.config import SchedulerConfig
from kai_ray.bench.shapes import build_shape
from kai_ray.engine.cycle import schedule
from kai_ray.model.snapshot import compile_snapshot


@dataclass(frozen=True)
class BenchResult:
    shape: str
    executor: str
    shards: int
    runs: list[float]
    median_cycle_seconds: float
    pods_placed: int
    pods_per_second: float
    peak_rss_mb: float

    def as_json(self) -> dict[str, object]:
        return asdict(self)


def run_shape(name: str, repeat: int = 3) -> BenchResult:
    """Each run schedules a fresh snapshot of the shape: one full cycle of every configured action."""
    runs: list[float] = []
    placed = 0
    for _ in range(repeat):
        snapshot = compile_snapshot(build_shape(name))
        started = time.perf_counter()
        plan = schedule(snapshot, SchedulerConfig())
        runs.append(time.perf_counter() - started)
        placed = len(plan.binds) + len(plan.pipelined)
    median = statistics.median(runs)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return BenchResult(name, "local", 1, runs, median, placed, placed / median if median else 0.0, peak_mb)
