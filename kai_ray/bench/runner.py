"""Runs one benchmark shape and measures scheduling cycles (not set-up)."""

from __future__ import annotations

import resource
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Protocol

from kai_ray.api.config import SchedulerConfig
from kai_ray.bench import kai_reference
from kai_ray.bench.churn_objects import churn_sizes
from kai_ray.bench.projection import (
    BatchTimes,
    CycleSplit,
    Projection,
    RecordsTimings,
    median_split,
    project,
    split_cycle,
)
from kai_ray.bench.shapes import build_shape
from kai_ray.collector import collection_paused
from kai_ray.distributed.executor import Executor
from kai_ray.engine.cycle import open_session, run_actions
from kai_ray.gc_tuning import freeze_what_lives
from kai_ray.model.snapshot import Snapshot, compile_snapshot
from kai_ray.split.cycle import SplitCycles, SplitTiming


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
    time_split: CycleSplit | None = None
    """Median per cycle: the driver's serial time, each shard's compute, merge and transfer
    (none for churn shapes, whose cycles also read the cache)."""
    projection: Projection | None = None
    """The cycle projected for 1, 2, 4 and 8 workers from `time_split` (see `projection`)."""
    ratio_to_local: float | None = None
    """With `--compare`: this median over the local executor's median from the same run."""
    cpu_seconds: dict[str, float] | None = None
    """Median CPU seconds of this process per cycle (`time.process_time`, so another load on the
    machine counts less than in wall clock): `opening` (the session: fair shares, bookings),
    `actions_and_plan`, and `cycle`, the two together. Local executor only: Ray shards and split
    cycles' parts spend theirs in other processes."""
    same_snapshot: bool = False
    """Whether every cycle ran over one snapshot compiled once (`--same-snapshot`), rather than
    over a shape built afresh for each."""
    split_cycles: dict[str, float] | None = None
    """With `--shard-by jobs`: median seconds of the split cycle's steps (`parts`, `accept`,
    `merge`, and `fallback`, the local cycle run when the parts left a pod pending), of the
    slowest part's own compute, of the coordinator taking in the answers as they came in (`taking`,
    all parts together: `accept` and `merge` are what was left after the last), and of the
    critical path (`_critical_path`),
    `prepare_s` (bringing the parts' replicas to the snapshot, outside the timed cycle like
    compiling the snapshot), cycles by `SplitOutcome` (`cycles_split`, ...) and part faults."""

    @property
    def against_kai(self) -> dict[str, float] | None:
        """For a shape KAI benchmarks: its figure, the target and our CPU figures over it
        (`kai_reference.against_kai`); None without a CPU split or for other shapes."""
        cpu = self.cpu_seconds
        if cpu is None:
            return None
        return kai_reference.against_kai(self.shape, cpu["actions_and_plan"], cpu["cycle"])

    def as_json(self) -> dict[str, object]:
        document = asdict(self)
        document["against_kai"] = self.against_kai
        document["time_split"] = self.time_split.as_json() if self.time_split else None
        del document["projection"]
        document["projected_cycle_seconds"] = self.projection.as_json() if self.projection else None
        document["projection_basis"] = self.projection.basis if self.projection else None
        return document


class ShardedExecutor(Executor, Protocol):
    """An executor the compare mode makes for a shard count and ends once every cycle is timed."""

    def close(self) -> None: ...


def run_shape(
    name: str,
    repeat: int = 3,
    executor: Executor | None = None,
    shards: int = 1,
    same_snapshot: bool = False,
) -> BenchResult:
    """Times `repeat` cycles, each on a freshly built shape, so no run sees another's leftovers;
    with `same_snapshot`, each over the one snapshot the first built (see `_Cycles`).

    Building the cluster and compiling its snapshot stay outside the timer:
    they stand in for the informer cache, which a real scheduler keeps warm.
    Every run schedules the same input, so the last run's plan speaks for all.
    """
    sizes = churn_sizes(name)
    if sizes is not None:
        if same_snapshot:
            raise ValueError(
                f"{name}: churn shapes change their cluster every cycle; --same-snapshot does not apply"
            )
        return _run_churn_shape(name, sizes, repeat, executor, shards)
    cycles = _Cycles(executor, shards, same_snapshot=same_snapshot)
    for _ in range(repeat):
        cycles.time_one(name)
    return cycles.result(name)


