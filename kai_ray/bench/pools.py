"""`kai-ray bench --shard-by node-pool`: a shape's cycle whole, and pool by pool in-process and in Ray.

Every row times snapshot compilation together with the cycle, because a pool's shard
compiles its own sub-cluster (in its Ray task, for the Ray row): leaving compilation out
of one row only would flatter it. The whole-cluster row is one scheduler over every pool
at once, for scale: its decisions differ (one fair share for all pools), its work is the
same. The Ray row starts its workers before timing (one untimed call per pool).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from rich.console import Console
from rich.table import Table

from kai_ray.api.constants import NODE_POOL_LABEL
from kai_ray.bench.shapes import build_shape
from kai_ray.engine.cycle import schedule
from kai_ray.engine.plan import Plan
from kai_ray.model.objects import ClusterState
from kai_ray.model.pools import pool_names
from kai_ray.model.snapshot import compile_snapshot
from kai_ray.split.pool_runner import (
    LocalPoolRunner,
    PoolCycle,
    PoolRunner,
    RayPoolRunner,
    schedule_pool,
    schedule_pools,
)

WHOLE = "whole cluster, in-process"
POOLS_LOCAL = "pools, in-process in turn"
POOLS_RAY = "pools, one Ray task each"


@dataclass(frozen=True)
class PoolBenchRow:
    mode: str
    runs: list[float]
    median_cycle_seconds: float
    pods_placed: int
    evictions: int


@dataclass
class PoolBenchResult:
    shape: str
    pools: int
    rows: list[PoolBenchRow] = field(default_factory=list)
    plans_identical: bool | None = None
    """Ray row only: whether its plan equals the in-process pools' plan."""
    ray_fallbacks: int = 0
    """Pools the Ray row scheduled in-process because their task failed or timed out."""

    def as_json(self) -> dict[str, object]:
        return asdict(self)


def _timed(
    name: str, mode: str, repeat: int, cycle: Callable[[ClusterState], Plan]
) -> tuple[PoolBenchRow, Plan]:
    """`repeat` cycles, each on a freshly built shape; the last plan speaks for all (same input)."""
    runs: list[float] = []
    plan = Plan()
    for _ in range(repeat):
        state = build_shape(name).state
        started = time.perf_counter()
        plan = cycle(state)
        runs.append(time.perf_counter() - started)
    row = PoolBenchRow(
        mode, runs, statistics.median(runs), len(plan.binds) + len(plan.pipelined), len(plan.evictions)
    )
    return row, plan


def run_pool_shape(
    name: str, repeat: int = 3, ray_address: str | None = None, use_ray: bool = False
) -> PoolBenchResult:
    """Times the shape whole, by pool in-process, and (with `use_ray`) by pool in Ray tasks."""
    shape = build_shape(name)
    config = shape.config
    result = PoolBenchResult(shape=name, pools=len(pool_names(shape.state, NODE_POOL_LABEL)))

    def by_pool(runner: PoolRunner) -> Callable[[ClusterState], Plan]:
        return lambda state: schedule_pools(state, config, runner)

    whole, _ = _timed(name, WHOLE, repeat, lambda state: schedule(compile_snapshot(state), config))
    local, local_plan = _timed(name, POOLS_LOCAL, repeat, by_pool(LocalPoolRunner()))
    result.rows += [whole, local]
    if use_ray:
        runner = RayPoolRunner(ray_address)
        warm_up = {str(index): PoolCycle(ClusterState(), config) for index in range(result.pools)}
        runner.run(schedule_pool, warm_up)
        remote, remote_plan = _timed(name, POOLS_RAY, repeat, by_pool(runner))
        result.rows.append(remote)
        result.plans_identical = remote_plan == local_plan
        result.ray_fallbacks = len(runner.fallbacks)
    return result


def render_pool_bench(result: PoolBenchResult, console: Console) -> None:
    title = f"kai-ray bench {result.shape} ({result.pools} node pools; times include the snapshot)"
    table = Table(title=title)
    for column in ("mode", "cycles", "median cycle s", "pods placed", "evictions", "pods/s"):
        table.add_column(column, justify="right")
    for row in result.rows:
        rate = row.pods_placed / row.median_cycle_seconds if row.median_cycle_seconds else 0.0
        table.add_row(
            row.mode,
            str(len(row.runs)),
            f"{row.median_cycle_seconds:.3f}",
            str(row.pods_placed),
            str(row.evictions),
            f"{rate:.0f}",
        )
    console.print(table)
    if result.plans_identical is not None:
        same = "yes" if result.plans_identical else "NO"
        console.print(
            f"Ray plan identical to the in-process one: {same}; "
            f"pools rescheduled in-process: {result.ray_fallbacks}"
        )
