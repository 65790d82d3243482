"""Prometheus metrics of the scheduling loop, under KAI's metric names and prefix (spec §14).

Dashboards and alerts written for KAI keep working against kai-ray: every name KAI has is
exposed exactly as KAI's Go client exposes it, `<namespace>_<name>` with KAI's default
`--metrics-namespace` of `kai`.  What KAI has no metric for is named `ray_…` under the same
prefix, so it can never collide with a name KAI adds later.
"""

from __future__ import annotations

import threading
from collections import Counter as Tally
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.metrics_core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from kai_ray.cluster.kube.apply import ApplyResult, pod_key
from kai_ray.cluster.kube.grouping import GroupingResult
from kai_ray.cluster.kube.status import PodGroupRef
from kai_ray.engine.plan import Plan
from kai_ray.engine.queues import QueueBook
from kai_ray.model.objects import UNLIMITED

__all__ = [
    "LATENCY_BUCKETS_MS",
    "DroppedEvents",
    "EvictedPodGroup",
    "GroupingMetrics",
    "SchedulerMetrics",
    "evicted_podgroups",
]

LATENCY_BUCKETS_MS = tuple(5.0 * 2**k for k in range(10))
"""KAI's `prometheus.ExponentialBuckets(5, 2, 10)`: 5 ms … 2560 ms."""

QUEUE_LABELS = ("queue_name", "queue_metadata_name", "queue_display_name")
EVICTION_LABELS = ("podgroup", "namespace", "uid", "nodepool", "action")

MILLICORES_PER_CORE = 1000.0
BYTES_PER_GB = 1e9


@dataclass(frozen=True)
class EvictedPodGroup:
    """Pods of one PodGroup evicted by one action: one increment of `pod_group_evicted_pods_total`."""

    namespace: str
    name: str
    uid: str
    nodepool: str
    action: str
    pods: int


