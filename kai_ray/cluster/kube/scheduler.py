"""The Kubernetes scheduling loop: cache → snapshot → plan → BindRequests → binder → status.

A thin shell around the engine: every decision is the engine's, made from
the informer cache's snapshot; this module only moves data in and out, in
a fixed order per cycle. Only the leader (a Lease) runs cycles, and the
binder runs inside the leader's cycle, so two replicas never bind at once.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from kai_ray.api.config import SchedulerConfig
from kai_ray.cluster.kube.apply import ApplyResult, apply_plan
from kai_ray.cluster.kube.binder import Binder, BindPassResult
from kai_ray.cluster.kube.cache import ClusterCache
from kai_ray.cluster.kube.grouper import ensure_pod_groups
from kai_ray.cluster.kube.leader import LeaderElector
from kai_ray.cluster.kube.reporting import ProblemReporter
from kai_ray.cluster.kube.snapshot import snapshot
from kai_ray.cluster.kube.status import EventWriter, StatusWriter, queue_usage_from_book
from kai_ray.distributed.executor import Executor
from kai_ray.engine.cycle import open_session, run_actions
from kai_ray.engine.plan import Plan
from kai_ray.model.snapshot import compile_snapshot
from kai_ray.server.metrics import SchedulerMetrics

log = logging.getLogger(__name__)

DEFAULT_PERIOD_SECONDS = 1.0
CACHE_SYNC_TIMEOUT_SECONDS = 60.0
BIND_PASS_TIMEOUT_SECONDS = 30.0


@dataclass
class CycleOutcome:
    plan: Plan
    applied: ApplyResult
    bound: BindPassResult
    seconds: float
    problems: int = 0


@dataclass
class KubeScheduler:
    api: Any
    config: SchedulerConfig = field(default_factory=SchedulerConfig)
    scheduler_name: str = "kai-scheduler"
    executor: Executor | None = None
    namespace: str | None = None
    metrics: SchedulerMetrics | None = None

    def __post_init__(self) -> None:
        self.cache = ClusterCache(self.api, scheduler_name=self.scheduler_name, namespace=self.namespace)
        self.events = EventWriter(self.api, component=self.scheduler_name)
        self.reporter = ProblemReporter(self.api, self.cache, self.events)
        self.status = StatusWriter(self.api, scheduler_name=self.scheduler_name, recorder=self.events)
        self.binder = Binder(self.api, namespace=self.namespace, recorder=self.events)

    def start(self) -> None:
        self.cache.start()
        if not self.cache.wait_synced(CACHE_SYNC_TIMEOUT_SECONDS):
            log.warning(
                "cluster cache not synced after %ss; scheduling from what it has", CACHE_SYNC_TIMEOUT_SECONDS
            )

    def stop(self) -> None:
        self.cache.stop()

    def run_cycle(self) -> CycleOutcome:
        """One full cycle. Never raises on bad cluster objects: they are reported and skipped."""
        started = time.perf_counter()
        ensure_pod_groups(self.api, self.cache, self.events)
        state, problems = snapshot(self.cache)
        reported = self.reporter.report(problems)
        session = open_session(compile_snapshot(state), self.config, self.executor)
        plan = run_actions(session)
        pod_uids = _pod_uids(self.cache)
        applied = apply_plan(
            self.api, plan, scheduler_name=self.scheduler_name, recorder=self.events, pod_uids=pod_uids
        )
        bound = self.binder.bind_pending(timeout=BIND_PASS_TIMEOUT_SECONDS)
        self.status.write_podgroup_status(plan)
        self.status.write_queue_status(queue_usage_from_book(session.queues))
        seconds = time.perf_counter() - started
        if self.metrics is not None:
            self.metrics.observe_cycle(seconds * 1000, plan, session.queues)
        log.info(
            "cycle: %d bound, %d pipelined, %d evicted, %d pending jobs, %.3fs",
            len(plan.binds),
            len(plan.pipelined),
            len(plan.evictions),
            len(plan.pending_reasons),
            seconds,
        )
        return CycleOutcome(plan, applied, bound, seconds, reported)

    def run(
        self,
        stop: threading.Event,
        period: float = DEFAULT_PERIOD_SECONDS,
        leader: LeaderElector | None = None,
    ) -> None:
        """Cycles until `stop` is set; the period is measured from the end of one cycle, as KAI does."""
        self.start()
        try:
            while not stop.is_set():
                if leader is None or leader.try_acquire_or_renew():
                    self._guarded_cycle()
                stop.wait(period)
        finally:
            if leader is not None:
                leader.release()
            self.stop()

    def _guarded_cycle(self) -> None:
        try:
            self.run_cycle()
        except Exception:
            log.exception("scheduling cycle failed; the next cycle starts from a fresh snapshot")


def _pod_uids(cache: ClusterCache) -> dict[tuple[str, str], str]:
    uids = {}
    for pod in cache.objects("Pod"):
        meta = pod.get("metadata") or {}
        uids[(meta.get("namespace", ""), meta.get("name", ""))] = meta.get("uid", "")
    return uids
