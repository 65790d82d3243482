"""The embedded simulated cluster behind `kai-ray serve --sim DIR` / `--sim-nodes N`.

It holds the cluster's objects in memory and is driven by the same loop as `kai-ray simulate`:
objects → `kai_ray.convert` → snapshot → the engine's actions → plan, applied to the objects
(pods run once bound; evicted pods are recreated pending).  Tests drive it by hand with
`run_cycle()` or wait for the background thread with `wait_for_cycle()`, never by sleeping.

When the background thread runs a cycle (`start()`), and why:
- **After a change** (a create, a delete, or a cycle that moved pods, up to `MAX_BACK_TO_BACK`
  in a row).  Changes that arrive while a cycle runs are batched into the next one, and cycles
  are spaced so that they take at most `cycle_share` of the wall clock while submits stream in:
  a cycle takes the one interpreter lock the API's handlers also need (a binding cycle at 4,000
  pods a few tenths of a second, more under load), and frequent cycles cut the submit rate for
  no better placement.  No wait is longer than KAI's own: it waits its 1 s `schedulePeriod`
  after each cycle (`MAX_SPACING`).  A tenth therefore means KAI's rhythm for every cycle over
  0.11 s, and a shorter wait than KAI's after a shorter cycle (a small cluster, a test).  On the
  500-node bench (median of five runs) a tenth gave ~530 submits/s, a quarter ~410 (a 0.1 s
  cycle then came every 0.4 s, not every 1 s), a half ~370-470.  The spacing holds only while
  changes keep coming: a burst's last changes get their cycle `QUIET_SECONDS` after it ends.
- **When a timer is due.**  On the same objects the engine decides the same, except where it
  reads the clock: a min-runtime protection or a preemption delay running out, a stale gang's
  grace period, a deleting pod turning stuck-in-releasing.  After each cycle the earliest such
  moment is computed from its state (`next_timer`), and the thread sleeps until then (checking
  the backend's clock every `period` seconds, so an injected clock works too).
- **At least every `max_idle` seconds** otherwise: a safety net for any rule reading the clock
  that `next_timer` does not know of.  Nothing else: an idle cluster is not re-converted.

Reads are copy-on-write: `view()` hands out the per-kind dicts themselves and marks them shared;
the next write to a shared kind copies that kind first.  A submit therefore copies the pod table
once (for its own write), not every kind for every read.

Locking: `_lock` guards the objects and is never held while the engine runs, so a submit never
waits for a cycle; `_cycle_lock` serialises cycles, and listeners are called under it (not under
`_lock`), so they see every cycle, in order.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from kai_ray.api import (
    ApiObject,
    Manifest,
    ManifestProblem,
    Pod,
    PodGroup,
    load_sourced_objects,
    read_manifest_documents,
)
from kai_ray.api.config import SchedulerConfig
from kai_ray.collector import collection_paused
from kai_ray.convert import cluster_from_manifest_set
from kai_ray.convert.common import epoch
from kai_ray.convert.pods import STUCK_IN_RELEASING_SECONDS
from kai_ray.distributed.executor import Executor
from kai_ray.engine.cycle import open_session, run_actions
from kai_ray.engine.minruntime import MinRuntime
from kai_ray.engine.session import Session
from kai_ray.engine.usage import UsageRecorder
from kai_ray.model.objects import ClusterState
from kai_ray.model.snapshot import compile_snapshot
from kai_ray.rpc.backend import (
    BackendView,
    CycleRecord,
    Grouper,
    Listener,
    NamespacedName,
    ObjectKey,
    object_key,
)
from kai_ray.rpc.errors import ErrorCode, ServiceError
from kai_ray.rpc.objects import WORKLOAD_LABEL, apply_plan, default_cluster_objects, manifest_set

__all__ = ["MAX_SPACING", "QUIET_SECONDS", "CycleTiming", "SimBackend", "SimSourceError", "next_timer"]

DEFAULT_PERIOD = 0.2
"""How often the idle background thread looks at the clock for a due timer (seconds)."""
DEFAULT_MAX_IDLE = 30.0
"""Wall seconds after which an idle cluster gets a cycle anyway (see the module docstring)."""
DEFAULT_CYCLE_SHARE = 0.1
"""While changes stream in, the share of wall time change-triggered cycles may take."""
MAX_SPACING = 1.0
"""The longest a change waits for the spacing: KAI's `schedulePeriod`, so the simulated cluster
never reacts later than KAI would (a long cycle may then take more than `cycle_share`)."""
QUIET_SECONDS = 0.1
"""No change for this long ends a burst: its last changes get a cycle now, not after the spacing."""
MAX_BACK_TO_BACK = 10
"""Cycles run back to back while each still changes something; then only timers start one."""
TIMINGS_KEPT = 10_000
_STUCK_MARGIN = 1e-3
"""Stuck-in-releasing flips strictly after its threshold; wake just past it."""
CLOSE_TIMEOUT_SECONDS = 5.0
"""How long `close` waits for a cycle in progress to end."""

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CycleTiming:
    """How long one cycle took (wall seconds): the engine's part, and all of it.

    `engine_seconds` covers conversion, snapshot and actions; `seconds` adds applying the plan
    and the listeners (the service re-deriving workload views), which share the same lock.
    """

    number: int
    pods: int
    binds: int
    engine_seconds: float
    seconds: float


class SimSourceError(Exception):
    """The manifest directory cannot be served: every problem, one line each (as `simulate`)."""

    def __init__(self, problems: list[ManifestProblem]) -> None:
        super().__init__("\n".join(str(p) for p in problems))
        self.problems = problems


class SimBackend:
    """An in-memory cluster that schedules itself.  Thread-safe."""

    answers_from_memory = True
    """No operation does I/O, and its locks are never held while the engine runs: the API may
    serve it from its event loop (`SchedulerServiceLike.answers_from_memory`)."""

    def __init__(
        self,
        objects: Iterable[ApiObject],
        config: SchedulerConfig | None = None,
        *,
        clock: Callable[[], float] = time.time,
        executor: Executor | None = None,
        period: float = DEFAULT_PERIOD,
        max_idle: float = DEFAULT_MAX_IDLE,
        cycle_share: float = DEFAULT_CYCLE_SHARE,
        source: str = "<sim>",
    ) -> None:
        if not 0 < cycle_share <= 1:
            raise ValueError(f"cycle_share must be in (0, 1], got {cycle_share}")
        self._config = config or SchedulerConfig()
        self._clock = clock
        usage_db = self._config.usage_db
        self._usage = None if usage_db is None else UsageRecorder(usage_db.params)
        """Time-based fair share's history, fed by this backend's own cycles (kept in memory)."""
        self._executor = executor
        self._period = period
        self._max_idle = max_idle
        self._cycle_share = cycle_share
        self._source = source
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._cycle_lock = threading.Lock()
        self._manifests: dict[ObjectKey, Manifest[ApiObject]] = {}
        self._kinds: dict[str, dict[NamespacedName, ApiObject]] = {}
        self._shared: set[str] = set()
        """Kinds whose dict a view holds: copied before the next write (copy-on-write)."""
        self._position = 0
        self._generation = 0
        self._cycles = 0
        self._last: CycleRecord | None = None
        self._listeners: list[Listener] = []
        self._dirty = True
        self._back_to_back = 0
        self._next_due: float | None = None
        self._running = False
        self._last_end = time.monotonic()
        self._last_change = self._last_end
        self._last_seconds = 0.0
        self._timings: deque[CycleTiming] = deque(maxlen=TIMINGS_KEPT)
        self._closed = False
        self._thread: threading.Thread | None = None
        for obj in objects:
            self._put(obj, source, 0)

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_nodes(cls, nodes: int, gpus_per_node: int = 8, **options: object) -> SimBackend:
        """N nodes × `gpus_per_node` GPUs, KAI's default queues and priority classes."""
        return cls(default_cluster_objects(nodes, gpus_per_node), source=f"<{nodes} nodes>", **options)  # type: ignore[arg-type]

    @classmethod
    def from_directory(
        cls, path: str | Path, grouper: Grouper | None = None, **options: object
    ) -> SimBackend:
        """What `kai-ray simulate PATH` reads: workloads expanded and grouped by `grouper` (the
        operators' podgrouper; without one, only PodGroups and pods written out are read).

        Raises SimSourceError with every problem, as `simulate` refuses broken manifests.  Each
        PodGroup the podgrouper made is labelled with its workload's name, so a RayJob is one
        workload, named as in the manifest, not `pg-...`.
        """
        documents, problems = read_manifest_documents(path)
        made_for: dict[tuple[str, str], tuple[str, str, str]] = {}
        if grouper is not None:
            prepared = grouper(documents)
            documents, made_for = prepared.documents, prepared.made_for
            problems = [*problems, *prepared.problems]
        loaded = load_sourced_objects(documents)
        errors = [p for p in [*problems, *loaded.problems] if not p.warning]
        if errors:
            raise SimSourceError(errors)
        objects: list[ApiObject] = []
        for manifest in loaded.manifests:
            obj = manifest.obj
            if isinstance(obj, PodGroup) and WORKLOAD_LABEL not in obj.metadata.labels:
                owner = made_for.get((obj.metadata.namespace or "", obj.metadata.name))
                if owner is not None:
                    labels = {**obj.metadata.labels, WORKLOAD_LABEL: owner[1]}
                    obj = obj.model_copy(
                        update={"metadata": obj.metadata.model_copy(update={"labels": labels})}
                    )
            objects.append(obj)
        return cls(objects, source=str(path), **options)  # type: ignore[arg-type]

    # ------------------------------------------------------------------ Backend protocol
    @property
    def config(self) -> SchedulerConfig:
        return self._config

    def now(self) -> float:
        return self._clock()

    def view(self) -> BackendView:
        """The objects as they are now; O(kinds), not O(objects) (copy-on-write)."""
        with self._lock:
            return BackendView(self._generation, self._share_kinds(), self._last, self._clock())

    def create(self, objects: Sequence[ApiObject]) -> None:
        keys = [object_key(obj) for obj in objects]
        with self._cond:
            taken = [key for key in keys if key in self._manifests]
            if taken or len(set(keys)) != len(keys):
                kind, namespace, name = taken[0] if taken else keys[0]
                raise ServiceError(
                    ErrorCode.ALREADY_EXISTS, f"{kind} {namespace}/{name} already exists", "name"
                )
            for obj in objects:
                self._put(obj, "<api>", 0)
            self._changed()
        self._notify(None)

    def delete(self, keys: Sequence[ObjectKey]) -> None:
        with self._cond:
            for key in keys:
                if self._manifests.pop(key, None) is not None:
                    self._writable(key[0]).pop((key[1], key[2]), None)
            self._changed()
        self._notify(None)

    def subscribe(self, listener: Listener) -> None:
        with self._lock:
            self._listeners.append(listener)

    # ------------------------------------------------------------------ the loop
    def run_cycle(self) -> CycleRecord:
        """One cycle now, on the objects as they are; the plan is applied before returning."""
        with self._cycle_lock:
            with self._lock:
                self._running = True
            try:
                with collection_paused():  # until the plan is applied: see `kai_ray.collector`
                    return self._cycle()
            finally:
                with self._cond:
                    self._running = False
                    self._cond.notify_all()

    def _cycle(self) -> CycleRecord:
        started = time.perf_counter()
        with self._lock:
            kinds = self._share_kinds()
            now = self._clock()
            self._dirty = False  # this cycle sees every change made so far
        seen_pods = kinds.get("Pod", {})
        state, problems = cluster_from_manifest_set(manifest_set(kinds, self._source), now=now)
        usage = None if self._usage is None else self._usage.usage(now)
        session = open_session(compile_snapshot(state), self._config, self._executor, usage=usage)
        plan = run_actions(session)
        if self._usage is not None:
            self._usage.record(session)
        engine_seconds = time.perf_counter() - started
        due = next_timer(state, session, self._config, seen_pods.values())
        with self._cond:
            pods = self._kinds.get("Pod", {})
            # Only pods that are still the objects the cycle saw: one deleted (and perhaps
            # recreated under the same name) meanwhile is left alone.
            current = {
                key: pod for key, pod in pods.items() if isinstance(pod, Pod) and seen_pods.get(key) is pod
            }
            changed = apply_plan(current, plan)
            for key in changed:
                self._put(current[key], "<api>", 0)
            self._next_due = due
            self._cycles += 1
            self._generation += 1
            record = CycleRecord(self._cycles, now, state, session, plan, problems)
            self._last = record
            moved = bool(plan.binds or plan.evictions or plan.pipelined)
            self._back_to_back = self._back_to_back + 1 if moved else 0
            if moved and self._back_to_back < MAX_BACK_TO_BACK:
                self._dirty = True
            self._cond.notify_all()
        self._notify(record)
        seconds = time.perf_counter() - started
        timing = CycleTiming(record.number, len(seen_pods), len(plan.binds), engine_seconds, seconds)
        with self._lock:
            self._timings.append(timing)
            self._last_seconds = seconds
            self._last_end = time.monotonic()
        return record

    def wait_idle(self, timeout: float = 60.0) -> CycleRecord:
        """Block until the background thread has nothing left to do: no change waits for a cycle,
        none runs, and the last one's follow-ups are done.  Returns the last cycle.

        Only a due timer would start another cycle; `kai-ray bench --grpc` uses this to time how
        long the cluster takes to settle after a burst of submits.
        """
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._dirty or self._running or self._last is None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(f"the simulated cluster did not settle within {timeout} s")
                self._cond.wait(remaining)
            return self._last

    def timings(self) -> list[CycleTiming]:
        """The last `TIMINGS_KEPT` cycles' durations, oldest first (for `kai-ray bench --grpc`)."""
        with self._lock:
            return list(self._timings)

    @property
    def next_due(self) -> float | None:
        """The backend-clock moment the next timer is due (None: none pending)."""
        with self._lock:
            return self._next_due

    def wait_for_cycle(self, after: int, timeout: float = 10.0) -> CycleRecord:
        """Block until a cycle numbered above `after` has run (by the background thread)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._cycles <= after:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(f"no cycle after {after} within {timeout} s")
                self._cond.wait(remaining)
            assert self._last is not None
            return self._last

    @property
    def cycles(self) -> int:
        with self._lock:
            return self._cycles

    def start(self) -> None:
        """Run cycles in a background thread until `close()`."""
        with self._lock:
            if self._thread is not None:
                return
            self._thread = threading.Thread(target=self._loop, name="kai-ray-sim", daemon=True)
        self._thread.start()

    def close(self, timeout: float = CLOSE_TIMEOUT_SECONDS) -> bool:
        """Stop the background thread; False (and a warning) when it is still in a cycle after
        `timeout` seconds: a daemon thread, it then ends with the process."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            thread = self._thread
        if thread is None:
            return True
        thread.join(timeout)
        if thread.is_alive():
            log.warning("the simulated cluster's cycle thread did not stop within %.0f s", timeout)
            return False
        return True

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._closed:
                    wait = self._until_next_cycle()
                    if wait <= 0:
                        break
                    self._cond.wait(wait)
                if self._closed:
                    return
                self._dirty = False
                self._running = True  # no gap in which `wait_idle` could see nothing to do
            self.run_cycle()

    def seconds_until_next_cycle(self) -> float:
        """What the background thread would do now: wait this many seconds before looking again
        (<= 0: run a cycle now).  For tests and diagnostics; see the module docstring."""
        with self._lock:
            return self._until_next_cycle()

    def _until_next_cycle(self) -> float:
        """Seconds the background thread should wait before the next cycle (<= 0: run now).

        Called under `_lock`.  A change waits for the spacing that keeps cycles within
        `cycle_share`, but only while changes keep coming: once none came for `QUIET_SECONDS` the
        burst is over and batching it further only delays it; otherwise a due timer or
        `max_idle` starts one, and the clock is looked at every `period` seconds.
        """
        now = time.monotonic()
        idle_for = now - self._last_end
        if self._dirty:
            spacing = min(self._last_seconds * (1.0 / self._cycle_share - 1.0), MAX_SPACING)
            return min(spacing - idle_for, QUIET_SECONDS - (now - self._last_change))
        if self._next_due is not None and self._clock() >= self._next_due:
            return 0.0
        if idle_for >= self._max_idle:
            return 0.0
        return min(self._period, self._max_idle - idle_for)

    # ------------------------------------------------------------------ internals
    def _put(self, obj: ApiObject, file: str, line: int) -> None:
        """Insert or replace; a replaced object keeps its place (its creation order)."""
        key = object_key(obj)
        previous = self._manifests.get(key)
        if previous is not None:
            self._manifests[key] = Manifest(previous.file, previous.line, previous.position, obj)
        else:
            self._manifests[key] = Manifest(file, line, self._position, obj)
            self._position += 1
        self._writable(key[0])[(key[1], key[2])] = obj

    def _share_kinds(self) -> dict[str, dict[NamespacedName, ApiObject]]:
        """The per-kind dicts as they are, for a reader; called under `_lock`.  They become
        shared: the next write to a kind copies its dict (`_writable`), so what the reader holds
        never changes under it."""
        self._shared.update(self._kinds)
        return dict(self._kinds)

    def _writable(self, kind: str) -> dict[NamespacedName, ApiObject]:
        """The kind's dict, safe to change: copied first if a view holds it (under `_lock`)."""
        by_name = self._kinds.get(kind)
        if by_name is None:
            by_name = self._kinds[kind] = {}
        elif kind in self._shared:
            by_name = self._kinds[kind] = dict(by_name)
            self._shared.discard(kind)
        return by_name

    def _changed(self) -> None:
        self._generation += 1
        self._back_to_back = 0
        self._last_change = time.monotonic()
        if not self._dirty:
            # Only the first change since a cycle started tells the background thread anything
            # (a cycle is now due, after the spacing); waking it for each of a burst's submits
            # cost every submit a thread switch, a third of its time.  No other waiter waits for
            # a change: `wait_idle` and `wait_for_cycle` wait for cycles.
            self._dirty = True
            self._cond.notify_all()

    def _notify(self, record: CycleRecord | None) -> None:
        with self._lock:
            listeners = list(self._listeners)
        for listener in listeners:
            listener(record)


