"""The Kubernetes scheduling loop: cache → snapshot → plan → BindRequests → binder → status.

A thin shell around the engine: every decision is the engine's, made from
the informer cache's snapshot; this module only moves data in and out, in
a fixed order per cycle.  Only the leader schedules: with a `LeaderElector`
the loop waits for the lease, and every write goes through the fenced API
client, so a replica whose lease lapsed stops writing at once.  The loop then
waits: when the lease is renewed (an outage it rode out) it cycles on; when
another replica took it, `run` returns `RunOutcome.LOST_LEADERSHIP` (serve
then exits non-zero, as KAI does).

What the loop remembers about objects (Event dedupe, written conditions,
binder state, metric series) is pruned every cycle to what the cache still
holds, so memory follows the cluster's size, not its history.
"""

from __future__ import annotations

import enum
import functools
import logging
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kai_ray.api import ManifestProblem
from kai_ray.api.config import SchedulerConfig
from kai_ray.api.constants import NODE_POOL_LABEL
from kai_ray.cluster.kube.announce import BURST_PODGROUPS, announce_binds
from kai_ray.cluster.kube.apply import ApplyResult, BlockedEviction, apply_plan, delayed_claims, pod_key
from kai_ray.cluster.kube.bind_mode import BindMode
from kai_ray.cluster.kube.bind_request_cleanup import CleanupResult, delete_stale_bind_requests
from kai_ray.cluster.kube.binder import Binder, BindPassResult
from kai_ray.cluster.kube.cache import ClusterCache
from kai_ray.cluster.kube.calls import OperationError, api_error_message, split_job_key
from kai_ray.cluster.kube.events import EventWriter
from kai_ray.cluster.kube.failures import API_FAILURES
from kai_ray.cluster.kube.fence import NotLeader
from kai_ray.cluster.kube.grouping import PodGrouper
from kai_ray.cluster.kube.known import KnownObjects
from kai_ray.cluster.kube.leader import LeaderElector, Standing
from kai_ray.cluster.kube.planner import CycleListener, CyclePlanner, PlannedCycle
from kai_ray.cluster.kube.queue_usage import queue_usage_from_book
from kai_ray.cluster.kube.reporting import ProblemReporter
from kai_ray.cluster.kube.status import PodGroupRef, StatusWriter
from kai_ray.collector import collection_paused
from kai_ray.distributed.executor import CountsShardFaults, Executor
from kai_ray.engine.plan import Plan
from kai_ray.engine.reasons import PendingCause, PendingReason
from kai_ray.engine.session import Session
from kai_ray.gc_tuning import freeze_what_lives
from kai_ray.model.objects import ClusterState
from kai_ray.server.endpoints import Health
from kai_ray.server.grouping_passes import GroupingPasses
from kai_ray.server.memory import ShrinkTrimmer
from kai_ray.server.metrics import SchedulerMetrics, evicted_podgroups
from kai_ray.server.usage_source import usage_source

log = logging.getLogger(__name__)

DEFAULT_PERIOD_SECONDS = 1.0
DEFAULT_IDLE_PERIOD_SECONDS = 10.0
DEFAULT_MIN_PERIOD_SECONDS = 0.1
_STOP_CHECK_SECONDS = 0.5
CACHE_SYNC_TIMEOUT_SECONDS = 60.0
BIND_PASS_TIMEOUT_SECONDS = 8.0
"""A bind pass never outlasts this, well inside the 15 s lease; what it did not start waits a cycle."""
STATUS_JOBS_PER_CYCLE = 200
"""Jobs one cycle writes conditions, pod marks and Events for at most; the rest wait for the next
cycles, so a burst of jobs turned pending never holds up the binds of the cycles after it."""
EVENT_FLUSH_SECONDS = 2.0
DEFAULT_BIND_BACKOFF_LIMIT = 3
"""Attempts the binder makes per BindRequest (1 s, 2 s apart) before the pod is scheduled anew."""
DEFAULT_CONCURRENCY = 32
"""API calls in flight at once in each step (grouping, BindRequests, binding, status).

32 rather than the per-module 16: on a 2-core machine that also runs the API server the
end-to-end benchmark binds about a quarter more pods per second with it (docs/kubernetes.md)."""


