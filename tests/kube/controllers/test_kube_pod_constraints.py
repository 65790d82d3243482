"""Pod constraints on a real API server with kube-controller-manager and kwok (issue 34): a
Deployment's replicas with required anti-affinity go one per node and the one left over says why
on its PodGroup; pods binding one host port go one per node; pods asking for an extended resource
land only on the node that publishes it."""

from __future__ import annotations

from typing import Any

import pytest
from kai_ray_operators.controller import PodGroupController
from kube_support import eventually
from kube_zone import ZONE_LABEL, Zone, gpu_pod
from kubernetes import client
from storage_builders import claim

from kai_ray.server.scheduler import KubeScheduler

pytestmark = pytest.mark.kube

HOST = "kubernetes.io/hostname"


def conditions(api: Any, namespace: str) -> list[str]:
    custom = client.CustomObjectsApi(api)
    groups = custom.list_namespaced_custom_object("scheduling.run.ai", "v2alpha2", namespace, "podgroups")
    return [
        condition.get("message", "")
        for group in groups["items"]
        for condition in (group.get("status") or {}).get("schedulingConditions", [])
    ]


def condition_reasons(api: Any, namespace: str) -> list[dict[str, str]]:
    """Every `reasons[]` entry of the namespace's PodGroups' scheduling conditions, as stored."""
    custom = client.CustomObjectsApi(api)
    groups = custom.list_namespaced_custom_object("scheduling.run.ai", "v2alpha2", namespace, "podgroups")
    return [
        reason
        for group in groups["items"]
        for condition in (group.get("status") or {}).get("schedulingConditions", [])
        for reason in condition.get("reasons") or []
    ]


def placed(core: client.CoreV1Api, namespace: str) -> dict[str, str | None]:
    return {pod.metadata.name: pod.spec.node_name for pod in core.list_namespaced_pod(namespace).items}


def run_until(api: Any, namespace: str, done: Any) -> None:
    scheduler = KubeScheduler(api, namespace=namespace, grouper=PodGroupController(api))
    scheduler.start()
    try:
        assert eventually(done, 90, scheduler.run_cycle)
    finally:
        scheduler.stop()


def test_a_deployment_with_required_anti_affinity_binds_one_replica_per_node_and_explains_the_fourth(
    kube_api: Any, zone: Zone
) -> None:
    for suffix in ("n0", "n1", "n2"):
        zone.node(suffix)
    queue = zone.queue("team")
    namespace, core = zone.name, client.CoreV1Api(kube_api)
    term = {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": HOST}
    client.AppsV1Api(kube_api).create_namespaced_deployment(
        namespace,
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "web", "labels": {"kai.scheduler/queue": queue}},
            "spec": {
                "replicas": 4,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {
                        "schedulerName": "kai-scheduler",
                        "nodeSelector": {ZONE_LABEL: namespace},
                        "affinity": {
                            "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}
                        },
                        "containers": [
                            {
                                "name": "server",
                                "image": "busybox",
                                "resources": {"limits": {"nvidia.com/gpu": "1"}},
                            }
                        ],
                    },
                },
            },
        },
    )
    assert eventually(lambda: len(placed(core, namespace)) == 4, 60)

    def three_bound_and_the_fourth_explained() -> bool:
        nodes = [node for node in placed(core, namespace).values() if node]
        explained = any("pod anti-affinity with" in message for message in conditions(kube_api, namespace))
        return len(nodes) == 3 and explained

    run_until(kube_api, namespace, three_bound_and_the_fourth_explained)
    nodes = [node for node in placed(core, namespace).values() if node]
    assert sorted(nodes) == sorted(zone.nodes)
    message = next(m for m in conditions(kube_api, namespace) if "pod anti-affinity" in m)
    assert f"3 nodes: pod anti-affinity with {namespace}/web-" in message
    assert HOST in message
    # The typed refusal beside KAI's own explanation, kept by the PodGroup CRD as written.
    typed = [r for r in condition_reasons(kube_api, namespace) if r["reason"] == "InterPodAntiAffinity"]
    assert typed and typed[0]["message"].startswith(f"3 nodes: pod anti-affinity with {namespace}/web-")


def test_pods_binding_one_host_port_go_one_per_node(kube_api: Any, zone: Zone) -> None:
    zone.node("n0")
    zone.node("n1")
    queue = zone.queue("team")
    namespace, core = zone.name, client.CoreV1Api(kube_api)
    for i in range(3):
        body = gpu_pod(f"exporter-{i}", namespace, queue=queue, gpus=0)
        body.spec.containers[0].ports = [client.V1ContainerPort(container_port=9400, host_port=9400)]
        core.create_namespaced_pod(namespace, body)

    def two_bound_and_the_third_explained() -> bool:
        explained = any("host port 9400/TCP in use" in m for m in conditions(kube_api, namespace))
        return sum(1 for node in placed(core, namespace).values() if node) == 2 and explained

    run_until(kube_api, namespace, two_bound_and_the_third_explained)
    nodes = [node for node in placed(core, namespace).values() if node]
    assert sorted(nodes) == sorted(zone.nodes)


def test_pods_asking_for_an_extended_resource_land_only_where_it_is_published(
    kube_api: Any, zone: Zone
) -> None:
    zone.node("plain")
    rdma = zone.node("rdma", extended={"rdma/hca": "1"})
    queue = zone.queue("team")
    namespace, core = zone.name, client.CoreV1Api(kube_api)
    for i in range(2):
        body = gpu_pod(f"trainer-{i}", namespace, queue=queue)
        body.spec.containers[0].resources.limits["rdma/hca"] = "1"
        core.create_namespaced_pod(namespace, body)

    def one_bound_and_the_other_explained() -> bool:
        explained = any("insufficient rdma/hca" in m for m in conditions(kube_api, namespace))
        return sum(1 for node in placed(core, namespace).values() if node) == 1 and explained

    run_until(kube_api, namespace, one_bound_and_the_other_explained)
    assert [node for node in placed(core, namespace).values() if node] == [rdma]


def test_a_claim_naming_an_unknown_storage_class_is_reported_on_pod_and_podgroup_and_others_bind(
    kube_api: Any, zone: Zone
) -> None:
    zone.node("n0")
    queue = zone.queue("team")
    namespace, core = zone.name, client.CoreV1Api(kube_api)
    core.create_namespaced_persistent_volume_claim(
        namespace, claim("data", namespace, storage_class=f"{namespace}-missing")
    )
    broken = gpu_pod("reader", namespace, queue=queue)
    broken.spec.volumes = [
        client.V1Volume(
            name="data", persistent_volume_claim=client.V1PersistentVolumeClaimVolumeSource(claim_name="data")
        )
    ]
    core.create_namespaced_pod(namespace, broken)
    core.create_namespaced_pod(namespace, gpu_pod("fine", namespace, queue=queue))
    field = "spec.volumes[0].persistentVolumeClaim"

    def reported() -> bool:
        events = core.list_namespaced_event(namespace).items
        on_pod = any(
            e.reason == "InvalidObject" and e.involved_object.name == "reader" and field in e.message
            for e in events
        )
        on_group = any(field in message for message in conditions(kube_api, namespace))
        return on_pod and on_group and placed(core, namespace)["fine"] is not None

    run_until(kube_api, namespace, reported)
    assert placed(core, namespace)["reader"] is None
