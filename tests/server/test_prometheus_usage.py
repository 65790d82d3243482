"""KAI's Prometheus usage source against a real HTTP server playing Prometheus' query API."""

from __future__ import annotations

import json
import logging
import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest

from kai_ray.api.usage_db import UsageParams
from kai_ray.server.prometheus_usage import PrometheusError, PrometheusUsageClient
from kai_ray.server.usage_source import PrometheusUsage

pytestmark = pytest.mark.unit


class FakePrometheus:
    """Answers /api/v1/query: capacity queries with `capacity`, allocation queries with `allocated`."""

    def __init__(self) -> None:
        self.capacity = 16.0
        self.allocated = {"team-a": 9.6, "team-b": 1.6}
        self.queries: list[str] = []
        self.failing = False
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                query = parse_qs(urlparse(self.path).query)["query"][0]
                owner.queries.append(query)
                if owner.failing:
                    self.send_response(503)
                    self.end_headers()
                    return
                if "kube_node_status_capacity" in query:
                    result: list[dict[str, Any]] = [{"metric": {}, "value": [0, str(owner.capacity)]}]
                else:
                    result = [
                        {"metric": {"queue_name": name}, "value": [0, str(value)]}
                        for name, value in owner.allocated.items()
                    ]
                body = json.dumps({"status": "success", "data": {"resultType": "vector", "result": result}})
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(body.encode())

            def log_message(self, format: str, *args: Any) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.address = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def prometheus() -> Iterator[FakePrometheus]:
    server = FakePrometheus()
    try:
        yield server
    finally:
        server.close()


def test_usage_is_decayed_allocation_over_decayed_capacity(prometheus: FakePrometheus) -> None:
    params = UsageParams(window_seconds=7 * 86400, half_life_seconds=600, query_timeout_seconds=2)
    usage = PrometheusUsageClient(prometheus.address, params).fetch(1_000_000.0)
    assert usage["team-a"]["gpu"] == pytest.approx(0.6)
    assert usage["team-b"]["gpu"] == pytest.approx(0.1)
    gpu_query = next(q for q in prometheus.queries if "kai_queue_allocated_gpus" in q)
    assert gpu_query == (
        "sum_over_time((((kai_queue_allocated_gpus) * (0.5^((1000000 - time()) / 600.000000))))[604800s:60s])"
    )


def test_metric_names_come_from_extra_params(prometheus: FakePrometheus) -> None:
    params = UsageParams(extra_params={"gpuAllocationMetric": "my_gpus"}, query_timeout_seconds=2)
    PrometheusUsageClient(prometheus.address, params).fetch(0.0)
    assert any(q == "sum_over_time((my_gpus)[604800s:60s])" for q in prometheus.queries)


def test_a_failed_fetch_is_one_log_line_and_the_last_usage_stays(
    prometheus: FakePrometheus, caplog: pytest.LogCaptureFixture
) -> None:
    params = UsageParams(fetch_interval_seconds=3600, wait_timeout_seconds=5, query_timeout_seconds=2)
    source = PrometheusUsage(PrometheusUsageClient(prometheus.address, params), params)
    try:
        assert source.usage(0.0)["team-a"]["gpu"] == pytest.approx(0.6)
        prometheus.failing = True
        with caplog.at_level(logging.WARNING):
            assert not source.fetch_once()
        assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == [
            f"Prometheus usage not fetched, the last known is kept: {prometheus.address}: HTTP 503 for "
            f"{prometheus.queries[-1]!r}"
        ]
        assert source.usage(0.0)["team-a"]["gpu"] == pytest.approx(0.6)
    finally:
        source.close()


def test_an_unreachable_prometheus_fails_within_the_timeout() -> None:
    params = UsageParams(query_timeout_seconds=0.5)
    with pytest.raises(PrometheusError, match=re.escape("127.0.0.1:9")):
        PrometheusUsageClient("http://127.0.0.1:9", params).fetch(0.0)
