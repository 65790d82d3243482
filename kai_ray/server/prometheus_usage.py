"""KAI's Prometheus usage client (`usageDBConfig.clientType: prometheus`, spec §7).

The queries are KAI's: per resource, the allocation metric each queue exported (label
`queue_name`) and the cluster capacity metric, each multiplied by the half-life decay and summed
over the window at the query resolution; usage is their ratio. Metric names can be overridden in
`usageParams.extraParams` with KAI's keys. One fetch is bounded by `usageQueryTimeout`; a failed
fetch is the caller's one log line, and the last good answer stays in use.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

import urllib3

from kai_ray.api.usage_db import UsageParams
from kai_ray.fairshare.usage import QueueUsage

QUEUE_LABEL = "queue_name"
RESOURCES = ("gpu", "cpu", "memory")
ALLOCATION_METRICS = {
    "gpu": ("gpuAllocationMetric", "kai_queue_allocated_gpus"),
    "cpu": ("cpuAllocationMetric", "kai_queue_allocated_cpu_cores"),
    "memory": ("memoryAllocationMetric", "kai_queue_allocated_memory_bytes"),
}
CAPACITY_METRICS = {
    "gpu": ("gpuCapacityMetric", 'sum(kube_node_status_capacity{resource="nvidia_com_gpu"})'),
    "cpu": ("cpuCapacityMetric", 'sum(kube_node_status_capacity{resource="cpu"})'),
    "memory": ("memoryCapacityMetric", 'sum(kube_node_status_capacity{resource="memory"})'),
}


class PrometheusError(Exception):
    """A fetch failed; the message is one line fit for the log."""


class PrometheusUsageClient:
    """Queries `address` (Prometheus' base URL) for normalised queue usage at a given time."""

    def __init__(self, address: str, params: UsageParams, http: urllib3.PoolManager | None = None) -> None:
        self.address = address.rstrip("/")
        self.params = params
        self._http = http or urllib3.PoolManager()

    def fetch(self, now: float) -> QueueUsage:
        """Usage per queue and resource at `now` (Unix seconds); PrometheusError on any failure."""
        usage: QueueUsage = {}
        for resource in RESOURCES:
            capacity_query = self._windowed(self._metric(CAPACITY_METRICS[resource]), now)
            capacity = self._query(capacity_query, now)
            if not capacity:
                raise PrometheusError(f"no data for the {resource} capacity query {capacity_query!r}")
            total = next(iter(capacity.values()))
            for queue, value in self._query(
                self._windowed(self._metric(ALLOCATION_METRICS[resource]), now), now
            ).items():
                if queue:
                    usage.setdefault(queue, {})[resource] = value / total if total > 0 else 0.0
        return {name: usage[name] for name in sorted(usage)}

    def _metric(self, entry: tuple[str, str]) -> str:
        key, default = entry
        return self.params.extra_params.get(key, default)

    def _windowed(self, metric: str, now: float) -> str:
        """`sum_over_time` of the decayed metric over the window ending at `now` (KAI's query)."""
        decayed = metric
        if self.params.half_life_seconds is not None:
            decayed = f"(({metric}) * (0.5^(({now:.0f} - time()) / {self.params.half_life_seconds:f})))"
        window = _promql_duration(self._window(now))
        step = _promql_duration(self.params.query_resolution_seconds)
        return f"sum_over_time(({decayed})[{window}:{step}])"

    def _window(self, now: float) -> float:
        """A tumbling window reaches back to its last restart, a sliding one its whole size."""
        start = self.params.tumbling_start
        if self.params.window_type != "tumbling" or start is None:
            return self.params.window_seconds
        if start > now:
            return self.params.query_resolution_seconds
        reset = start + math.floor((now - start) / self.params.window_seconds) * self.params.window_seconds
        return max(now - reset, self.params.query_resolution_seconds)

    def _query(self, query: str, now: float) -> dict[str, float]:
        """An instant query's vector as {queue_name label: value}."""
        try:
            response = self._http.request(
                "GET",
                f"{self.address}/api/v1/query",
                fields={"query": query, "time": f"{now:.3f}"},
                timeout=urllib3.Timeout(total=self.params.query_timeout_seconds),
                retries=False,
            )
        except urllib3.exceptions.HTTPError as error:
            raise PrometheusError(f"{self.address}: {type(error).__name__}: {error}") from None
        if response.status != 200:
            raise PrometheusError(f"{self.address}: HTTP {response.status} for {query!r}")
        try:
            body = json.loads(response.data)
            return _vector(body)
        except (ValueError, KeyError, TypeError) as error:
            raise PrometheusError(f"{self.address}: unexpected answer to {query!r}: {error}") from None


def _vector(body: Mapping[str, Any]) -> dict[str, float]:
    if body.get("status") != "success":
        raise ValueError(f"status {body.get('status')!r}: {body.get('error', '')}")
    data = body["data"]
    if data["resultType"] != "vector":
        raise ValueError(f"expected a vector, got {data['resultType']}")
    return {
        str(sample["metric"].get(QUEUE_LABEL, "")): float(sample["value"][1]) for sample in data["result"]
    }


def _promql_duration(seconds: float) -> str:
    """Whole seconds in PromQL's syntax (subquery ranges take no fractions)."""
    return f"{max(1, round(seconds))}s"