class SchedulerMetrics:
    """The scheduler's metrics, in a registry of their own.

    Its own registry (not prometheus_client's global one) lets tests, and several schedulers in
    one process, each see only their own series.  Every method may be called from any thread:
    prometheus_client's metrics are thread-safe one by one, and the lock makes the compound
    updates (set some series, remove the stale ones) atomic with respect to each other.
    """

    def __init__(self, namespace: str = "kai") -> None:
        self.registry = CollectorRegistry()
        self._namespace = namespace
        self._lock = threading.Lock()
        self._queue_series: set[tuple[str, str, str]] = set()
        self._evicted_series: set[tuple[str, str, str, str, str]] = set()
        self._tracked_keys: set[str] = set()

        def gauge(name: str, documentation: str, labels: Iterable[str] = ()) -> Gauge:
            return Gauge(name, documentation, labels, namespace=namespace, registry=self.registry)

        self.cycle_latency = gauge("e2e_scheduling_latency_milliseconds", "Duration of the last full cycle.")
        self.open_session_latency = gauge(
            "open_session_latency_milliseconds", "Duration of the last session open."
        )
        self.close_session_latency = gauge(
            "close_session_latency_milliseconds", "Duration of the last session close."
        )
        self.action_latency = gauge(
            "action_scheduling_latency_milliseconds", "Duration of each action in the last cycle.", ["action"]
        )
        self.fair_share_gpu = gauge("queue_fair_share_gpu", "GPU fair share of the queue.", QUEUE_LABELS)
        self.fair_share_cpu = gauge(
            "queue_fair_share_cpu_cores", "CPU fair share of the queue, in cores.", QUEUE_LABELS
        )
        self.fair_share_memory = gauge(
            "queue_fair_share_memory_gb", "Memory fair share of the queue, in GB (10^9 bytes).", QUEUE_LABELS
        )
        self.queue_info = gauge("queue_info", "1 for every existing queue.", QUEUE_LABELS)
        self.queue_deserved_gpus = gauge("queue_deserved_gpus", "GPU quota of the queue.", QUEUE_LABELS)
        self.queue_quota_cpu = gauge(
            "queue_quota_cpu_cores", "CPU quota of the queue, in cores (-1: unlimited).", QUEUE_LABELS
        )
        self.queue_quota_memory = gauge(
            "queue_quota_memory_bytes", "Memory quota of the queue, in bytes (-1: unlimited).", QUEUE_LABELS
        )
        self.queue_allocated_gpus = gauge(
            "queue_allocated_gpus", "GPUs allocated to the queue.", QUEUE_LABELS
        )
        self.queue_allocated_cpu = gauge(
            "queue_allocated_cpu_cores", "CPU allocated to the queue, in cores.", QUEUE_LABELS
        )
        self.queue_allocated_memory = gauge(
            "queue_allocated_memory_bytes", "Memory allocated to the queue, in bytes.", QUEUE_LABELS
        )
        self._queue_gauges = (
            self.fair_share_gpu,
            self.fair_share_cpu,
            self.fair_share_memory,
            self.queue_info,
            self.queue_deserved_gpus,
            self.queue_quota_cpu,
            self.queue_quota_memory,
            self.queue_allocated_gpus,
            self.queue_allocated_cpu,
            self.queue_allocated_memory,
        )
        self.tracked = gauge(
            "ray_tracked_objects", "Objects held in the scheduler's memory, by kind.", ["memory"]
        )
        self.leader = gauge("ray_leader", "1 while this replica holds the leader lease.")

        self.scheduled = _PlainCounter(
            _full_name(namespace, "podgroups_scheduled_by_action"),
            "PodGroups that had pods bound or pipelined, by the action that placed them.",
            "action",
        )
        self.registry.register(self.scheduled)

        # Counters and histograms live in an inner registry, exposed through a filter that drops
        # their `_created` series: KAI's Go client exposes none, and turning them off with
        # `disable_created_metrics()` would change every registry of the process, Ray's included.
        self.grouping = GroupingMetrics(self.registry, namespace)
        stamped = CollectorRegistry()
        self.registry.register(_WithoutCreated(stamped))
        self.evicted = Counter(
            "pod_group_evicted_pods_total",
            "Pods evicted, by PodGroup and the action that evicted them.",
            EVICTION_LABELS,
            namespace=namespace,
            registry=stamped,
        )
        self.bound = Counter(
            "ray_pods_bound_total", "Pods bound to a node.", namespace=namespace, registry=stamped
        )
        self.bind_failures = Counter(
            "ray_bind_failures_total", "Bind attempts that failed.", namespace=namespace, registry=stamped
        )
        self.bind_latency = Histogram(
            "task_bind_latency_milliseconds",
            "Duration of each bind attempt.",
            namespace=namespace,
            buckets=LATENCY_BUCKETS_MS,
            registry=stamped,
        )
        self.evictions_blocked = Counter(
            "ray_evictions_blocked_total",
            "Evictions a PodDisruptionBudget refused.",
            namespace=namespace,
            registry=stamped,
        )
        self.shard_faults = Counter(
            "ray_node_shard_faults_total",
            "Node shard replies left out of a batch (their rows ranked in-process), by fault.",
            ["fault"],
            namespace=namespace,
            registry=stamped,
        )
        self._shard_faults_seen: dict[str, int] = {}

    # ------------------------------------------------------------------ observations
    def observe_cycle(
        self,
        *,
        seconds: float,
        open_session_seconds: float,
        close_session_seconds: float,
        action_seconds: Mapping[str, float],
        plan: Plan,
        queues: QueueBook,
        display_names: Mapping[str, str],
    ) -> None:
        """Record one scheduling cycle: latencies, PodGroups placed per action, every queue's numbers.

        `display_names` maps a queue's metadata name to its `spec.displayName` (absent: none).
        A job is counted once per action that placed pods of it, as KAI counts PodGroups.
        """
        placed = Tally(action for action, _ in {(b.action, b.job) for b in (*plan.binds, *plan.pipelined)})
        with self._lock:
            self.cycle_latency.set(seconds * 1000)
            self.open_session_latency.set(open_session_seconds * 1000)
            self.close_session_latency.set(close_session_seconds * 1000)
            for action, action_duration in action_seconds.items():
                self.action_latency.labels(action=action).set(action_duration * 1000)
            for action, jobs in placed.items():
                self.scheduled.inc(action, jobs)
            self._observe_queues(queues, display_names)

    def _observe_queues(self, queues: QueueBook, display_names: Mapping[str, str]) -> None:
        """Set every queue's series and drop those of queues gone (or renamed) since the last cycle."""
        current: set[tuple[str, str, str]] = set()
        for row, (name, spec) in enumerate(zip(queues.names, queues.specs, strict=True)):
            display = display_names.get(name, "")
            labels = (display or name, name, display)
            current.add(labels)
            fair_cpu, fair_memory, fair_gpu = queues.fair_share[row].tolist()
            used_cpu, used_memory, used_gpu = queues.allocated[row].tolist()
            values = (
                fair_gpu,
                fair_cpu / MILLICORES_PER_CORE,
                fair_memory / BYTES_PER_GB,
                1.0,
                spec.gpu.quota,
                _cores(spec.cpu.quota),
                spec.memory.quota,
                used_gpu,
                used_cpu / MILLICORES_PER_CORE,
                used_memory,
            )
            for metric, value in zip(self._queue_gauges, values, strict=True):
                metric.labels(*labels).set(value)
        for labels in self._queue_series - current:
            for metric in self._queue_gauges:
                metric.remove(*labels)
        self._queue_series = current

    def observe_evictions(self, evicted: Iterable[EvictedPodGroup]) -> None:
        with self._lock:
            for group in evicted:
                labels = (group.name, group.namespace, group.uid, group.nodepool, group.action)
                self.evicted.labels(*labels).inc(group.pods)
                self._evicted_series.add(labels)

    def forget_podgroups(self, live: Collection[tuple[str, str]]) -> None:
        """Drop the eviction series of PodGroups ((namespace, name)) not in `live`.

        A per-PodGroup counter grows without bound on a busy cluster otherwise, in memory here
        and in the scraper's series count.
        """
        with self._lock:
            gone = {labels for labels in self._evicted_series if (labels[1], labels[0]) not in live}
            for labels in gone:
                self.evicted.remove(*labels)
            self._evicted_series -= gone

    def observe_bind(self, succeeded: bool, seconds: float) -> None:
        """One bind attempt: its latency always, and whether the pod actually got bound."""
        self.bind_latency.observe(seconds * 1000)
        (self.bound if succeeded else self.bind_failures).inc()

    def observe_shard_faults(self, totals: Mapping[str, int]) -> None:
        """Catch the counter up with an executor's running totals of shard faults, by kind."""
        with self._lock:
            for fault, total in sorted(totals.items()):
                added = total - self._shard_faults_seen.get(fault, 0)
                if added > 0:
                    self.shard_faults.labels(fault=fault).inc(added)
                    self._shard_faults_seen[fault] = total

    def observe_blocked_evictions(self, count: int) -> None:
        self.evictions_blocked.inc(count)

    def set_tracked(self, sizes: Mapping[str, int]) -> None:
        """Sizes of what the scheduler holds, by kind; kinds not given are no longer tracked."""
        with self._lock:
            for key, size in sizes.items():
                self.tracked.labels(memory=key).set(size)
            for key in self._tracked_keys - sizes.keys():
                self.tracked.remove(key)
            self._tracked_keys = set(sizes)

    def set_leader(self, leading: bool) -> None:
        self.leader.set(1 if leading else 0)

    def count_dropped_events(self, dropped: Callable[[], int]) -> None:
        """Expose `ray_events_dropped_total` from an Event writer's running count (`DroppedEvents`)."""
        self.registry.register(DroppedEvents(dropped, self._namespace))


