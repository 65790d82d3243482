"""`kai_ray_events_dropped_total`: every Event the background writer dropped is counted (issue 35)."""

from __future__ import annotations

import threading

import pytest
from prometheus_client import generate_latest

from kai_ray.cluster.kube.events import EventWriter, ObjectRef
from kai_ray.server.metrics import SchedulerMetrics

pytestmark = pytest.mark.unit


def test_each_event_dropped_on_a_full_queue_is_counted_and_exposed() -> None:
    writer = EventWriter(None, background=True, max_queued=2)
    blocked = threading.Event()
    release = threading.Event()

    def stuck(namespace: str, event: object) -> None:
        blocked.set()
        release.wait(30)

    writer._send = stuck  # type: ignore[method-assign]  # an API server that stands still
    metrics = SchedulerMetrics()
    metrics.count_dropped_events(lambda: writer.dropped)
    try:
        pod = ObjectRef.pod("team-a", "p", "uid-p")
        assert writer.record(pod, "Normal", "Scheduled", "first")  # taken by the writer thread
        assert blocked.wait(30)
        queued = [writer.record(pod, "Normal", "Scheduled", f"m{i}") for i in range(5)]
        assert queued == [True, True, False, False, False]  # two fit the queue, three are dropped
        assert metrics.registry.get_sample_value("kai_ray_events_dropped_total") == 3
        text = generate_latest(metrics.registry).decode()
        assert "# TYPE kai_ray_events_dropped_total counter" in text
    finally:
        release.set()
        writer.close(5)


def test_the_counter_exists_before_any_drop() -> None:
    metrics = SchedulerMetrics()
    metrics.count_dropped_events(lambda: 0)
    assert metrics.registry.get_sample_value("kai_ray_events_dropped_total") == 0
