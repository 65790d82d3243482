"""Prometheus metrics of the scheduling loop, under KAI's metric names where KAI has one.

Dashboards and alerts written for KAI keep working against kai-ray.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

from kai_ray.engine.plan import Plan
from kai_ray.engine.queues import QueueBook

GIB = 1e9


class SchedulerMetrics:
    """One registry per scheduler, so tests and several schedulers in one process never clash."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.cycle_latency = Gauge(
            "e2e_scheduling_latency_milliseconds", "Duration of the last full cycle.", registry=self.registry
        )
        self.scheduled = Counter(
            "podgroups_scheduled_by_action",
            "PodGroups bound or pipelined.",
            ["action"],
            registry=self.registry,
        )
        self.evicted = Counter("kai_ray_evicted_pods", "Pods evicted.", ["reason"], registry=self.registry)
        self.binds = Counter(
            "kai_ray_bound_pods", "Pods for which a BindRequest was created.", registry=self.registry
        )
        labels = ["queue_name"]
        self.fair_share_gpu = Gauge("queue_fair_share_gpu", "GPU fair share.", labels, registry=self.registry)
        self.fair_share_cpu = Gauge(
            "queue_fair_share_cpu_cores", "CPU fair share.", labels, registry=self.registry
        )
        self.fair_share_memory = Gauge(
            "queue_fair_share_memory_gb", "Memory fair share.", labels, registry=self.registry
        )

    def serve(self, port: int) -> None:
        start_http_server(port, registry=self.registry)

    def observe_cycle(self, milliseconds: float, plan: Plan, queues: QueueBook) -> None:
        self.cycle_latency.set(milliseconds)
        self.binds.inc(len(plan.binds))
        jobs = {bind.job for bind in plan.binds} | {pipelined.job for pipelined in plan.pipelined}
        self.scheduled.labels(action="allocate").inc(len(jobs))
        for eviction in plan.evictions:
            self.evicted.labels(reason=eviction.reason.cause.value).inc()
        for row, name in enumerate(queues.names):
            cpu, memory, gpu = queues.fair_share[row].tolist()
            self.fair_share_gpu.labels(queue_name=name).set(gpu)
            self.fair_share_cpu.labels(queue_name=name).set(cpu / 1000)
            self.fair_share_memory.labels(queue_name=name).set(memory / GIB)
