"""Runs one benchmark shape and measures scheduling cycles (not set-up)."""

from __future__ import annotations

import resource
import statistics
import time
from dataclasses import asdict, dataclass

from kai_ray.bench.churn_objects import churn_sizes
from kai_ray.bench.shapes import build_shape
from kai_ray.distributed.executor import Executor
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
    evictions: int
    peak_rss_mb: float
    sharding: dict[str, float] | None = None
    """With the Ray executor: median seconds per batch spent in shards, merging and moving data."""
    full_rebuild: dict[str, object] | None = None
    """Churn shapes: the same cycles with nothing remembered between them (`runs`,
    `median_cycle_seconds`, and `ratio`, this result's median over that one), and the median
    seconds the cache took to take in a cycle's watch events (`event_seconds`)."""

    def as_json(self) -> dict[str, object]:
        return asdict(self)


def run_shape(name: str, repeat: int = 3, executor: Executor | None = None, shards: int = 1) -> BenchResult:
    """Times `repeat` cycles, each on a freshly built shape, so no run sees another's leftovers.

    Building the cluster and compiling its snapshot stay outside the timer:
    they stand in for the informer cache, which a real scheduler keeps warm.
    Every run schedules the same input, so the last run's plan speaks for all.
    """
    sizes = churn_sizes(name)
    if sizes is not None:
        return _run_churn_shape(name, sizes, repeat, executor, shards)
    runs: list[float] = []
    placed = evicted = 0
    for _ in range(repeat):
        shape = build_shape(name)
        snapshot = compile_snapshot(shape.state)
        config = shape.config
        started = time.perf_counter()
        plan = schedule(snapshot, config, executor)
        runs.append(time.perf_counter() - started)
        placed = len(plan.binds) + len(plan.pipelined)
        evicted = len(plan.evictions)
    median = statistics.median(runs)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return BenchResult(
        shape=name,
        executor="local" if executor is None else "ray",
        shards=shards,
        runs=runs,
        median_cycle_seconds=median,
        pods_placed=placed,
        pods_per_second=placed / median if median else 0.0,
        evictions=evicted,
        peak_rss_mb=peak_mb,
        sharding=_sharding(executor),
    )


def _run_churn_shape(
    name: str, sizes: tuple[int, int], repeat: int, executor: Executor | None, shards: int
) -> BenchResult:
    # Imported here: it loads the Kubernetes client, which no other shape (nor `simulate`) needs.
    from kai_ray.bench.churn import run_churn

    kept = run_churn(*sizes, repeat, executor)
    rebuilt = run_churn(*sizes, repeat, executor, rebuild=True)
    median = statistics.median(kept.runs)
    rebuilt_median = statistics.median(rebuilt.runs)
    return BenchResult(
        shape=name,
        executor="local" if executor is None else "ray",
        shards=shards,
        runs=kept.runs,
        median_cycle_seconds=median,
        pods_placed=kept.pods_placed,
        pods_per_second=kept.pods_placed / median if median else 0.0,
        evictions=0,
        peak_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        sharding=_sharding(executor),
        full_rebuild={
            "runs": rebuilt.runs,
            "median_cycle_seconds": rebuilt_median,
            "ratio": median / rebuilt_median if rebuilt_median else 0.0,
            "event_seconds": kept.event_seconds,
        },
    )


def _sharding(executor: Executor | None) -> dict[str, float] | None:
    """How a sharded executor's batches split their time (duck-typed: only Ray's records timings)."""
    timings = getattr(executor, "timings", None)
    if not timings:
        return None
    return {
        "batches": float(len(timings)),
        "shard_compute_s": statistics.median(max(t.shard_seconds, default=0.0) for t in timings),
        "merge_s": statistics.median(t.merge_seconds for t in timings),
        "transfer_s": statistics.median(t.transfer_seconds for t in timings),
        "total_s": statistics.median(t.total_seconds for t in timings),
        "fallbacks": float(getattr(executor, "fallbacks", 0)),
    }