@dataclass(frozen=True)
class CyclePacing:
    """When the next cycle starts, measured from the end of the last one.

    Why not KAI's fixed 1 s period: a cycle on a large cluster costs what changed, and one that
    finds nothing changed costs nothing at all, so a settled cluster is not looked at again
    until something happens, and something that happens is looked at at once.
    """

    period: float = DEFAULT_PERIOD_SECONDS
    """The longest wait while work may be due (pending jobs, binds under way, retries)."""
    idle_period: float = DEFAULT_IDLE_PERIOD_SECONDS
    """The longest wait after a settled cycle when the cache does not change: what bounds how
    late a decision that only the clock changes is made (a grace period running out)."""
    min_period: float = DEFAULT_MIN_PERIOD_SECONDS
    """The shortest wait, however busy the cluster: cycles never run back to back."""

    def wait(self, cache: ClusterCache, seen: int, settled: bool, stop: threading.Event) -> None:
        """Return when the next cycle is due: the cache changed since generation `seen` (after
        at least `min_period`), or the period for a settled or unsettled cluster ran out, or
        `stop` was set."""
        started = time.monotonic()
        if stop.wait(self.min_period):
            return
        deadline = started + max(self.min_period, self.idle_period if settled else self.period)
        while not stop.is_set():
            left = deadline - time.monotonic()
            if left <= 0 or cache.wait_changed(seen, min(left, _STOP_CHECK_SECONDS)) != seen:
                return


class RunOutcome(enum.Enum):
    STOPPED = "stopped"
    """Asked to stop (SIGTERM); the lease was given up if this replica still led."""
    LOST_LEADERSHIP = "lost leadership"
    """Another replica took the lease; every write was fenced since it could not be renewed."""


@dataclass
class CycleOutcome:
    plan: Plan
    cleaned: CleanupResult
    applied: ApplyResult
    bound: BindPassResult
    seconds: float
    problems: int = 0
    phases: dict[str, float] = field(default_factory=dict)
    """Seconds spent in each step, in cycle order: cleanup, group, snapshot, report, plan, apply,
    bind, status."""
    waiting: bool = False
    """Work was left for a later pass whatever the cluster does (a bind retry after its backoff,
    status writes beyond `STATUS_JOBS_PER_CYCLE`)."""

    @property
    def settled(self) -> bool:
        """Nothing done, nothing failed, nothing pending: the next cycle would decide the same
        unless the cluster changes (or, rarely, time runs out on a grace period)."""
        return self.unsettled_by is None

    @property
    def unsettled_by(self) -> str | None:
        """The first thing that keeps the cycle from being settled, for logs; None if it is."""
        plan, applied, bound = self.plan, self.applied, self.bound
        reasons = (
            ("placed pods", plan.binds or plan.pipelined),
            ("evictions", plan.evictions),
            ("pending jobs", plan.pending_reasons),
            ("writes", applied.bind_requests or applied.bound or applied.evicted or self.cleaned.deleted),
            ("API errors", applied.errors or self.cleaned.errors or bound.errors),
            ("binds under way", bound.outcomes or bound.timed_out or self.waiting),
        )
        return next((name for name, present in reasons if present), None)


