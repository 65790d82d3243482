"""`/metrics` of a real `kai-ray serve` process, under KAI's names (issue 8, item 9).

Scraped over HTTP, as Prometheus would: KAI's `kai_` names and labels, binds counted
when they happen, the action that scheduled, queue series (display names included)
that disappear with their queue, and the endpoint on loopback by default.
"""

from __future__ import annotations

import urllib.request
from collections.abc import Callable
from typing import Any

import pytest
from kube_serve import Serve, wait_until
from kube_zone import GROUP, Zone
from kubernetes import client
from prometheus_client.parser import text_string_to_metric_families

pytestmark = pytest.mark.kube

Samples = list[tuple[str, dict[str, str], float]]


def scrape(url: str) -> Samples:
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    return [
        (s.name, dict(s.labels), float(s.value))
        for f in text_string_to_metric_families(text)
        for s in f.samples
    ]


def value(samples: Samples, name: str, **labels: str) -> float | None:
    for found, found_labels, number in samples:
        if found == name and all(found_labels.get(k) == v for k, v in labels.items()):
            return number
    return None


def bound(kube_api: Any, namespace: str) -> int:
    return sum(1 for p in client.CoreV1Api(kube_api).list_namespaced_pod(namespace).items if p.spec.node_name)


def test_metrics_under_kai_names_follow_the_cluster(
    kube_api: Any, zone: Zone, serves: Callable[..., Serve]
) -> None:
    zone.node("n")
    named, doomed = zone.queue("named"), zone.queue("doomed")
    client.CustomObjectsApi(kube_api).patch_cluster_custom_object(
        GROUP, "v2", "queues", named, {"spec": {"displayName": "Team Named"}}
    )
    serve = serves(f"{zone.name}-s", zone.name)
    url = serve.metrics_url()
    assert url.startswith("http://127.0.0.1:")
    for index in range(3):
        zone.pod(f"p-{index}", queue=named)
    wait_until(lambda: bound(kube_api, zone.name) == 3, 60, f"three binds\n{serve.tail()}")

    def scraped(check: Callable[[Samples], bool]) -> Samples:
        found: list[Samples] = []

        def holds() -> bool:
            found[:] = [scrape(url)]
            return check(found[0])

        wait_until(holds, 30, f"metrics to show it\n{serve.tail()}", step=0.2)
        return found[0]

    samples = scraped(lambda s: (value(s, "kai_ray_pods_bound_total") or 0) >= 3)
    assert (value(samples, "kai_podgroups_scheduled_by_action", action="allocate") or 0) >= 3
    assert (value(samples, "kai_e2e_scheduling_latency_milliseconds") or 0) > 0
    assert value(samples, "kai_ray_leader") == 1
    labels = {"queue_metadata_name": named, "queue_name": "Team Named", "queue_display_name": "Team Named"}
    assert value(samples, "kai_queue_info", **labels) == 1
    assert value(samples, "kai_queue_allocated_gpus", **labels) == 3
    assert value(samples, "kai_queue_fair_share_gpu", **labels) is not None
    assert value(samples, "kai_queue_info", queue_metadata_name=doomed) == 1
    assert value(samples, "kai_ray_tracked_objects", memory="event_dedupe") is not None
    assert not any(
        name.startswith("kai_ray_bound_pods") for name, _, _ in samples
    )  # the old, misleading name

    client.CustomObjectsApi(kube_api).delete_cluster_custom_object(GROUP, "v2", "queues", doomed)
    zone.queues.remove(doomed)
    samples = scraped(lambda s: value(s, "kai_queue_info", queue_metadata_name=doomed) is None)
    assert not [s for s in samples if s[1].get("queue_metadata_name") == doomed]
    assert value(samples, "kai_queue_info", **labels) == 1
