"""Migrating a KAI cluster to kai-ray with the chart, and back (issue 10).

The dev cluster is started with KAI's own CRDs (`../shared/crds/kai`, not kai-ray's) and the
objects a KAI user has: KAI's default queues and priority classes (devcluster seeds them, as
KAI's chart would have), a queue hierarchy with quotas, a PodGroup whose pod KAI already bound
(with its BindRequest), a pending gang and a bare pending pod.  Then:

1. `helm install` of charts/kai-ray must leave every one of those objects as it was (same uid,
   same resourceVersion: not even rewritten), keep KAI's CRDs (helm skips a chart CRD that
   exists; the upstream descriptions, which kai-ray's files do not have, prove it), and render
   no Queue or PriorityClass of its own, since those names are taken.
2. kai-ray takes over: the chart's Deployments never get pods here (no controller-manager), so
   `serve` and `podgrouper` run as local processes with the args of the installed Deployments,
   as the chart's ServiceAccounts.  They must schedule KAI's pending gang into KAI's queue,
   group and schedule the bare pod, and count the pod KAI placed (the queue's allocation and
   where the gang fits both show it), without one request refused by the chart's RBAC.
3. `helm uninstall` takes kai-ray's own objects away and leaves the CRDs, Queues, PodGroups,
   PriorityClasses and running pods: everything a return to KAI needs.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from chart_components import Component, account, refusals
from chart_support import CHART, NAMESPACE, PODGROUPER, RELEASE, SCHEDULER, HelmRunner, one
from kube_serve import wait_until
from kubernetes import client

from kai_ray import devcluster
from kai_ray.devcluster import DevCluster

pytestmark = pytest.mark.kube

KAI_CRDS = devcluster.repo_root().parent / "shared" / "crds" / "kai"
TEAM = "team-a"
GROUP = "scheduling.run.ai"
TIMEOUT = 90.0
GPU = "nvidia.com/gpu"
#: (plural, version) of the KAI objects the migration must keep; all in scheduling.run.ai.
CUSTOM = {"queues": "v2", "podgroups": "v2alpha2", "bindrequests": "v1alpha2"}


@pytest.fixture(scope="module")
def kai_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevCluster]:
    """A cluster as KAI left it: KAI's upstream CRDs and default objects, two 8-GPU nodes."""
    directory = tmp_path_factory.mktemp("kai-cluster")
    cluster = devcluster.start(
        directory,
        nodes=2,
        gpus_per_node=8,
        bin_dir=devcluster.build_bins(),
        crd_dir=KAI_CRDS,
        die_with_parent=True,
        audit=True,
    )
    try:
        yield cluster
    finally:
        devcluster.stop(directory)


@pytest.fixture(scope="module")
def api(kai_cluster: DevCluster) -> Iterator[Any]:
    """An admin client of that cluster."""
    api_client = kai_cluster.api_client()
    try:
        yield api_client
    finally:
        api_client.close()


def core_api(api: Any) -> Any:
    """The core API, untyped: the tests pass plain dict bodies, which the client accepts."""
    return client.CoreV1Api(api)


def custom_api(api: Any) -> Any:
    """The custom objects API (answers are plain dicts)."""
    return client.CustomObjectsApi(api)


# ------------------------------------------------------------------------------ KAI's objects


def queue(name: str, gpu_quota: int, parent: str | None = None) -> dict[str, Any]:
    """A KAI Queue (v2) with a GPU quota and no limit, CPU and memory unlimited."""
    unlimited = {"quota": -1, "limit": -1, "overQuotaWeight": 1}
    spec: dict[str, Any] = {
        "displayName": name.title(),
        "resources": {
            "gpu": {"quota": gpu_quota, "limit": -1, "overQuotaWeight": 1},
            "cpu": unlimited,
            "memory": unlimited,
        },
    }
    if parent:
        spec["parentQueue"] = parent
    return {"apiVersion": f"{GROUP}/v2", "kind": "Queue", "metadata": {"name": name}, "spec": spec}


def pod_group(name: str, min_member: int) -> dict[str, Any]:
    """A PodGroup as a KAI user (or KAI's podgrouper) writes one, in TEAM's queue."""
    return {
        "apiVersion": f"{GROUP}/v2alpha2",
        "kind": "PodGroup",
        "metadata": {"name": name, "labels": {"kai.scheduler/queue": TEAM}},
        "spec": {"minMember": min_member, "queue": TEAM, "priorityClassName": "train"},
    }