def run_compare(
    name: str,
    repeat: int,
    sharded: Callable[[int], ShardedExecutor],
    shards: int,
    same_snapshot: bool = False,
) -> list[BenchResult]:
    """The local executor and the sharded one with 1 shard and with `shards`, on the same shape.

    Their cycles take turns (local, 1 shard, `shards`, local, ...), so a change in the load of
    a shared machine hits every executor alike instead of whichever ran last. The 1-shard run
    is what lets the projection tell fixed shard costs from divisible work and fixed transfer
    from per-shard transfer; the widest run carries that projection. Every result gets its
    median over the local one's.
    """
    if churn_sizes(name) is not None:
        raise ValueError(f"{name}: --compare times generated shapes; run churn shapes one executor at a time")
    counts = sorted({1, shards})
    executors: list[ShardedExecutor] = []
    try:
        for count in counts:
            executors.append(sharded(count))
        timed = [
            _Cycles(None, 1, same_snapshot=same_snapshot),
            *(_Cycles(e, c, same_snapshot=same_snapshot) for e, c in zip(executors, counts, strict=True)),
        ]
        for _ in range(repeat):
            for cycles in timed:
                cycles.time_one(name)
    finally:
        for executor in executors:
            executor.close()
    local, *rest = [cycles.result(name) for cycles in timed]
    measured = {r.shards: r.time_split for r in rest if r.time_split is not None}
    combined = project(measured)
    base = local.median_cycle_seconds
    return [
        replace(
            result,
            ratio_to_local=result.median_cycle_seconds / base if base else 0.0,
            projection=combined if result.shards == shards and result is not local else result.projection,
        )
        for result in (local, *rest)
    ]


def run_split_shape(name: str, repeat: int, split: SplitCycles, same_snapshot: bool = False) -> BenchResult:
    """`repeat` split cycles over `split.count` parts (see `run_split_compare` for the turns)."""
    if churn_sizes(name) is not None:
        raise ValueError(f"{name}: split cycles are timed on generated shapes, not churn shapes")
    cycles = _Cycles(None, split.count, split, same_snapshot=same_snapshot)
    try:
        for _ in range(repeat):
            cycles.time_one(name)
    finally:
        split.close()
    return cycles.result(name)


def run_split_compare(
    name: str, repeat: int, split: SplitCycles, same_snapshot: bool = False
) -> list[BenchResult]:
    """The local engine and split cycles over `split.count` parts on the same shape, cycles
    taking turns (as `run_compare`); the split result gets its median over the local one's."""
    if churn_sizes(name) is not None:
        raise ValueError(f"{name}: split cycles are timed on generated shapes, not churn shapes")
    timed = [
        _Cycles(None, 1, same_snapshot=same_snapshot),
        _Cycles(None, split.count, split, same_snapshot=same_snapshot),
    ]
    try:
        for _ in range(repeat):
            for cycles in timed:
                cycles.time_one(name)
    finally:
        split.close()
    local, sharded = (cycles.result(name) for cycles in timed)
    base = local.median_cycle_seconds
    return [local, replace(sharded, ratio_to_local=sharded.median_cycle_seconds / base if base else 0.0)]


