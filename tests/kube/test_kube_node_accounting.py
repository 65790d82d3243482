"""Nodes are never double-booked (issue 8, item 1), on the real API server.

Everything that holds a node's resources counts on it: another scheduler's pod
bound straight to a node, and pods of ours whose queue was deleted under them
(reported, never scheduled, never forgotten).  Cordoned, tainted and NotReady
nodes get nothing.  Before this, a pod of another scheduler was not even
watched and an orphaned pod was dropped, so their GPUs were handed out again.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kai_ray_operators.controller import PodGroupController
from kube_support import eventually
from kube_zone import GROUP, Zone
from kubernetes import client

from kai_ray.server.scheduler import KubeScheduler

pytestmark = pytest.mark.kube


@pytest.fixture
def scheduler(kube_api: Any, zone: Zone) -> Iterator[KubeScheduler]:
    running = KubeScheduler(kube_api, namespace=zone.name, grouper=PodGroupController(kube_api))
    running.start()
    try:
        yield running
    finally:
        running.stop()


def pods(kube_api: Any, namespace: str) -> dict[str, client.V1Pod]:
    return {p.metadata.name: p for p in client.CoreV1Api(kube_api).list_namespaced_pod(namespace).items}


def gpus_requested_per_node(kube_api: Any, namespace: str) -> dict[str, int]:
    """What a kubelet would check: the GPU requests of every pod on each node that has not finished."""
    totals: dict[str, int] = {}
    for pod in pods(kube_api, namespace).values():
        if pod.spec.node_name and pod.status.phase not in ("Succeeded", "Failed"):
            gpus = sum(int((c.resources.limits or {}).get("nvidia.com/gpu", 0)) for c in pod.spec.containers)
            totals[pod.spec.node_name] = totals.get(pod.spec.node_name, 0) + gpus
    return totals


def bound(kube_api: Any, namespace: str, prefix: str) -> dict[str, str]:
    return {
        name: pod.spec.node_name
        for name, pod in pods(kube_api, namespace).items()
        if name.startswith(prefix) and pod.spec.node_name
    }


def test_foreign_and_orphaned_pods_keep_their_gpus(
    kube_api: Any, zone: Zone, scheduler: KubeScheduler
) -> None:
    node_a, node_b = zone.node("a"), zone.node("b")
    dept = zone.queue("dept")
    old, new = zone.queue("old", dept), zone.queue("new", dept)
    zone.pod("web", scheduler="default-scheduler", node=node_a, gpus=8)  # bound by someone else
    for index in range(6):
        zone.pod(f"old-{index}", queue=old)
    assert eventually(lambda: len(bound(kube_api, zone.name, "old-")) == 6, 60, scheduler.run_cycle)
    assert set(bound(kube_api, zone.name, "old-").values()) == {node_b}  # node a was full already

    client.CustomObjectsApi(kube_api).delete_cluster_custom_object(GROUP, "v2", "queues", old)
    assert scheduler.cache.wait_until(lambda: scheduler.cache.get("Queue", "", old) is None, 30)
    for index in range(8):
        zone.pod(f"new-{index}", queue=new)

    assert eventually(lambda: len(bound(kube_api, zone.name, "new-")) == 2, 60, scheduler.run_cycle)
    for _ in range(3):  # nothing more fits, however often it looks
        scheduler.run_cycle()
    assert len(bound(kube_api, zone.name, "new-")) == 2
    assert set(bound(kube_api, zone.name, "new-").values()) == {node_b}
    assert gpus_requested_per_node(kube_api, zone.name) == {node_a: 8, node_b: 8}
    # The orphans are reported (their PodGroup says why) and left where they run.
    groups = client.CustomObjectsApi(kube_api).list_namespaced_custom_object(
        GROUP, "v2alpha2", zone.name, "podgroups"
    )["items"]
    orphans = [g for g in groups if g["spec"]["queue"] == old]
    assert len(orphans) == 6
    for group in orphans:
        condition = group["status"]["schedulingConditions"][-1]
        assert condition["reasons"][0]["reason"] == "QueueDoesNotExist", condition
    assert set(bound(kube_api, zone.name, "old-").values()) == {node_b}


def test_cordoned_tainted_and_not_ready_nodes_get_nothing(
    kube_api: Any, zone: Zone, scheduler: KubeScheduler
) -> None:
    core = client.CoreV1Api(kube_api)
    cordoned, tainted, not_ready, good = (zone.node(n) for n in ("cordoned", "tainted", "notready", "good"))
    core.patch_node(cordoned, {"spec": {"unschedulable": True}})
    core.patch_node(
        tainted, {"spec": {"taints": [{"key": "dedicated", "value": "infra", "effect": "NoSchedule"}]}}
    )
    # Take the node from the pod runner first, so nothing marks it Ready again.
    core.patch_node(not_ready, {"metadata": {"annotations": {"kwok.x-k8s.io/node": None}}})
    core.patch_node_status(not_ready, {"status": {"conditions": [{"type": "Ready", "status": "False"}]}})
    queue = zone.queue("q")
    assert scheduler.cache.wait_until(
        lambda: (
            _node_is(scheduler, cordoned, "unschedulable")
            and _node_is(scheduler, tainted, "taints")
            and _not_ready(scheduler, not_ready)
        ),
        30,
    )
    for index in range(4):
        zone.pod(f"p-{index}", queue=queue, gpus=8)
    toleration = client.V1Toleration(key="dedicated", operator="Exists")
    zone.pod("tolerant", queue=queue, gpus=8, tolerations=[toleration])

    assert eventually(lambda: len(bound(kube_api, zone.name, "")) == 2, 60, scheduler.run_cycle)
    for _ in range(2):  # nothing more fits, however often it looks
        scheduler.run_cycle()
    placed = bound(kube_api, zone.name, "")
    assert placed.pop("tolerant") == tainted
    assert list(placed.values()) == [good]  # one of the plain pods; the others wait


def _node_is(scheduler: KubeScheduler, name: str, field: str) -> bool:
    node = scheduler.cache.get("Node", "", name)
    return node is not None and bool((node.get("spec") or {}).get(field))


def _not_ready(scheduler: KubeScheduler, name: str) -> bool:
    node = scheduler.cache.get("Node", "", name)
    conditions = ((node or {}).get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "False" for c in conditions)


def test_a_four_gpu_pod_annotated_with_a_fraction_still_holds_four(
    kube_api: Any, zone: Zone, scheduler: KubeScheduler
) -> None:
    """The kubelet gave both pods 4 whole GPUs; an added `gpu-fraction` annotation (valid or not)
    once made them count as 1 each, and the node was booked past its 8 GPUs."""
    node_a, node_b = zone.node("a"), zone.node("b")
    queue = zone.queue("q")
    zone.pod("web", scheduler="default-scheduler", node=node_a, gpus=4, annotations={"gpu-fraction": "0.5"})
    zone.pod("big", queue=queue, gpus=4)
    assert eventually(lambda: len(bound(kube_api, zone.name, "big")) == 1, 60, scheduler.run_cycle)
    annotation = {"metadata": {"annotations": {"gpu-fraction": "lots"}}}
    client.CoreV1Api(kube_api).patch_namespaced_pod("big", zone.name, annotation)
    assert scheduler.cache.wait_until(
        lambda: "gpu-fraction" in _annotations(scheduler.cache.get("Pod", zone.name, "big")), 30
    )
    for index in range(9):
        zone.pod(f"small-{index}", queue=queue, gpus=1)

    assert eventually(lambda: len(bound(kube_api, zone.name, "small-")) == 8, 60, scheduler.run_cycle)
    for _ in range(3):  # the ninth never fits, however often it looks
        scheduler.run_cycle()
    assert len(bound(kube_api, zone.name, "small-")) == 8
    assert gpus_requested_per_node(kube_api, zone.name) == {node_a: 8, node_b: 8}


def _annotations(pod: dict[str, Any] | None) -> dict[str, str]:
    return dict(((pod or {}).get("metadata") or {}).get("annotations") or {})
