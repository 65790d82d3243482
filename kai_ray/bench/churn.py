"""`kai-ray bench --shape churn-NxP`: cycles of a busy cluster fed by watch events, in process.

What `kai-ray serve` does between two cycles on a large cluster that changes a little: the
cache receives watch events (1 % of the running pods end, as many new pending pods arrive, the
last cycle's binds come back as running pods), and the cycle reads the cache through the
scheduler's own path (models → conversion → snapshot → engine), no API server involved.  The
same stream is also timed with everything rebuilt from the cache each cycle, the way every
cycle worked before the cluster model was incremental, for the ratio.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

from kai_ray.api.config import SchedulerConfig
from kai_ray.bench.churn_objects import ChurnCluster, WatchEvent
from kai_ray.cluster.kube.cache import ClusterCache
from kai_ray.cluster.kube.planner import CyclePlanner
from kai_ray.distributed.executor import Executor
from kai_ray.engine.plan import Plan
from kai_ray.gc_tuning import freeze_what_lives, tune_gc_for_serving

__all__ = ["ChurnRuns", "run_churn"]

NOW = 1_767_229_200.0
"""2026-01-01T01:00:00Z: an hour after the churn cluster's objects were created."""


@dataclass(frozen=True)
class ChurnRuns:
    runs: list[float]
    """Seconds per timed cycle: reading the cache into a snapshot, and the engine's whole cycle."""
    pods_placed: int
    """Pods the last timed cycle bound (every cycle places the pods that arrived before it)."""
    event_seconds: float
    """Median seconds per cycle the cache took to take in that cycle's watch events (the
    watchers' work, on their own threads in `serve`; not part of `runs`)."""


def _apply(cache: ClusterCache, events: list[WatchEvent]) -> float:
    started = time.perf_counter()
    for event in events:
        cache.apply_event(event.type, event.kind, event.obj)
    return time.perf_counter() - started


def run_churn(
    nodes: int, pods: int, repeat: int, executor: Executor | None = None, *, rebuild: bool = False
) -> ChurnRuns:
    """One untimed cycle on the freshly listed cluster (the first cycle of a scheduler that just
    synced, its model frozen out of the collector's reach as `serve` does), then `repeat` timed
    cycles, each after one cycle's churn.  ``rebuild``: every cycle
    starts from a new planner, as if nothing were remembered from the previous one.  The
    collector is tuned as `serve` tunes it at start-up (`tune_gc_for_serving`)."""
    tune_gc_for_serving()
    cluster = ChurnCluster(nodes, pods)
    cache = ClusterCache(None)
    _apply(cache, list(cluster.initial()))
    config = SchedulerConfig()
    planner = CyclePlanner(config, executor)
    state, _ = planner.read(cache, NOW)
    freeze_what_lives()  # as `serve` does once its first read is done (`KubeScheduler.warm_up`)
    plan = planner.decide(state)[1]
    runs: list[float] = []
    event_seconds: list[float] = []
    for _ in range(repeat):
        event_seconds.append(_apply(cache, [*cluster.bound(_binds(plan)), *cluster.churn()]))
        if rebuild:
            planner = CyclePlanner(config, executor)
        started = time.perf_counter()
        plan = planner.plan(cache, NOW)
        runs.append(time.perf_counter() - started)
    return ChurnRuns(runs, len(plan.binds), statistics.median(event_seconds))


def _binds(plan: Plan) -> list[tuple[str, str]]:
    return [(bind.task, bind.node) for bind in plan.binds]