def pod(name: str, gpus: int, group: str | None = None, node: str | None = None) -> dict[str, Any]:
    """A pod for KAI: its scheduler name and queue label, linked to `group` by annotation."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": {"kai.scheduler/queue": TEAM},
            "annotations": {"pod-group-name": group} if group else {},
        },
        "spec": {
            "schedulerName": "kai-scheduler",
            **({"nodeName": node} if node else {}),
            "containers": [
                {
                    "name": "main",
                    "image": "busybox",
                    "command": ["sleep", "infinity"],
                    "resources": {"limits": {GPU: str(gpus)}, "requests": {GPU: str(gpus), "cpu": "1"}},
                }
            ],
        },
    }


def create_kai_objects(api: Any) -> None:
    """What a KAI user has: queues, a PodGroup KAI placed (its pod Running, its BindRequest
    Succeeded), a pending 2-pod gang that fits only on the node KAI left empty, a bare pod."""
    core, custom = core_api(api), custom_api(api)
    custom.create_cluster_custom_object(GROUP, "v2", "queues", queue("research", 16))
    custom.create_cluster_custom_object(GROUP, "v2", "queues", queue(TEAM, 8, parent="research"))
    core.create_namespace({"metadata": {"name": TEAM}})
    for name, size in (("warm", 1), ("train", 2)):
        custom.create_namespaced_custom_object(GROUP, "v2alpha2", TEAM, "podgroups", pod_group(name, size))
    # KAI bound warm-0 to gpu-node-0 (6 of its 8 GPUs) through a BindRequest named after the pod.
    core.create_namespaced_pod(TEAM, pod("warm-0", 6, group="warm", node="gpu-node-0"))
    request = {
        "apiVersion": f"{GROUP}/v1alpha2",
        "kind": "BindRequest",
        "metadata": {"name": "warm-0"},
        "spec": {"podName": "warm-0", "selectedNode": "gpu-node-0", "receivedResourceType": "Regular"},
    }
    custom.create_namespaced_custom_object(GROUP, "v1alpha2", TEAM, "bindrequests", request)
    custom.patch_namespaced_custom_object_status(
        GROUP, "v1alpha2", TEAM, "bindrequests", "warm-0", {"status": {"phase": "Succeeded"}}
    )
    # Pending: a gang of two 4-GPU pods (only gpu-node-1 has 8 free), and a pod with no PodGroup.
    for index in range(2):
        core.create_namespaced_pod(TEAM, pod(f"train-{index}", 4, group="train"))
    core.create_namespaced_pod(TEAM, pod("notebook", 1))
    wait_until(
        lambda: core.read_namespaced_pod("warm-0", TEAM).status.phase == "Running",
        TIMEOUT,
        "kwok to run the pod KAI placed",
    )


# ------------------------------------------------------------------------------ snapshots

Key = tuple[str, str, str]


def snapshot(api: Any) -> dict[Key, dict[str, Any]]:
    """Every Queue, PodGroup, BindRequest, PriorityClass, CRD and pod of TEAM, by (kind, ns, name):
    its uid, resourceVersion and what it says (spec, or a PriorityClass's value)."""
    custom = custom_api(api)
    found: dict[Key, dict[str, Any]] = {}

    def keep(kind: str, obj: dict[str, Any], body: Any) -> None:
        meta = obj["metadata"]
        found[(kind, meta.get("namespace", ""), meta["name"])] = {
            "uid": meta["uid"],
            "resourceVersion": meta["resourceVersion"],
            "body": body,
        }

    for plural, version in CUSTOM.items():
        for obj in custom.list_cluster_custom_object(GROUP, version, plural)["items"]:
            keep(plural, obj, obj.get("spec"))
    for obj in as_json(client.SchedulingV1Api(api).list_priority_class)["items"]:
        keep("priorityclasses", obj, {"value": obj["value"], "description": obj.get("description")})
    for obj in as_json(client.ApiextensionsV1Api(api).list_custom_resource_definition)["items"]:
        keep("crds", obj, obj["spec"])
    for obj in as_json(functools.partial(core_api(api).list_namespaced_pod, TEAM))["items"]:
        keep("pods", obj, obj["spec"])
    return found


def as_json(lister: Any) -> dict[str, Any]:
    """A list call's answer as the server's JSON (camelCase keys, comparable with YAML files)."""
    result: dict[str, Any] = json.loads(lister(_preload_content=False).data)
    return result


def upstream_crds() -> dict[str, dict[str, Any]]:
    """KAI's CRD files, by CRD name."""
    return {doc["metadata"]["name"]: doc for doc in devcluster.crd_documents(KAI_CRDS)}


def chart_crds() -> dict[str, dict[str, Any]]:
    """kai-ray's chart CRD files, by CRD name."""
    return {doc["metadata"]["name"]: doc for doc in devcluster.crd_documents(CHART / "crds")}


def description(crd: dict[str, Any]) -> str:
    """The top-level schema description of a CRD's first version: KAI's and kai-ray's differ."""
    return str(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"].get("description", ""))


# ------------------------------------------------------------------------------ kai-ray as the chart runs it


def pod_node(api: Any, name: str) -> str | None:
    """Where the pod is bound, once it Runs (kwok ran it)."""
    found = core_api(api).read_namespaced_pod(name, TEAM)
    return found.spec.node_name if found.status.phase == "Running" else None


def allocated_gpus(api: Any, name: str) -> str | None:
    """The GPUs a queue's status says are allocated (kai-ray writes queue status, as KAI's
    queue-controller does)."""
    found = custom_api(api).get_cluster_custom_object(GROUP, "v2", "queues", name)
    return ((found.get("status") or {}).get("allocated") or {}).get(GPU)


# ------------------------------------------------------------------------------ the test


def test_kai_cluster_moves_to_kai_ray_and_back(
    kai_cluster: DevCluster, api: Any, helm: HelmRunner, tmp_path: Path
) -> None:
    create_kai_objects(api)
    before = snapshot(api)
    upstream = upstream_crds()
    assert {name for kind, _, name in before if kind == "crds"} == set(upstream)
    # The test means something only if the two CRD sets can be told apart.
    assert all(description(upstream[name]) != description(crd) for name, crd in chart_crds().items())

    # 1. Install: every object kept, not even rewritten; KAI's CRDs stay KAI's.
    helm(
        "install",
        RELEASE,
        CHART,
        "--namespace",
        NAMESPACE,
        "--create-namespace",
        kubeconfig=kai_cluster.kubeconfig,
    )
    after_install = snapshot(api)
    assert {key: value for key, value in after_install.items() if key in before} == before
    added = sorted(key for key in after_install if key not in before)
    assert added == [], f"helm install created objects of KAI's kinds: {added}"
    crds = as_json(client.ApiextensionsV1Api(api).list_custom_resource_definition)["items"]
    for crd in crds:
        name = crd["metadata"]["name"]
        assert description(crd) == description(upstream[name]), f"CRD {name} is no longer KAI's"
        assert "meta.helm.sh/release-name" not in (crd["metadata"].get("annotations") or {}), name
    manifest = list(
        yaml.safe_load_all(
            helm("get", "manifest", RELEASE, "-n", NAMESPACE, kubeconfig=kai_cluster.kubeconfig).stdout
        )
    )
    kinds = {doc["kind"] for doc in manifest if doc}
    assert {"Deployment", "ClusterRole", "ServiceAccount"} <= kinds, kinds
    assert not kinds & {"Queue", "PriorityClass", "CustomResourceDefinition"}, kinds

    # 2. kai-ray takes over, as the Deployments would run it.
    objects = [doc for doc in manifest if doc]
    processes: list[Component] = []

    def tails() -> str:
        return "\n".join(process.tail() for process in processes)

    try:
        for name in (PODGROUPER, SCHEDULER):
            deployment = one(objects, "Deployment", name)
            kubeconfig = devcluster.service_account_kubeconfig(
                kai_cluster,
                api,
                NAMESPACE,
                deployment["spec"]["template"]["spec"]["serviceAccountName"],
                tmp_path / f"{name}.kubeconfig",
            )
            processes.append(Component(deployment, objects, kubeconfig, tmp_path))
        wait_until(
            lambda: all(pod_node(api, f"train-{i}") == "gpu-node-1" for i in range(2)),
            TIMEOUT,
            f"KAI's pending gang Running on gpu-node-1 (gpu-node-0 has 6 GPUs of KAI's pod)\n{tails()}",
        )
        wait_until(lambda: pod_node(api, "notebook") is not None, TIMEOUT, f"the bare pod Running\n{tails()}")
        # warm-0 (6) + the gang (8) + notebook (1): KAI's placed pod counts in its queue.
        wait_until(lambda: allocated_gpus(api, TEAM) == "15", TIMEOUT, f"team-a's allocation 15\n{tails()}")
        assert pod_node(api, "warm-0") == "gpu-node-0"
        assert pod_node(api, "notebook") == "gpu-node-0", "binpack: the only node with a free GPU"
        annotations = core_api(api).read_namespaced_pod("notebook", TEAM).metadata.annotations
        group = annotations.get("pod-group-name", "")
        assert group.startswith("pg-notebook-"), annotations
        found = custom_api(api).get_namespaced_custom_object(GROUP, "v2alpha2", TEAM, "podgroups", group)
        assert found["spec"]["queue"] == TEAM
        for process in processes:
            assert process.proc.poll() is None, f"{process.name} exited\n{process.tail()}"
    finally:
        codes = {process.name: process.stop() for process in processes}
    assert codes == {PODGROUPER: 0, SCHEDULER: 0}, tails()
    for process in processes:
        assert refusals(kai_cluster, account(process.account)) == []

    # 3. Uninstall: kai-ray's own objects go, KAI's stay (with the uids they always had).
    scheduled = snapshot(api)
    helm("uninstall", RELEASE, "--namespace", NAMESPACE, kubeconfig=kai_cluster.kubeconfig)
    after_uninstall = snapshot(api)
    for key, value in before.items():
        if key[0] == "bindrequests":
            continue  # kai-ray may clean up a Succeeded BindRequest, as KAI's binder does
        assert key in after_uninstall, f"{key} was deleted"
        assert after_uninstall[key]["uid"] == value["uid"], key
    for key, value in scheduled.items():
        assert after_uninstall.get(key) == value, f"helm uninstall changed {key}"
    for name in ("train-0", "train-1", "notebook", "warm-0"):
        assert pod_node(api, name) is not None, f"{name} no longer runs"
    rbac = client.RbacAuthorizationV1Api(api)
    with pytest.raises(client.ApiException) as gone:
        rbac.read_cluster_role(f"{RELEASE}-scheduler")
    assert gone.value.status == 404
