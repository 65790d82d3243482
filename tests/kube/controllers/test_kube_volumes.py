"""Volumes and ConfigMaps on a real API server (issue 34, items 6 and 7): a pod whose claim is
bound to a local volume lands on that volume's node, a `WaitForFirstConsumer` claim is annotated
with the pod's node before the pod is bound (in both bind modes), and a pod waiting for a missing
ConfigMap says so on its PodGroup and is bound in the first cycle after the ConfigMap exists.

They run on the dev cluster with kube-controller-manager. Claims are bound here by writing
`spec.volumeName` and `status.phase` as the PersistentVolume controller would (the claims are
pre-bound, so that controller, which runs here, agrees)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kai_ray_operators.controller import PodGroupController
from kube_support import eventually
from kube_zone import Zone, gpu_pod
from kubernetes import client

from kai_ray.cluster.kube.bind_mode import BindMode
from kai_ray.devcluster import DevCluster
from kai_ray.devcluster.audit import read_audit_events
from kai_ray.server.scheduler import KubeScheduler

pytestmark = pytest.mark.kube

SELECTED_NODE = "volume.kubernetes.io/selected-node"
HOST = "kubernetes.io/hostname"


class Storage:
    """The cluster-scoped PersistentVolumes and StorageClasses one test makes, removed afterwards."""

    def __init__(self, api: Any) -> None:
        self.core = client.CoreV1Api(api)
        self.storage = client.StorageV1Api(api)
        self.volumes: list[str] = []
        self.classes: list[str] = []

    def local_volume(self, name: str, node: str, claim: tuple[str, str]) -> None:
        term = {"matchExpressions": [{"key": HOST, "operator": "In", "values": [node]}]}
        self.core.create_persistent_volume(
            {
                "apiVersion": "v1",
                "kind": "PersistentVolume",
                "metadata": {"name": name},
                "spec": {
                    "capacity": {"storage": "10Gi"},
                    "accessModes": ["ReadWriteOnce"],
                    "storageClassName": "",
                    "local": {"path": "/mnt/disks/ssd1"},
                    "claimRef": {"namespace": claim[0], "name": claim[1]},
                    "nodeAffinity": {"required": {"nodeSelectorTerms": [term]}},
                },
            }
        )
        self.volumes.append(name)

    def delayed_class(self, name: str, node: str) -> None:
        self.storage.create_storage_class(
            {
                "apiVersion": "storage.k8s.io/v1",
                "kind": "StorageClass",
                "metadata": {"name": name},
                "provisioner": "example.com/nobody",
                "volumeBindingMode": "WaitForFirstConsumer",
                "allowedTopologies": [{"matchLabelExpressions": [{"key": HOST, "values": [node]}]}],
            }
        )
        self.classes.append(name)

    def close(self) -> None:
        for name in self.volumes:
            self.core.delete_persistent_volume(name)
            # Its protection finalizer is lifted by a controller that may not run here (and
            # where it runs, the volume may be gone already).
            try:
                self.core.patch_persistent_volume(name, {"metadata": {"finalizers": None}})
            except client.ApiException as error:
                if error.status != 404:
                    raise
        for name in self.classes:
            self.storage.delete_storage_class(name)


@pytest.fixture
def storage(kube_api: Any) -> Iterator[Storage]:
    made = Storage(kube_api)
    try:
        yield made
    finally:
        made.close()


@pytest.fixture
def zone(zone: Zone) -> Zone:
    """Two alike 8-GPU nodes (a pod with no other reason goes to the first) and a queue."""
    for suffix in ("n0", "n1"):
        zone.node(suffix)
    zone.queue("team", gpu_quota=16)
    return zone


def claim(core: client.CoreV1Api, namespace: str, name: str, storage_class: str, volume: str = "") -> None:
    spec: dict[str, Any] = {
        "accessModes": ["ReadWriteOnce"],
        "storageClassName": storage_class,
        "resources": {"requests": {"storage": "1Gi"}},
    }
    if volume:
        spec["volumeName"] = volume
    core.create_namespaced_persistent_volume_claim(
        namespace,
        {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name}, "spec": spec},
    )
    if volume:
        core.patch_namespaced_persistent_volume_claim_status(name, namespace, {"status": {"phase": "Bound"}})


def create_pod(zone: Zone, name: str, volumes: list[client.V1Volume], **container: Any) -> None:
    body = gpu_pod(name, zone.name, queue=zone.queues[-1])
    body.spec.volumes = volumes
    for key, value in container.items():
        setattr(body.spec.containers[0], key, value)
    client.CoreV1Api(zone.api).create_namespaced_pod(zone.name, body)


def claim_volume(claim_name: str) -> client.V1Volume:
    return client.V1Volume(
        name="data", persistent_volume_claim=client.V1PersistentVolumeClaimVolumeSource(claim_name=claim_name)
    )


def node_of(core: client.CoreV1Api, namespace: str, pod: str) -> str | None:
    spec = core.read_namespaced_pod(pod, namespace).spec
    return spec.node_name if spec else None


def test_a_pod_whose_claim_is_bound_to_a_local_volume_lands_on_the_volumes_node(
    kube_api: Any, zone: Zone, storage: Storage
) -> None:
    namespace, core = zone.name, client.CoreV1Api(kube_api)
    target = zone.nodes[1]
    storage.local_volume(f"{namespace}-ssd", target, (namespace, "data"))
    claim(core, namespace, "data", "", volume=f"{namespace}-ssd")
    create_pod(zone, "reader", [claim_volume("data")])
    scheduler = KubeScheduler(kube_api, namespace=namespace, grouper=PodGroupController(kube_api))
    scheduler.start()
    try:
        assert eventually(lambda: node_of(core, namespace, "reader") is not None, 60, scheduler.run_cycle)
    finally:
        scheduler.stop()
    assert node_of(core, namespace, "reader") == target


@pytest.mark.parametrize("bind_mode", [BindMode.BIND_REQUEST, BindMode.DIRECT])
def test_a_delayed_claim_gets_the_pods_node_before_the_pod_is_bound_there(
    kube_api: Any, kube_cluster: DevCluster, zone: Zone, storage: Storage, bind_mode: BindMode
) -> None:
    namespace, core = zone.name, client.CoreV1Api(kube_api)
    target = zone.nodes[1]
    storage.delayed_class(f"{namespace}-delayed", target)
    claim(core, namespace, "scratch", f"{namespace}-delayed")
    create_pod(zone, "writer", [claim_volume("scratch")])
    scheduler = KubeScheduler(
        kube_api, namespace=namespace, grouper=PodGroupController(kube_api), bind_mode=bind_mode
    )
    scheduler.start()
    outcomes = []
    try:
        assert eventually(
            lambda: node_of(core, namespace, "writer") is not None,
            60,
            lambda: outcomes.append(scheduler.run_cycle()),
        )
    finally:
        scheduler.stop()
    assert node_of(core, namespace, "writer") == target
    annotations = core.read_namespaced_persistent_volume_claim("scratch", namespace).metadata.annotations
    assert annotations[SELECTED_NODE] == target
    assert not [error for outcome in outcomes for error in outcome.applied.errors]
    # The claim was written first, then the pod was given its node (its BindRequest, or the binding).
    writes = [
        (ref.get("resource"), ref.get("subresource", ""), ref.get("name"))
        for event in read_audit_events(kube_cluster)
        if event.get("stage") == "ResponseComplete"
        and event.get("verb") in ("create", "patch")
        and (ref := event.get("objectRef") or {}).get("namespace") == namespace
        and ref.get("resource") in ("persistentvolumeclaims", "bindrequests", "pods")
        and ref.get("subresource", "") in ("", "binding")
        and ref.get("name") in ("scratch", "writer")
    ]
    annotated = writes.index(("persistentvolumeclaims", "", "scratch"))
    bound = (
        ("bindrequests", "", "writer")
        if bind_mode is BindMode.BIND_REQUEST
        else ("pods", "binding", "writer")
    )
    assert annotated < writes.index(bound)


def test_a_pod_waiting_for_a_config_map_says_why_and_is_bound_in_the_cycle_after_it_is_made(
    kube_api: Any, zone: Zone
) -> None:
    namespace, core = zone.name, client.CoreV1Api(kube_api)
    env_from = [client.V1EnvFromSource(config_map_ref=client.V1ConfigMapEnvSource(name="settings"))]
    create_pod(zone, "reader", [], env_from=env_from)
    scheduler = KubeScheduler(kube_api, namespace=namespace, grouper=PodGroupController(kube_api))
    scheduler.start()
    custom = client.CustomObjectsApi(kube_api)
    missing = f"configmap {namespace}/settings not found"

    def says_why() -> bool:
        groups = custom.list_namespaced_custom_object("scheduling.run.ai", "v2alpha2", namespace, "podgroups")
        conditions = [
            c for g in groups["items"] for c in (g.get("status") or {}).get("schedulingConditions", [])
        ]
        return any(missing in c.get("message", "") for c in conditions)

    try:
        assert eventually(says_why, 60, scheduler.run_cycle)
        assert node_of(core, namespace, "reader") is None
        core.create_namespaced_config_map(
            namespace,
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings"}, "data": {"a": "b"}},
        )
        cache = scheduler.cache
        assert cache.wait_until(lambda: cache.get("ConfigMap", namespace, "settings") is not None, 30)
        outcome = scheduler.run_cycle()
    finally:
        scheduler.stop()
    assert [bind.task for bind in outcome.plan.binds] == ["reader"]
    assert node_of(core, namespace, "reader") is not None


def test_a_claim_naming_an_unknown_storage_class_is_reported_on_its_pod_and_the_others_are_bound(
    kube_api: Any, zone: Zone
) -> None:
    """Bad input (issue 34, item 10): an InvalidObject Event on the pod names the volume's field."""
    namespace, core = zone.name, client.CoreV1Api(kube_api)
    claim(core, namespace, "scratch", f"{namespace}-no-such-class")
    create_pod(zone, "writer", [claim_volume("scratch")])
    create_pod(zone, "other", [])
    scheduler = KubeScheduler(kube_api, namespace=namespace, grouper=PodGroupController(kube_api))
    scheduler.start()
    field = "spec.volumes[0].persistentVolumeClaim"

    def reported() -> bool:
        events = core.list_namespaced_event(namespace, field_selector="involvedObject.name=writer").items
        return any(e.reason == "InvalidObject" and field in (e.message or "") for e in events)

    try:
        # Every cycle runs to its end (`run_cycle` raises otherwise) while the pod stays reported.
        assert eventually(
            lambda: node_of(core, namespace, "other") is not None and reported(), 60, scheduler.run_cycle
        )
    finally:
        scheduler.stop()
    assert node_of(core, namespace, "writer") is None
