"""The whole loop on a real API server: cache, plan, BindRequests, binder, kwok, status."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kube_support import eventually, queue_body
from kubernetes import client

from kai_ray.cluster.kube import devcluster
from kai_ray.cluster.kube.scheduler import KubeScheduler

pytestmark = pytest.mark.kube

GROUP, VERSION = "scheduling.run.ai", "v2"


def pod(
    name: str, leaf: str, zone: str, gpus: int = 0, *, group: str | None = None, fraction: str | None = None
) -> Any:
    annotations = {}
    if group:
        annotations["pod-group-name"] = group
    if fraction:
        annotations["gpu-fraction"] = fraction
    limits = {"nvidia.com/gpu": str(gpus)} if gpus else {}
    return client.V1Pod(
        metadata=client.V1ObjectMeta(
            name=name, labels={"kai.scheduler/queue": leaf}, annotations=annotations
        ),
        spec=client.V1PodSpec(
            scheduler_name="kai-scheduler",
            node_selector={"kai-ray-test": zone},
            containers=[
                client.V1Container(
                    name="main",
                    image="busybox",
                    resources=client.V1ResourceRequirements(
                        requests={"cpu": "100m", "memory": "100Mi"}, limits=limits
                    ),
                )
            ],
        ),
    )


def podgroup(name: str, leaf: str, min_member: int) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/v2alpha2",
        "kind": "PodGroup",
        "metadata": {"name": name},
        "spec": {"queue": leaf, "minMember": min_member, "priorityClassName": "train"},
    }


@pytest.fixture
def zone(kube_api: Any, namespace: str) -> Iterator[str]:
    """Two 8-GPU nodes of this test's own, selected by a label, and a queue tree of its own."""
    custom = client.CustomObjectsApi(kube_api)
    for index in range(2):
        devcluster.create_gpu_node(kube_api, f"{namespace}-n{index}", 8, labels={"kai-ray-test": namespace})
    custom.create_cluster_custom_object(GROUP, VERSION, "queues", queue_body(f"{namespace}-dept", None, -1))
    custom.create_cluster_custom_object(
        GROUP, VERSION, "queues", queue_body(f"{namespace}-leaf", f"{namespace}-dept", 16)
    )
    yield namespace
    core = client.CoreV1Api(kube_api)
    for index in range(2):
        core.delete_node(f"{namespace}-n{index}")


def pods_by_name(kube_api: Any, namespace: str) -> dict[str, Any]:
    return {p.metadata.name: p for p in client.CoreV1Api(kube_api).list_namespaced_pod(namespace).items}


def test_quickstart_like_cluster_binds_what_fits_and_explains_the_rest(kube_api: Any, zone: str) -> None:
    namespace, leaf = zone, f"{zone}-leaf"
    core = client.CoreV1Api(kube_api)
    custom = client.CustomObjectsApi(kube_api)
    custom.create_namespaced_custom_object(
        GROUP, "v2alpha2", namespace, "podgroups", podgroup("gang", leaf, 4)
    )
    custom.create_namespaced_custom_object(
        GROUP, "v2alpha2", namespace, "podgroups", podgroup("too-big", leaf, 3)
    )
    for index in range(4):
        core.create_namespaced_pod(namespace, pod(f"gang-{index}", leaf, zone, 3, group="gang"))
    for index in range(3):
        core.create_namespaced_pod(namespace, pod(f"too-big-{index}", leaf, zone, 8, group="too-big"))
    core.create_namespaced_pod(namespace, pod("single-0", leaf, zone, 1))
    core.create_namespaced_pod(namespace, pod("single-1", leaf, zone, 1))
    core.create_namespaced_pod(namespace, pod("half", leaf, zone, fraction="0.5"))
    core.create_namespaced_pod(namespace, pod("cpu-only", leaf, zone))

    scheduler = KubeScheduler(kube_api, namespace=namespace)
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


def test_a_restarted_scheduler_never_binds_a_pod_twice(kube_api: Any, zone: str) -> None:
    namespace, leaf = zone, f"{zone}-leaf"
    core = client.CoreV1Api(kube_api)
    for index in range(6):
        core.create_namespaced_pod(namespace, pod(f"p-{index}", leaf, zone, 2))
    first = KubeScheduler(kube_api, namespace=namespace)
    first.start()
    try:
        first.run_cycle()
    finally:
        first.stop()
    placed = {name: p.spec.node_name for name, p in pods_by_name(kube_api, namespace).items()}
    second = KubeScheduler(kube_api, namespace=namespace)
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
