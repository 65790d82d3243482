"""`kai-ray serve` and `kai-ray podgrouper` run with exactly the RBAC the docs give, and say
which rule is missing (issues 8 and 9).

The manifests of `examples/rbac/` are applied as they are (only their namespace
and the cluster-wide names are made unique to the test), each process runs as
its ServiceAccount, and the scenario touches every permission: grouping bare
pods and a Job's pods (reading the Job), BindRequests and `pods/binding`, a
reclaim through the Eviction API, a stale BindRequest deleted, conditions,
Events, queue status and the lease.  The
API server's audit log must show no refusal for that account, and serve's log
no warning.
"""

from __future__ import annotations

import contextlib
import signal
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kube_serve import Serve, lease_holder, wait_until
from kube_zone import GROUP, Zone
from kubernetes import client

from kai_ray import devcluster
from kai_ray.devcluster import DevCluster, read_audit_events

pytestmark = pytest.mark.kube

RBAC = Path(__file__).resolve().parents[2] / "examples" / "rbac"
MANIFEST = RBAC / "serve-rbac.yaml"
ACCOUNT = "kai-ray-scheduler"
PODGROUPER_MANIFEST = RBAC / "podgrouper-rbac.yaml"
PODGROUPER_ACCOUNT = "kai-ray-podgrouper"


def documented_rbac(namespace: str, manifest: Path = MANIFEST) -> list[dict[str, Any]]:
    """A shipped manifest, in the test's namespace, with cluster-wide names made unique."""
    objects = []
    for doc in yaml.safe_load_all(manifest.read_text()):
        if doc["metadata"].get("namespace") == "kai-ray":
            doc["metadata"]["namespace"] = namespace
        for subject in doc.get("subjects", []):
            subject["namespace"] = namespace
        if doc["kind"] in ("ClusterRole", "ClusterRoleBinding"):
            doc["metadata"]["name"] += f"-{namespace}"
        if doc["kind"] == "ClusterRoleBinding":
            doc["roleRef"]["name"] += f"-{namespace}"
        objects.append(doc)
    return objects


@contextlib.contextmanager
def applied_rbac(kube_api: Any, namespace: str, manifest: Path) -> Iterator[list[dict[str, Any]]]:
    objects = documented_rbac(namespace, manifest)
    rbac_api = client.RbacAuthorizationV1Api(kube_api)
    creators = {
        "ServiceAccount": lambda o: client.CoreV1Api(kube_api).create_namespaced_service_account(
            namespace, o
        ),
        "ClusterRole": rbac_api.create_cluster_role,
        "ClusterRoleBinding": rbac_api.create_cluster_role_binding,
        "Role": lambda o: rbac_api.create_namespaced_role(namespace, o),
        "RoleBinding": lambda o: rbac_api.create_namespaced_role_binding(namespace, o),
    }
    for obj in objects:
        creators[obj["kind"]](obj)
    try:
        yield objects
    finally:
        for obj in objects:
            if obj["kind"] == "ClusterRoleBinding":
                rbac_api.delete_cluster_role_binding(obj["metadata"]["name"])
            elif obj["kind"] == "ClusterRole":
                rbac_api.delete_cluster_role(obj["metadata"]["name"])


@pytest.fixture
def rbac(kube_api: Any, namespace: str) -> Iterator[list[dict[str, Any]]]:
    with applied_rbac(kube_api, namespace, MANIFEST) as objects:
        yield objects


def node_of(kube_api: Any, namespace: str, pod: str) -> str | None:
    try:
        found: str | None = client.CoreV1Api(kube_api).read_namespaced_pod(pod, namespace).spec.node_name
    except client.ApiException as error:
        if error.status == 404:
            return None
        raise
    return found


def refusals_of(cluster: DevCluster, namespace: str, account: str = ACCOUNT) -> list[str]:
    """Requests of the ServiceAccount that its authorization refused, as the audit log records them.

    Other 403s (a namespace another test left terminating) are not about permissions.
    """
    user = f"system:serviceaccount:{namespace}:{account}"
    return [
        f"{e['verb']} {e.get('objectRef')}"
        for e in read_audit_events(cluster)
        if (e.get("user") or {}).get("username") == user
        and (e.get("annotations") or {}).get("authorization.k8s.io/decision") == "forbid"
    ]