@dataclass
class _Cycles:
    """The cycles timed so far with one executor, and what the last one placed and evicted."""

    executor: Executor | None
    shards: int
    split: SplitCycles | None = None
    """Split cycles instead of the engine's one session (`executor` is then None)."""
    same_snapshot: bool = False
    """Every cycle over the snapshot the first one compiled. A served scheduler's steady state:
    the snapshot compiler hands back the same spec object for a pod that did not change, so what
    the engine derives from a spec is worked out once, not every cycle. Without it every cycle
    meets every spec for the first time, as a cluster made of new pods would."""
    runs: list[float] = field(default_factory=list)
    splits: list[CycleSplit] = field(default_factory=list)
    prepares: list[float] = field(default_factory=list)
    openings: list[float] = field(default_factory=list)
    """CPU seconds per cycle opening its session (not with split cycles)."""
    actions: list[float] = field(default_factory=list)
    """CPU seconds per cycle of its actions and its plan (not with split cycles)."""
    kept: tuple[Snapshot, SchedulerConfig] | None = None
    placed: int = 0
    evicted: int = 0

    def _input(self, name: str) -> tuple[Snapshot, SchedulerConfig]:
        if self.kept is not None:
            return self.kept
        shape = build_shape(name)
        built = compile_snapshot(shape.state), shape.config
        if self.same_snapshot:
            self.kept = built
        return built

    def time_one(self, name: str) -> None:
        snapshot, config = self._input(name)
        already = _timings_count(self.executor)
        if self.split is not None:
            started = time.perf_counter()
            self.split.prepare(snapshot)
            self.prepares.append(time.perf_counter() - started)
        # A served cycle runs over a model the collector no longer walks (`serve` freezes it after
        # its first read): the timed cycle does too, whichever executor runs it.
        freeze_what_lives()
        # As serve does, the cycle's garbage is collected once its plan is out, not inside it.
        with collection_paused():
            started = time.perf_counter()
            if self.split is not None:
                plan = self.split.schedule(snapshot, config)
            else:
                cpu_started = time.process_time()
                session = open_session(snapshot, config, self.executor)
                opened = time.process_time()
                plan = run_actions(session)
                if self.executor is None:  # a Ray executor's shards spend CPU in other processes
                    self.actions.append(time.process_time() - opened)
                    self.openings.append(opened - cpu_started)
            self.runs.append(time.perf_counter() - started)
        self.splits.append(split_cycle(self.runs[-1], _timings_since(self.executor, already)))
        self.placed = len(plan.binds) + len(plan.pipelined)
        self.evicted = len(plan.evictions)

    def result(self, name: str) -> BenchResult:
        median = statistics.median(self.runs)
        split = median_split(self.splits)
        return BenchResult(
            shape=name,
            executor=self._executor_name(),
            shards=self.shards,
            runs=self.runs,
            median_cycle_seconds=median,
            pods_placed=self.placed,
            pods_per_second=self.placed / median if median else 0.0,
            evictions=self.evicted,
            peak_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            sharding=_sharding(self.executor),
            time_split=split if self.split is None else None,
            projection=project({self.shards: split}) if self.split is None else None,
            cpu_seconds=self._cpu_medians(),
            same_snapshot=self.same_snapshot,
            split_cycles=self._split_medians(),
        )

    def _cpu_medians(self) -> dict[str, float] | None:
        if not self.actions:
            return None
        cycles = [opening + actions for opening, actions in zip(self.openings, self.actions, strict=True)]
        return {
            "opening": statistics.median(self.openings),
            "actions_and_plan": statistics.median(self.actions),
            "cycle": statistics.median(cycles),
        }

    def _executor_name(self) -> str:
        if self.split is not None:
            return f"split-{self.split.runner.name}"
        return "local" if self.executor is None else "ray"

    def _split_medians(self) -> dict[str, float] | None:
        if self.split is None:
            return None
        timings = self.split.timings
        medians = {
            f"{step}_s": statistics.median(getattr(t, step) for t in timings) if timings else 0.0
            for step in ("parts", "accept", "merge", "fallback")
        }
        faults = getattr(self.split.runner, "faults", {})
        slowest = [max(t.part_seconds, default=0.0) for t in timings] or [0.0]
        critical = [_critical_path(t) for t in timings] or [0.0]
        return {
            **medians,
            "slowest_part_s": statistics.median(slowest),
            "taking_s": statistics.median(sum(t.taking) for t in timings) if timings else 0.0,
            "critical_path_s": statistics.median(critical),
            "prepare_s": statistics.median(self.prepares),
            **{
                f"cycles_{outcome.value}": float(count)
                for outcome, count in sorted(self.split.outcomes.items())
            },
            "faults": float(sum(faults.values())),
        }


def _critical_path(timing: SplitTiming) -> float:
    """The split cycle with a worker per part and nothing moved between processes: the part that
    is last in once the coordinator took its answer, then what is left after the last answer."""
    taken = [part + taking for part, taking in zip(timing.part_seconds, timing.taking, strict=True)]
    return max(taken, default=0.0) + timing.accept + timing.merge


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


def _timings_count(executor: Executor | None) -> int:
    return len(executor.timings) if isinstance(executor, RecordsTimings) else 0


def _timings_since(executor: Executor | None, already: int) -> list[BatchTimes]:
    """The sharded calls' timings recorded after the first `already` (none for other executors)."""
    return list(executor.timings[already:]) if isinstance(executor, RecordsTimings) else []


def _sharding(executor: Executor | None) -> dict[str, float] | None:
    """How a sharded executor's batches split their time: medians per batch, and the fallbacks."""
    if not isinstance(executor, RecordsTimings) or not executor.timings:
        return None
    timings = executor.timings
    return {
        "batches": float(len(timings)),
        "shard_compute_s": statistics.median(max(t.shard_seconds, default=0.0) for t in timings),
        "merge_s": statistics.median(t.merge_seconds for t in timings),
        "transfer_s": statistics.median(t.transfer_seconds for t in timings),
        "total_s": statistics.median(t.total_seconds for t in timings),
        "fallbacks": float(executor.fallbacks),
    }
