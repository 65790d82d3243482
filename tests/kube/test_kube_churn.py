"""Memory stays bounded while objects come and go (issue 8, item 7).

Thousands of pods are created, scheduled (bound, or left pending with conditions
and Events) and deleted, in rounds, against a real `kai-ray serve`.  After each
round everything serve remembers per object (Event dedupe, written conditions,
binder state, reported problems, cached objects, metric series) is back where it
started, as `kai_ray_tracked_objects` reports it, and the process's resident
memory stops growing once the first rounds have warmed it up.
"""

from __future__ import annotations

import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from kube_serve import Serve, wait_until
from kube_zone import GROUP, Zone, gpu_pod
from kubernetes import client
from prometheus_client.parser import text_string_to_metric_families

pytestmark = pytest.mark.kube

ROUNDS = 4
PODS_PER_ROUND = 500
UNFIT_PER_ROUND = 50
"""Pods asking for more GPUs than a node has: they stay pending and get conditions and Events."""
RSS_GROWTH_MB = 25.0


def tracked(url: str) -> dict[str, float]:
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    return {
        s.labels["memory"]: float(s.value)
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "kai_ray_tracked_objects"
    }


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def one_round(kube_api: Any, zone: Zone, queue: str, serve: Serve) -> None:
    core = client.CoreV1Api(kube_api)
    pods = [gpu_pod(f"p-{i:04d}", zone.name, queue=queue, gpus=0) for i in range(PODS_PER_ROUND)]
    pods += [gpu_pod(f"big-{i:03d}", zone.name, queue=queue, gpus=16) for i in range(UNFIT_PER_ROUND)]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda pod: core.create_namespaced_pod(zone.name, pod), pods))

    def scheduled() -> bool:
        listed = core.list_namespaced_pod(zone.name).items
        return sum(1 for p in listed if p.spec.node_name) == PODS_PER_ROUND

    wait_until(scheduled, 180, f"the round's pods bound\n{serve.tail()}", step=0.5)
    core.delete_collection_namespaced_pod(zone.name, grace_period_seconds=0)
    custom = client.CustomObjectsApi(kube_api)
    # No garbage collector runs here: what the pods owned goes with them by hand.
    for plural in ("podgroups", "bindrequests"):
        custom.delete_collection_namespaced_custom_object(
            GROUP, "v1alpha2" if plural == "bindrequests" else "v2alpha2", zone.name, plural
        )
    wait_until(lambda: not core.list_namespaced_pod(zone.name).items, 60, "the pods deleted")


def test_memory_follows_the_cluster_not_its_history(
    kube_api: Any, zone: Zone, serves: Callable[..., Serve]
) -> None:
    zone.node("n0")
    zone.node("n1")
    queue = zone.queue("q")
    serve = serves(f"{zone.name}-s", zone.name)
    url = serve.metrics_url()
    wait_until(lambda: bool(tracked(url)), 60, "tracked-object metrics")
    baseline = tracked(url)
    sizes = []
    for _ in range(ROUNDS):
        one_round(kube_api, zone, queue, serve)
        wait_until(
            lambda: tracked(url) == baseline, 60, f"memory back to its baseline: {tracked(url)} vs {baseline}"
        )
        sizes.append(rss_mb(serve.proc.pid))
    print(f"RSS after each round (MB): {[round(s) for s in sizes]}")
    assert serve.proc.poll() is None
    assert sizes[-1] - sizes[1] < RSS_GROWTH_MB, sizes
