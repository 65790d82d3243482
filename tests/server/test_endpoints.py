"""The HTTP port of serve and podgrouper: /metrics, and the probes a Deployment points at."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from kai_ray.server.endpoints import Endpoints, Health
from kai_ray.server.metrics import SchedulerMetrics

pytestmark = pytest.mark.unit


@pytest.fixture
def served() -> Iterator[tuple[Endpoints, SchedulerMetrics, str]]:
    metrics = SchedulerMetrics()
    endpoints = Endpoints(metrics.registry, Health())
    host, port = endpoints.serve("127.0.0.1:0")
    assert host == "127.0.0.1" and port > 0
    try:
        yield endpoints, metrics, f"http://127.0.0.1:{port}"
    finally:
        endpoints.close()


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def test_metrics_are_scraped_from_the_registry(served: tuple[Endpoints, SchedulerMetrics, str]) -> None:
    _, metrics, base = served
    metrics.set_leader(True)
    status, body = get(f"{base}/metrics")
    assert status == 200 and "kai_ray_leader 1.0" in body


def test_ready_only_once_the_cache_has_listed_everything(
    served: tuple[Endpoints, SchedulerMetrics, str],
) -> None:
    endpoints, _, base = served
    status, body = get(f"{base}/readyz")
    assert status == 503 and "cache" in body
    assert get(f"{base}/healthz") == (200, "ok\n")  # alive while not ready: no restart loop
    endpoints.health.mark_ready()
    assert get(f"{base}/readyz") == (200, "ok\n")
    endpoints.health.mark_not_ready("stopping")
    assert get(f"{base}/readyz") == (503, "stopping\n")


def test_other_paths_are_not_found(served: tuple[Endpoints, SchedulerMetrics, str]) -> None:
    status, body = get(f"{served[2]}/")
    assert status == 404 and "/readyz" in body


def test_close_frees_the_port_and_can_be_repeated(served: tuple[Endpoints, SchedulerMetrics, str]) -> None:
    endpoints, _, base = served
    endpoints.close()
    with pytest.raises(OSError):
        urllib.request.urlopen(f"{base}/healthz", timeout=2)
    endpoints.close()


@pytest.mark.parametrize("address", ["8080", "localhost", "host:http", "host:", "host:70000", "host:-1"])
def test_a_malformed_address_is_refused(address: str) -> None:
    with pytest.raises(ValueError, match="expected host:port"):
        Endpoints(SchedulerMetrics().registry, Health()).serve(address)