class GroupingMetrics:
    """What the podgrouper did, counted (KAI's podgrouper exports only controller-runtime's
    generic metrics, so these are `ray_…`): in `serve`'s registry, or the podgrouper's own."""

    def __init__(self, registry: CollectorRegistry, namespace: str = "kai") -> None:
        stamped = CollectorRegistry()
        registry.register(_WithoutCreated(stamped))

        def counter(name: str, documentation: str, labels: Iterable[str] = ()) -> Counter:
            return Counter(name, documentation, labels, namespace=namespace, registry=stamped)

        self.podgroups_written = counter(
            "ray_podgrouper_podgroups_written_total",
            "PodGroups created or brought up to date.",
            ["operation"],
        )
        self.pods_linked = counter("ray_podgrouper_pods_linked_total", "Pods linked to their PodGroup.")
        self.pods_ungrouped = counter(
            "ray_podgrouper_pods_ungrouped_total", "Times a pod could not be grouped (an Event says why)."
        )

    def observe(self, result: GroupingResult) -> None:
        self.podgroups_written.labels(operation="create").inc(len(result.created))
        self.podgroups_written.labels(operation="update").inc(len(result.updated))
        self.pods_linked.inc(len(result.annotated))
        self.pods_ungrouped.inc(len(result.failed))