def test_serve_works_with_exactly_the_documented_rbac(
    kube_cluster: DevCluster,
    kube_api: Any,
    zone: Zone,
    rbac: list[dict[str, Any]],
    serves: Callable[..., Serve],
    tmp_path: Path,
) -> None:
    node = zone.node("n")
    dept = zone.queue("dept", gpu_quota=8)
    borrower, owner = zone.queue("borrower", dept, gpu_quota=0), zone.queue("owner", dept, gpu_quota=8)
    kubeconfig = devcluster.service_account_kubeconfig(
        kube_cluster, kube_api, zone.name, ACCOUNT, tmp_path / "sa"
    )
    serve = serves(f"{zone.name}-s", zone.name, kubeconfig=kubeconfig)

    # A stale BindRequest (its node is gone): serve must delete it, then schedule the pod itself.
    zone.pod("stale", queue=borrower)
    client.CustomObjectsApi(kube_api).create_namespaced_custom_object(
        GROUP,
        "v1alpha2",
        zone.name,
        "bindrequests",
        {
            "apiVersion": f"{GROUP}/v1alpha2",
            "kind": "BindRequest",
            "metadata": {"name": "stale"},
            "spec": {"podName": "stale", "selectedNode": "no-such-node", "receivedResourceType": "Regular"},
        },
    )
    borrowed = [f"b-{index}" for index in range(6)]
    for name in borrowed:
        zone.pod(name, queue=borrower, priority_class="train")
    job = zone.job("batch", queue=borrower)  # its pod's PodGroup needs the Job read
    zone.pod("batch-0", owners=[job], priority_class="train")
    wait_until(
        lambda: all(node_of(kube_api, zone.name, p) == node for p in ["stale", "batch-0", *borrowed]),
        90,
        f"the borrower's pods on the node\n{serve.tail()}",
    )
    # The owner wants its quota back: reclaim through the Eviction API, then bind.
    zone.pod("rightful", queue=owner, gpus=8)
    wait_until(lambda: node_of(kube_api, zone.name, "rightful") == node, 90, f"the reclaim\n{serve.tail()}")

    # Serve sends Events from a background writer, as client-go's broadcaster does, so the
    # eviction's Event may land after the rightful pod is bound: wait for it, never assume it.
    core = client.CoreV1Api(kube_api)
    wait_until(
        lambda: bool(core.list_namespaced_event(zone.name, field_selector="reason=Evict").items),
        30,
        f"an Evict Event: the reclaim through the documented permissions\n{serve.tail()}",
    )
    # Serve watches the whole shared cluster, where earlier tests left namespaces terminating
    # (writes there fail for that reason); what must never appear is a refusal of its identity.
    user = f"system:serviceaccount:{zone.name}:{ACCOUNT}"
    refused = [
        e for e in serve.entries() if user in str(e.get("message")) or "raw" in e or e.get("level") == "ERROR"
    ]
    assert refused == [], refused
    assert refusals_of(kube_cluster, zone.name) == []
    groups = client.CustomObjectsApi(kube_api).list_namespaced_custom_object(
        GROUP, "v2alpha2", zone.name, "podgroups"
    )
    owners = {pg["metadata"]["ownerReferences"][0]["kind"] for pg in groups["items"]}
    assert owners == {"Pod", "Job"}, owners


def test_the_podgrouper_alone_works_with_exactly_its_documented_rbac(
    kube_cluster: DevCluster,
    kube_api: Any,
    zone: Zone,
    serves: Callable[..., Serve],
    tmp_path: Path,
) -> None:
    """KAI's layout: the podgrouper in its own process and identity, the scheduler without one."""
    node = zone.node("n")
    queue = zone.queue("q", gpu_quota=8)
    with applied_rbac(kube_api, zone.name, PODGROUPER_MANIFEST):
        kubeconfig = devcluster.service_account_kubeconfig(
            kube_cluster, kube_api, zone.name, PODGROUPER_ACCOUNT, tmp_path / "sa"
        )
        grouper = serves(f"{zone.name}-g", zone.name, kubeconfig=kubeconfig, command="podgrouper")
        serve = serves(f"{zone.name}-s", zone.name, "--no-podgrouper")
        job = zone.job("gang", queue=queue, parallelism=2)
        for index in range(2):
            zone.pod(f"gang-{index}", owners=[job], gpus=4)
        zone.pod("alone", queue=queue)
        wait_until(
            lambda: all(node_of(kube_api, zone.name, p) == node for p in ("gang-0", "gang-1", "alone")),
            90,
            f"the grouped pods bound\n{grouper.tail()}\n{serve.tail()}",
        )
        groups = client.CustomObjectsApi(kube_api).list_namespaced_custom_object(
            GROUP, "v2alpha2", zone.name, "podgroups"
        )["items"]
        assert sorted(pg["metadata"]["ownerReferences"][0]["kind"] for pg in groups) == ["Job", "Pod"]
        # Cluster-wide, it may meet what earlier tests left behind; in this namespace, nothing may go wrong.
        troubles = [
            e
            for e in grouper.entries()
            if "raw" in e
            or e.get("level") == "ERROR"
            or (e.get("level") == "WARNING" and zone.name in str(e))
        ]
        assert troubles == []
        assert refusals_of(kube_cluster, zone.name, PODGROUPER_ACCOUNT) == []
        assert lease_holder(kube_api, zone.name, "kai-ray-kai-scheduler-podgrouper") == grouper.identity
        probes = grouper.metrics_url().removesuffix("/metrics")
        for path in ("/healthz", "/readyz"):
            with urllib.request.urlopen(probes + path, timeout=10) as response:
                assert response.status == 200, path
        with urllib.request.urlopen(probes + "/metrics", timeout=10) as response:
            assert b"kai_ray_podgrouper_pods_linked_total 3.0" in response.read()
        grouper.signal(signal.SIGTERM)
        assert grouper.proc.wait(timeout=30) == 0


def test_serve_without_its_permissions_names_them_in_one_line(
    kube_cluster: DevCluster, kube_api: Any, namespace: str, serves: Callable[..., Serve], tmp_path: Path
) -> None:
    kubeconfig = devcluster.service_account_kubeconfig(
        kube_cluster, kube_api, namespace, "nobody", tmp_path / "sa"
    )
    serve = serves(f"{namespace}-s", namespace, kubeconfig=kubeconfig)
    assert serve.proc.wait(timeout=60) == 1
    (entry,) = serve.entries()
    assert entry["level"] == "ERROR"
    assert entry["message"].startswith("missing permissions: get pods, list pods, watch pods, patch pods,")
    assert (
        "create pods/binding" in entry["message"] and "update leases.coordination.k8s.io" in entry["message"]
    )
