"""The whole loop on a real API server: cache, plan, BindRequests, binder, kwok, status."""

from __future__ import annotations

from typing import Any

import pytest
from kai_ray_operators.controller import PodGroupController
from kube_support import eventually
from kube_zone import Zone
from kubernetes import client

from kai_ray.cluster.kube.bind_mode import BindMode
from kai_ray.server.metrics import SchedulerMetrics
from kai_ray.server.scheduler import KubeScheduler

pytestmark = pytest.mark.kube

GROUP, VERSION = "scheduling.run.ai", "v2"


def podgroup(name: str, leaf: str, min_member: int) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/v2alpha2",
        "kind": "PodGroup",
        "metadata": {"name": name},
        "spec": {"queue": leaf, "minMember": min_member, "priorityClassName": "train"},
    }


@pytest.fixture
def zone(zone: Zone) -> Zone:
    """Two 8-GPU nodes of this test's own, selected by a label, and a queue tree of its own."""
    zone.node("n0")
    zone.node("n1")
    zone.queue("leaf", zone.queue("dept"), gpu_quota=16)
    return zone


def pods_by_name(kube_api: Any, namespace: str) -> dict[str, Any]:
    return {p.metadata.name: p for p in client.CoreV1Api(kube_api).list_namespaced_pod(namespace).items}


def test_quickstart_like_cluster_binds_what_fits_and_explains_the_rest(kube_api: Any, zone: Zone) -> None:
    namespace, leaf = zone.name, zone.queues[-1]
    custom = client.CustomObjectsApi(kube_api)
    custom.create_namespaced_custom_object(
        GROUP, "v2alpha2", namespace, "podgroups", podgroup("gang", leaf, 4)
    )
    custom.create_namespaced_custom_object(
        GROUP, "v2alpha2", namespace, "podgroups", podgroup("too-big", leaf, 3)
    )
    for index in range(4):
        zone.pod(f"gang-{index}", queue=leaf, gpus=3, group="gang")
    for index in range(3):
        zone.pod(f"too-big-{index}", queue=leaf, gpus=8, group="too-big")
    zone.pod("single-0", queue=leaf)
    zone.pod("single-1", queue=leaf)
    zone.pod("half", queue=leaf, gpus=0, annotations={"gpu-fraction": "0.5"})
    zone.pod("cpu-only", queue=leaf, gpus=0)

    scheduler = KubeScheduler(kube_api, namespace=namespace, grouper=PodGroupController(kube_api))
    scheduler.start()
    try:
        fits = ["gang-0", "gang-1", "gang-2", "gang-3", "single-0", "single-1", "half", "cpu-only"]

        def all_running() -> bool:
            pods = pods_by_name(kube_api, namespace)
            return all(pods[name].status.phase == "Running" for name in fits)

        assert eventually(all_running, timeout=60, step=scheduler.run_cycle)
        pods = pods_by_name(kube_api, namespace)
        assert {pods[f"gang-{i}"].spec.node_name for i in range(4)} <= {f"{namespace}-n0", f"{namespace}-n1"}
        assert all(pods[f"too-big-{i}"].spec.node_name is None for i in range(3))
        too_big = custom.get_namespaced_custom_object(GROUP, "v2alpha2", namespace, "podgroups", "too-big")
        messages = [
            c.get("message", "") for c in (too_big.get("status") or {}).get("schedulingConditions", [])
        ]
        assert any("gang needs 3" in message for message in messages)
        binds = custom.list_namespaced_custom_object(GROUP, "v1alpha2", namespace, "bindrequests")["items"]
        assert sorted(b["spec"]["podName"] for b in binds) == sorted(fits)
    finally:
        scheduler.stop()


def test_a_restarted_scheduler_never_binds_a_pod_twice(kube_api: Any, zone: Zone) -> None:
    namespace, leaf = zone.name, zone.queues[-1]
    for index in range(6):
        zone.pod(f"p-{index}", queue=leaf, gpus=2)
    first = KubeScheduler(kube_api, namespace=namespace, grouper=PodGroupController(kube_api))
    first.start()
    try:
        first.run_cycle()
    finally:
        first.stop()
    placed = {name: p.spec.node_name for name, p in pods_by_name(kube_api, namespace).items()}
    second = KubeScheduler(kube_api, namespace=namespace, grouper=PodGroupController(kube_api))
    second.start()
    try:
        for _ in range(3):
            second.run_cycle()
    finally:
        second.stop()
    now = {name: p.spec.node_name for name, p in pods_by_name(kube_api, namespace).items()}
    assert all(node is not None for node in now.values())
    assert {name: node for name, node in placed.items() if node} == {
        name: now[name] for name in placed if placed[name]
    }
    custom = client.CustomObjectsApi(kube_api)
    binds = custom.list_namespaced_custom_object(GROUP, "v1alpha2", namespace, "bindrequests")["items"]
    assert len(binds) == 6


def test_direct_binds_place_pods_without_bind_requests_and_never_twice(kube_api: Any, zone: Zone) -> None:
    """`--bind-mode direct`: the scheduler binds pods itself, no BindRequest is made, the binds
    are announced on their PodGroups, a cycle that runs before the watch shows the binds (the
    very next one) does not place those pods again, and the bind metrics count them as they count
    the binder's."""
    namespace, leaf = zone.name, zone.queues[-1]
    for index in range(5):
        zone.pod(f"p-{index}", queue=leaf, gpus=3)  # five 3-GPU pods: four fit on two 8-GPU nodes
    metrics = SchedulerMetrics()
    scheduler = KubeScheduler(
        kube_api,
        namespace=namespace,
        grouper=PodGroupController(kube_api),
        bind_mode=BindMode.DIRECT,
        metrics=metrics,
    )
    scheduler.start()
    try:

        def four_bound() -> bool:
            return sum(1 for p in pods_by_name(kube_api, namespace).values() if p.spec.node_name) == 4

        first = scheduler.run_cycle()  # groups the pods
        outcomes = [first]
        assert eventually(four_bound, timeout=60, step=lambda: outcomes.append(scheduler.run_cycle()))
        outcomes.append(scheduler.run_cycle())  # at once: the cache may not show the binds yet
        bound = [pod for outcome in outcomes for pod in outcome.applied.bound]
        assert len(bound) == len(set(bound)) == 4  # each pod bound once, none planned twice
        assert not [error for outcome in outcomes for error in outcome.applied.errors]
        sample = metrics.registry.get_sample_value
        assert sample("kai_ray_pods_bound_total") == 4
        assert sample("kai_ray_bind_failures_total") == 0
        assert sample("kai_task_bind_latency_milliseconds_count") == 4
        custom = client.CustomObjectsApi(kube_api)
        assert (
            custom.list_namespaced_custom_object(GROUP, "v1alpha2", namespace, "bindrequests")["items"] == []
        )

        def announced() -> bool:
            events = client.CoreV1Api(kube_api).list_namespaced_event(namespace).items
            scheduled = [e for e in events if e.reason == "Scheduled"]
            return len(scheduled) == 4 and {e.involved_object.kind for e in scheduled} == {"PodGroup"}

        assert eventually(announced, timeout=30)
    finally:
        scheduler.stop()
