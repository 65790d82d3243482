"""The Kubernetes scheduling loop: cache → snapshot → plan → BindRequests → binder → status.

A thin shell around the engine: every decision is the engine's, made from
the informer cache's snapshot; this module only moves data in and out, in
a fixed order per cycle. Only the leader (a Lease) runs cycles, and the
binder runs inside the leader's cycle, so two replicas never bind at once.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from kai_ray.api.config import SchedulerConfig
from kai_ray.api.constants import NODE_POOL_LABEL
from kai_ray.cluster.kube.apply import ApplyResult, apply_plan
from kai_ray.cluster.kube.binder import Binder, BindPassResult
from kai_ray.cluster.kube.cache import ClusterCache
from kai_ray.cluster.kube.grouper import ensure_pod_groups
from kai_ray.cluster.kube.leader import LeaderElector
from kai_ray.cluster.kube.reporting import ProblemReporter
from kai_ray.cluster.kube.snapshot import snapshot
from kai_ray.cluster.kube.status import EventWriter, PodGroupRef, StatusWriter, queue_usage_from_book
from kai_ray.distributed.executor import Executor
from kai_ray.engine.cycle import open_session, run_actions
from kai_ray.engine.plan import Plan
from kai_ray.model.snapshot import compile_snapshot
from kai_ray.server.metrics import SchedulerMetrics

log = logging.getLogger(__name__)

DEFAULT_PERIOD_SECONDS = 1.0
CACHE_SYNC_TIMEOUT_SECONDS = 60.0
BIND_PASS_TIMEOUT_SECONDS = 30.0
EVENT_FLUSH_SECONDS = 5.0
DEFAULT_CONCURRENCY = 32
"""API calls in flight at once in each step (grouping, BindRequests, binding, status).

32 rather than the per-module 16: on a 2-core machine that also runs the API server the
end-to-end benchmark binds about a quarter more pods per second with it (docs/kubernetes.md)."""


@dataclass
class CycleOutcome:
    plan: Plan
    applied: ApplyResult
    bound: BindPassResult
    seconds: float
    problems: int = 0
    phases: dict[str, float] = field(default_factory=dict)
    """Seconds spent in each step, in cycle order: group, snapshot, report, plan, apply, bind, status."""


@dataclass
class KubeScheduler:
    api: Any
    config: SchedulerConfig = field(default_factory=SchedulerConfig)
    scheduler_name: str = "kai-scheduler"
    executor: Executor | None = None
    namespace: str | None = None
    metrics: SchedulerMetrics | None = None
    concurrency: int = DEFAULT_CONCURRENCY

    def __post_init__(self) -> None:
        self.cache = ClusterCache(self.api, scheduler_name=self.scheduler_name, namespace=self.namespace)
        # Events go out from a background writer (client-go's recorder does the same for KAI):
        # a burst of binds must not wait for the Events that announce them.
        self.events = EventWriter(self.api, component=self.scheduler_name, background=True)
        self.reporter = ProblemReporter(self.api, self.cache, self.events)
        self.status = StatusWriter(
            self.api, scheduler_name=self.scheduler_name, recorder=self.events, concurrency=self.concurrency
        )
        self.binder = Binder(
            self.api,
            namespace=self.namespace,
            recorder=self.events,
            concurrency=self.concurrency,
            lookup=self.cache.get,
        )

    def start(self) -> None:
        self.cache.start()
        if not self.cache.wait_synced(CACHE_SYNC_TIMEOUT_SECONDS):
            log.warning(
                "cluster cache not synced after %ss; scheduling from what it has", CACHE_SYNC_TIMEOUT_SECONDS
            )

    def stop(self) -> None:
        """Stop the cache and send the Events still queued (waiting at most a few seconds)."""
        self.cache.stop()
        if not self.events.close(EVENT_FLUSH_SECONDS):
            log.warning("stopped with Events still unsent")

    def run_cycle(self) -> CycleOutcome:
        """One full cycle. Never raises on bad cluster objects: they are reported and skipped."""
        started = time.perf_counter()
        phases = _PhaseClock(started)
        ensure_pod_groups(self.api, self.cache, self.events, concurrency=self.concurrency)
        phases.lap("group")
        state, problems = snapshot(self.cache)
        phases.lap("snapshot")
        reported = self.reporter.report(problems)
        phases.lap("report")
        session = open_session(compile_snapshot(state), self.config, self.executor)
        plan = run_actions(session)
        phases.lap("plan")
        cached = self.cache.contents(["Pod", "PodGroup"])
        pod_uids = _pod_uids(cached.objects["Pod"])
        applied = apply_plan(
            self.api,
            plan,
            scheduler_name=self.scheduler_name,
            recorder=self.events,
            pod_uids=pod_uids,
            concurrency=self.concurrency,
        )
        phases.lap("apply")
        bound = self.binder.bind_pending(timeout=BIND_PASS_TIMEOUT_SECONDS)
        phases.lap("bind")
        # From the cache, not a GET per PodGroup: the plan names every job, running ones too.
        self.status.write_podgroup_status(plan, _podgroup_refs(cached.objects["PodGroup"], pod_uids))
        self.status.write_queue_status(queue_usage_from_book(session.queues))
        phases.lap("status")
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
        return CycleOutcome(plan, applied, bound, seconds, reported, phases.laps)

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


class _PhaseClock:
    """Wall-clock seconds between consecutive `lap` calls, named by the step that just ended."""

    def __init__(self, started: float) -> None:
        self._last = started
        self.laps: dict[str, float] = {}

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.laps[name] = now - self._last
        self._last = now


def _pod_uids(pods: list[dict[str, Any]]) -> dict[tuple[str, str], str]:
    uids = {}
    for pod in pods:
        meta = pod.get("metadata") or {}
        uids[(meta.get("namespace", ""), meta.get("name", ""))] = meta.get("uid", "")
    return uids


def _podgroup_refs(
    podgroups: list[dict[str, Any]], pod_uids: dict[tuple[str, str], str]
) -> dict[str, PodGroupRef]:
    """Job key ("ns/name") → what the status writer needs, as the cache has it."""
    refs = {}
    for obj in podgroups:
        ref = PodGroupRef.from_object(obj, NODE_POOL_LABEL)
        refs[f"{ref.namespace}/{ref.name}"] = ref
    # Pod uids make the pods' Events show in `kubectl describe`; only pending pods get any.
    members: dict[str, dict[str, str]] = {}
    for (namespace, name), uid in pod_uids.items():
        members.setdefault(namespace, {})[name] = uid
    return {
        key: dataclasses.replace(ref, pod_uids=members.get(ref.namespace, {})) for key, ref in refs.items()
    }