@dataclass
class KubeScheduler:
    api: Any
    config: SchedulerConfig = field(default_factory=SchedulerConfig)
    scheduler_name: str = "kai-scheduler"
    executor: Executor | None = None
    namespace: str | None = None
    metrics: SchedulerMetrics | None = None
    concurrency: int = DEFAULT_CONCURRENCY
    bind_backoff_limit: int | None = DEFAULT_BIND_BACKOFF_LIMIT
    health: Health | None = None
    """Told when the cache has listed everything (readiness), and when it has not yet."""
    bind_mode: BindMode = BindMode.BIND_REQUEST
    """KAI's BindRequests for the binder (default), or binding pods directly (fewer writes)."""
    grouper: PodGrouper | None = None
    """Gives our pods their PodGroups (the operators' podgrouper), in passes beside the cycles
    while the loop runs (`grouping`); None when another process does (`kai-ray podgrouper`, KAI's
    own) and the loop only schedules PodGroups it finds."""
    usage_namespace: str = "default"
    """Where the recorded queue usage is kept (serve's lease namespace), with time-based fair share."""

    def __post_init__(self) -> None:
        self.cache = ClusterCache(self.api, scheduler_name=self.scheduler_name, namespace=self.namespace)
        # Events go out from a background writer (client-go's recorder does the same for KAI):
        # a burst of binds must not wait for the Events that announce them.
        self.events = EventWriter(self.api, component=self.scheduler_name, background=True)
        if self.metrics is not None:
            self.metrics.count_dropped_events(lambda: self.events.dropped)
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
            requests=functools.partial(self.cache.objects, "BindRequest"),
        )
        self.planner = CyclePlanner(self.config, self.executor, self.scheduler_name)
        """Reads the cache and decides; remembers the cache's objects between cycles."""
        self.grouping = (
            None
            if self.grouper is None
            else GroupingPasses(
                self.grouper,
                self.cache,
                self.events,
                observe=None if self.metrics is None else self.metrics.grouping.observe,
            )
        )
        """The grouper's passes: on their own thread while `cycle_until` runs, else one per cycle."""
        self.usage = usage_source(self.config, self.api, self.usage_namespace, self.scheduler_name)
        """Queue usage for time-based fair share (None: off), fed by every cycle this replica runs."""
        self.known = KnownObjects(NODE_POOL_LABEL)
        """Pod uids, PodGroups' stored status and queue names, from the cache's changes."""
        self.memory = ShrinkTrimmer()
        """Gives memory back once the cache shrank a lot (a burst deleted)."""
        self._stop: threading.Event | None = None
        self._elector: LeaderElector | None = None
        self._cycle_listeners: list[CycleListener] = []
        self._cycles = 0
        self._listeners_lock = threading.Lock()

    def add_cycle_listener(self, listener: CycleListener) -> None:
        """Call `listener` with every cycle that runs to its end, on the loop's thread.

        A listener must return quickly (hand the record to its own thread): the next cycle
        waits for it.  One that raises is logged and does not disturb scheduling.
        """
        with self._listeners_lock:
            self._cycle_listeners.append(listener)
        self.planner.share_sessions()

    def start(self, stop: threading.Event | None = None) -> bool:
        """Start the cache and wait for its first full list; False if `stop` was set meanwhile.

        After `CACHE_SYNC_TIMEOUT_SECONDS` it schedules from what it has (a kind the API
        server cannot list must not keep everything else from being scheduled).
        """
        self.cache.start()
        synced = self.cache.sync_or_stop(stop, CACHE_SYNC_TIMEOUT_SECONDS)
        if synced and self.health is not None:
            self.health.mark_ready()
        return synced

    def warm_up(self) -> None:
        """Read the whole cache into the cluster model once, and keep the collector off it
        (`freeze_what_lives`): the first cycle then reads only what changed since."""
        self.planner.read(self.cache, time.time())
        freeze_what_lives()

    def stop(self) -> None:
        """Stop grouping and the cache, and send the Events still queued (waiting at most a few
        seconds)."""
        if self.grouping is not None:
            self.grouping.stop()
        self.cache.stop()
        if not self.events.close(EVENT_FLUSH_SECONDS):
            log.warning("stopped with Events still unsent")

    def run_cycle(self) -> CycleOutcome:
        """One full cycle. Never raises on bad cluster objects: they are reported and skipped.

        No automatic collection until the plan is applied and published (`kai_ray.collector`):
        the binds go out first, the cycle's garbage is collected while the loop waits, and memory
        is given back after a cycle that finds the cache much smaller (`ShrinkTrimmer`)."""
        with collection_paused():
            outcome = self._run_cycle()
        self.memory.after_cycle(sum(self.cache.sizes().values()))
        return outcome

    def _run_cycle(self) -> CycleOutcome:
        started = time.perf_counter()
        phases = _PhaseClock(started)
        cleaned = delete_stale_bind_requests(self.api, self.cache, concurrency=self.concurrency)
        phases.lap("cleanup")
        if self.grouping is not None and not self.grouping.running:
            self.grouping.run_pass()  # a cycle run on its own (tests, benchmarks) groups first
        phases.lap("group")
        state, problems = self.planner.read(self.cache, time.time())
        phases.lap("snapshot")
        reported = self.reporter.report(problems)
        phases.lap("report")
        session, plan = self.planner.decide(
            state, None if self.usage is None else self.usage.usage(state.now)
        )
        if self.usage is not None:
            self.usage.after_cycle(session)
        phases.lap("plan")
        known = self.known.refresh(self.cache)
        pod_uids, refs = known.pod_uids, known.podgroup_refs()
        direct = self.bind_mode is BindMode.DIRECT
        applied = apply_plan(
            self.api,
            plan,
            scheduler_name=self.scheduler_name,
            recorder=self.events,
            pod_uids=pod_uids,
            concurrency=self.concurrency,
            backoff_limit=self.bind_backoff_limit,
            scheduled_events=not direct,
            direct=self.binder if direct else None,
            observe=self.cache.observe,
            claims=delayed_claims(state, plan.binds),
            lookup=self.cache.get,
        )
        if direct:
            self._bound_directly(state, plan, applied, pod_uids, refs)
        phases.lap("apply")
        bound = BindPassResult() if direct else self._bind()
        phases.lap("bind")
        blocked = _blocked_reasons(applied.blocked)
        # From the cache, not a GET per PodGroup: the plan names every job, running ones too.
        written = self.status.write_podgroup_status(plan, refs, blocked, STATUS_JOBS_PER_CYCLE)
        queues = self.status.write_queue_status(queue_usage_from_book(session.queues))
        phases.lap("status")
        self._forget_what_is_gone(known)
        seconds = time.perf_counter() - started
        self._report(plan, cleaned, applied, bound, [*written.errors, *queues.errors], seconds)
        if self.metrics is not None:
            self._observe(session, plan, applied, bound, refs, known.display_names, phases.laps, seconds)
        self._publish(state, session, plan, problems)
        waiting = self.binder.retries_waiting() or written.left > 0
        return CycleOutcome(plan, cleaned, applied, bound, seconds, reported, phases.laps, waiting)

    def _bound_directly(
        self,
        state: ClusterState,
        plan: Plan,
        applied: ApplyResult,
        pod_uids: Mapping[tuple[str, str], str],
        refs: Mapping[str, PodGroupRef],
    ) -> None:
        """What follows direct binds: the pods count as bound until the watch shows them so, and
        the binds are announced per PodGroup (per queue in a burst)."""
        done = set(applied.bound)
        if not done:
            return
        assumed = {}
        for bind in plan.binds:
            if pod_key(bind) in done:
                namespace, _ = split_job_key(bind.job)
                pod = (namespace, bind.task)
                assumed[pod] = (bind.node, pod_uids.get(pod, ""))
        self.planner.assume_bound(assumed)
        jobs = {bind.job for bind in plan.binds if pod_key(bind) in done}
        queue_of = (
            {job.key: job.queue for job in state.jobs if job.key in jobs}
            if len(jobs) > BURST_PODGROUPS
            else {}
        )
        announce_binds(self.events, plan, done, refs, queue_of)

    def _publish(
        self, state: ClusterState, session: Session, plan: Plan, problems: list[ManifestProblem]
    ) -> None:
        with self._listeners_lock:
            self._cycles += 1
            record = PlannedCycle(self._cycles, state, session, plan, problems)
            listeners = list(self._cycle_listeners)
        for listener in listeners:
            try:
                listener(record)
            except Exception:
                log.exception("a cycle listener failed; scheduling goes on")

    def run(
        self,
        stop: threading.Event,
        period: float = DEFAULT_PERIOD_SECONDS,
        elector: LeaderElector | None = None,
        pacing: CyclePacing | None = None,
    ) -> RunOutcome:
        """Cycle until `stop` is set or leadership is lost.

        Waits are measured from the end of one cycle, as KAI does, and paced by `pacing`
        (default: `period` between cycles while work may be due, a change in the cache wakes
        the loop early, a settled cluster that does not change is looked at every
        `idle_period`).  With an elector, nothing is scheduled before the lease is held, and
        the lease is renewed on the elector's own thread, so a long cycle never lets it lapse.
        """
        pacing = pacing or CyclePacing(period=period)
        if not self.start(stop):
            self.stop()
            return RunOutcome.STOPPED
        self.warm_up()
        self._stop, self._elector = stop, elector
        outcome = RunOutcome.STOPPED
        try:
            if elector is not None and not elector.lead(stop):
                return outcome
            if self.metrics is not None:
                self.metrics.set_leader(True)
            outcome = self.cycle_until(stop, pacing, elector)
        finally:
            if self.usage is not None:
                self.usage.close()
            if self.metrics is not None:
                self.metrics.set_leader(False)
            if elector is not None and outcome is RunOutcome.STOPPED:
                elector.release()
            self.stop()
        return outcome

    def cycle_until(
        self, stop: threading.Event, pacing: CyclePacing, elector: LeaderElector | None = None
    ) -> RunOutcome:
        """The loop of `run` on a started cache: cycles paced by `pacing` until `stop` is set or
        (with an elector) leadership is lost.  While the lease is not renewed no cycle runs (it
        could write nothing); the next one after a renewal plans from the cache as it is then.
        The grouper's passes run on their own thread meanwhile, under the same rule: a cycle never
        waits for grouping, it schedules what is grouped by then."""
        if self.grouping is not None:
            self.grouping.start(None if elector is None else elector.leadership.is_leader)
        try:
            while not stop.is_set():
                if elector is not None and not elector.leadership.is_leader():
                    standing = self._wait_to_lead(elector, stop)
                    if standing is not Standing.LEADING:
                        return RunOutcome.LOST_LEADERSHIP if standing is Standing.LOST else RunOutcome.STOPPED
                seen = self.cache.generation
                outcome = self._guarded_cycle()
                pacing.wait(self.cache, seen, outcome is not None and outcome.settled, stop)
            return RunOutcome.STOPPED
        finally:
            if self.grouping is not None:
                self.grouping.stop()

    def _wait_to_lead(self, elector: LeaderElector, stop: threading.Event) -> Standing:
        if self.metrics is not None:
            self.metrics.set_leader(False)
        standing = elector.wait_to_lead(stop)
        if self.metrics is not None and standing is Standing.LEADING:
            self.metrics.set_leader(True)
        return standing

    @property
    def cycles_run(self) -> int:
        """Cycles that ran to their end so far."""
        with self._listeners_lock:
            return self._cycles

    def _bind(self) -> BindPassResult:
        """Bind passes of at most `BIND_PASS_TIMEOUT_SECONDS` each, until none runs out of time.

        A pass that runs out of time leaves what it did not start; the next pass starts at
        once rather than a cycle later, which would plan again from a fresh snapshot for
        nothing, as long as this replica may still act (not stopping, still leading).
        """
        result = self.binder.bind_pending(timeout=BIND_PASS_TIMEOUT_SECONDS)
        while result.timed_out and self._may_act():
            more = self.binder.bind_pending(timeout=BIND_PASS_TIMEOUT_SECONDS)
            result = BindPassResult(
                [*result.outcomes, *more.outcomes], [*result.errors, *more.errors], more.timed_out
            )
        return result

    def _may_act(self) -> bool:
        if self._stop is not None and self._stop.is_set():
            return False
        return self._elector is None or self._elector.leadership.is_leader()

    def _guarded_cycle(self) -> CycleOutcome | None:
        """The cycle's outcome, or None when it failed (logged here)."""
        try:
            return self.run_cycle()
        except NotLeader:
            log.error("cycle stopped: writes are fenced, the lease was not renewed in time")
        except API_FAILURES as error:  # the server went away mid-cycle: one line, no traceback
            reason = api_error_message(error)
            log.warning("cycle failed, the next one starts from a fresh snapshot: %s", reason)
        except Exception:
            log.exception("scheduling cycle failed; the next cycle starts from a fresh snapshot")
        return None

    # ---------------------------------------------------------------- after the cycle
    def _forget_what_is_gone(self, known: KnownObjects) -> None:
        pods, queues = known.pod_uids.keys(), known.queue_names()
        self.events.forget(known)
        self.status.forget(pods, queues)
        if self.metrics is not None:
            self.metrics.forget_podgroups(known.podgroups.keys())

    def tracked(self) -> dict[str, int]:
        """How much the loop remembers per object, by memory: the bounded-memory evidence."""
        sizes = {"event_dedupe": self.events.tracked(), **self.status.tracked(), **self.binder.tracked()}
        sizes.update(self.reporter.tracked())
        if self.grouper is not None:
            sizes.update(self.grouper.tracked())
        sizes.update({f"cache_{kind}": count for kind, count in self.cache.sizes().items()})
        return sizes

    def _report(
        self,
        plan: Plan,
        cleaned: CleanupResult,
        applied: ApplyResult,
        bound: BindPassResult,
        status_errors: list[OperationError],
        seconds: float,
    ) -> None:
        errors = [*cleaned.errors, *applied.errors, *status_errors]
        for error in errors:
            # One line per kind of failure (operation, object kind, status), not per object.
            kind = (error.operation, error.object.split(" ", 1)[0], error.message.split(":", 1)[0])
            log.warning("%s", error, extra={"repeat_key": kind})
        for item in applied.blocked:
            log.warning(
                "eviction of pod %s refused by a PodDisruptionBudget: %s",
                item.pod,
                item.message,
                extra={"repeat_key": ("blocked", item.message)},
            )
        for request, reason in bound.failed:
            log.warning("binding %s failed: %s", request, reason, extra={"repeat_key": ("bind", reason[:40])})
        log.info(
            "cycle: %d placed, %d bind requests, %d bound, %d bind failures, %d pipelined, %d evicted, "
            "%d evictions blocked, %d pending jobs, %d API errors, %.3fs",
            len(plan.binds),
            len(applied.bind_requests),
            len(bound.succeeded) + len(applied.bound),
            len(bound.failed),
            len(plan.pipelined),
            len(applied.evicted),
            len(applied.blocked),
            len(plan.pending_reasons),
            len(errors) + len(bound.errors),
            seconds,
        )

    def _observe(
        self,
        session: Any,
        plan: Plan,
        applied: ApplyResult,
        bound: BindPassResult,
        refs: Mapping[str, PodGroupRef],
        display_names: Mapping[str, str],
        phases: Mapping[str, float],
        seconds: float,
    ) -> None:
        metrics = self.metrics
        assert metrics is not None
        metrics.observe_cycle(
            seconds=seconds,
            open_session_seconds=phases.get("snapshot", 0.0) + phases.get("report", 0.0),
            close_session_seconds=phases.get("status", 0.0),
            action_seconds=session.action_seconds,
            plan=plan,
            queues=session.queues,
            display_names=display_names,
        )
        for outcome in [*bound.outcomes, *applied.bind_outcomes]:
            metrics.observe_bind(outcome.phase == "Succeeded", outcome.seconds)
        metrics.observe_evictions(evicted_podgroups(plan, applied, refs))
        metrics.observe_blocked_evictions(len(applied.blocked))
        if isinstance(self.executor, CountsShardFaults):
            metrics.observe_shard_faults(self.executor.faults)
        metrics.set_tracked(self.tracked())


def _blocked_reasons(blocked: Iterable[BlockedEviction]) -> dict[str, PendingReason]:
    """Per job that needed the room: which evictions were refused, and the budgets' words."""
    by_job: dict[str, list[str]] = {}
    for item in blocked:
        preemptor = item.eviction.reason.preemptor
        if preemptor is not None:
            by_job.setdefault(preemptor, []).append(f"eviction of pod {item.pod} was refused: {item.message}")
    return {
        job: PendingReason(PendingCause.EVICTION_BLOCKED, "; ".join(sorted(set(messages))))
        for job, messages in by_job.items()
    }


class _PhaseClock:
    """Wall-clock seconds between consecutive `lap` calls, named by the step that just ended."""

    def __init__(self, started: float) -> None:
        self._last = started
        self.laps: dict[str, float] = {}

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.laps[name] = now - self._last
        self._last = now