class DroppedEvents(Collector):
    """`ray_events_dropped_total`: Events a background writer dropped (its queue full, or written
    while fenced), read from its running count when scraped, so a drop is counted the moment it
    happens, whether or not a cycle runs.

    Why it exists: Events are best effort, as in Kubernetes, and a burst can fill the queue;
    without a counter the Events lost were invisible (the log line for them is rate-limited).
    """

    def __init__(self, dropped: Callable[[], int], namespace: str = "kai") -> None:
        self._dropped = dropped
        self._name = _full_name(namespace, "ray_events_dropped")

    def collect(self) -> Iterator[Metric]:
        documentation = "Events dropped by the background Event writer."
        yield CounterMetricFamily(self._name, documentation, self._dropped())


class _PlainCounter(Collector):
    """A labelled counter exposed under exactly its name, as KAI's Go client exposes it.

    prometheus_client appends `_total` to every counter sample and to the TYPE line of every
    counter family, which would rename KAI's `podgroups_scheduled_by_action` and break the
    queries written for it.  The family is therefore typed "unknown" (exposed as `untyped`):
    the only type whose samples are exposed under their exact name.  `rate()` and `increase()`
    work on untyped series just the same.
    """

    def __init__(self, name: str, documentation: str, label: str) -> None:
        self._name = name
        self._documentation = documentation
        self._label = label
        self._values: dict[str, float] = {}
        self._lock = threading.Lock()

    def inc(self, label_value: str, amount: float = 1.0) -> None:
        if amount < 0:
            raise ValueError(f"{self._name} is a counter: it cannot decrease (got {amount})")
        with self._lock:
            self._values[label_value] = self._values.get(label_value, 0.0) + amount

    def collect(self) -> Iterator[Metric]:
        family = Metric(self._name, self._documentation, "unknown")
        with self._lock:
            values = sorted(self._values.items())
        for label_value, value in values:
            family.add_sample(self._name, {self._label: label_value}, value)
        yield family


class _WithoutCreated(Collector):
    """Everything of `inner` except the `<name>_created` samples prometheus_client adds."""

    def __init__(self, inner: CollectorRegistry) -> None:
        self._inner = inner

    def collect(self) -> Iterator[Metric]:
        for family in self._inner.collect():
            trimmed = Metric(family.name, family.documentation, family.type, family.unit)
            trimmed.samples = [s for s in family.samples if s.name != f"{family.name}_created"]
            yield trimmed


def _full_name(namespace: str, name: str) -> str:
    """`<namespace>_<name>`, or just `name` for an empty namespace (as Go's BuildFQName does)."""
    return f"{namespace}_{name}" if namespace else name


def _cores(millicores: float) -> float:
    """Millicores as cores; KAI's -1 ("unlimited") stays -1 rather than becoming -0.001."""
    return millicores if millicores == UNLIMITED else millicores / MILLICORES_PER_CORE


def evicted_podgroups(
    plan: Plan, applied: ApplyResult, refs: Mapping[str, PodGroupRef]
) -> list[EvictedPodGroup]:
    """Per PodGroup and action, the pods this cycle's evictions really took (for the eviction metrics)."""
    done = set(applied.evicted)
    counts: dict[tuple[str, str], int] = {}
    for eviction in plan.evictions:
        if pod_key(eviction) in done:
            key = (eviction.job, eviction.reason.cause.value)
            counts[key] = counts.get(key, 0) + 1
    evicted = []
    for (job, action), pods in sorted(counts.items()):
        ref = refs.get(job)
        namespace, _, name = job.partition("/")
        uid, pool = (ref.uid, ref.node_pool) if ref is not None else ("", "")
        evicted.append(EvictedPodGroup(namespace, name, uid, pool, action, pods))
    return evicted