def next_timer(
    state: ClusterState, session: Session, config: SchedulerConfig, pods: Iterable[ApiObject]
) -> float | None:
    """The earliest moment after `state.now` at which a cycle on unchanged objects could decide
    differently, because a rule that reads the clock flips; None when no such rule is pending.

    Conservative: it may name a moment at which nothing flips (a min-runtime is tried with every
    runtime configured anywhere, not only the one the engine would pick), never a late one.
    The rules, as the engine and the conversion read the clock:
    - a job's preemption delay (`victim_action.in_preemption_delay`);
    - a running job's min-runtime protection (`engine.minruntime`), when the plugin is on;
    - a stale gang's grace period (`stale_gang`), from the session's `stale_since`;
    - a deleting pod becoming stuck-in-releasing (`convert.pods.task_status`).
    """
    now = state.now
    dues: list[float] = []
    min_runtime = MinRuntime(session)
    runtimes: set[float] = set()
    if min_runtime.enabled:
        runtimes = {min_runtime.default_preempt, min_runtime.default_reclaim}
        for queue in state.queues:
            runtimes.update(
                max(value, 0.0)
                for value in (queue.preempt_min_runtime, queue.reclaim_min_runtime)
                if value is not None
            )
    for spec in state.jobs:
        delay = spec.preemption_delay
        if delay and delay > 0:
            dues.append(max(spec.created, spec.last_eviction or spec.created) + delay)
        if spec.last_start is not None:
            dues.extend(spec.last_start + runtime for runtime in runtimes)
    for job in session.jobs:
        since = session.stale_since.get(job.name)
        if since is None:
            continue
        grace = job.spec.staleness_grace
        if grace is None:
            grace = config.default_staleness_grace_seconds
        if grace >= 0:
            dues.append(since + grace)
    for pod in pods:
        if isinstance(pod, Pod) and pod.metadata.deletion_timestamp is not None:
            deleted = epoch(pod.metadata.deletion_timestamp)
            if deleted is not None:
                dues.append(deleted + STUCK_IN_RELEASING_SECONDS + _STUCK_MARGIN)
    return min((due for due in dues if due > now), default=None)
