"""The chart on a real kube-apiserver (RBAC authorization on): install, run, upgrade, uninstall.

One dev cluster for the module. It starts as a fresh KAI install would leave a cluster, minus
some of KAI's defaults (the `train` and `inference` PriorityClasses and `default-queue` are
deleted first), so `helm install` must create those and leave the others alone.

No kube-controller-manager runs, so the Deployments never get pods. Instead the test runs
`kai-ray serve` and `kai-ray podgrouper` as local processes with exactly the arguments of the
installed Deployments (only the pod name, the config file's path and the metrics port are
filled in), each as the chart's ServiceAccount through a TokenRequest token, and they must
schedule the quickstart (examples/quickstart) without one request refused.

The tests run in file order and share the release: install (fixture), schedule, upgrade,
uninstall.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from chart_components import Component, account, audited, ready, refusals
from chart_support import CHART, NAMESPACE, PODGROUPER, RELEASE, ROOT, SCHEDULER, HelmRunner, find, one
from kube_serve import wait_until
from kube_support import api_for_kubeconfig
from kubernetes import client, dynamic

from kai_ray import devcluster
from kai_ray.devcluster import DevCluster

pytestmark = pytest.mark.kube

KAI_RAY = Path(sys.executable).parent / "kai-ray"
QUICKSTART = ROOT / "examples" / "quickstart"
GROUP = "scheduling.run.ai"
#: KAI defaults the test deletes before installing, so the chart has to create them.
MISSING_CLASSES = ("train", "inference")
KEPT_CLASSES = ("build", "build-preemptible")
MISSING_QUEUE = "default-queue"
#: A CRD deleted first too, so helm installs it from the chart's crds/.
MISSING_CRD = "topologies.kai.scheduler"
KEPT_QUEUE = "default-parent-queue"
KEEP = "helm.sh/resource-policy"
#: Every release's objects, revision by revision (the uninstall test checks all of them).
MANIFESTS: list[list[dict[str, Any]]] = []
#: What `helm install` printed (NOTES.txt).
INSTALL_OUTPUT: list[str] = []


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevCluster]:
    """Four fake 8-GPU nodes (the quickstart's size) on a cluster of this module's own."""
    directory = tmp_path_factory.mktemp("chart-devcluster")
    started = devcluster.start(
        directory,
        nodes=4,
        gpus_per_node=8,
        bin_dir=devcluster.build_bins(),
        die_with_parent=True,
        audit=True,  # the refusals the ServiceAccounts got, from the API server's own record
    )
    try:
        yield started
    finally:
        devcluster.stop(directory)


@pytest.fixture(scope="module")
def admin(cluster: DevCluster) -> Iterator[Any]:
    api = cluster.api_client()
    try:
        yield api
    finally:
        api.close()


def manifest(helm: HelmRunner, cluster: DevCluster, revision: int) -> list[dict[str, Any]]:
    text = helm(
        "get",
        "manifest",
        RELEASE,
        "-n",
        NAMESPACE,
        "--revision",
        str(revision),
        kubeconfig=cluster.kubeconfig,
    )
    return [doc for doc in yaml.safe_load_all(text.stdout) if doc]


@pytest.fixture(scope="module")
def installed(helm: HelmRunner, cluster: DevCluster, admin: Any) -> list[dict[str, Any]]:
    """`helm install` (no --wait: no controller makes the Deployments' pods); the release's objects."""
    for name in MISSING_CLASSES:
        client.SchedulingV1Api(admin).delete_priority_class(name)
    client.CustomObjectsApi(admin).delete_cluster_custom_object(GROUP, "v2", "queues", MISSING_QUEUE)
    client.ApiextensionsV1Api(admin).delete_custom_resource_definition(MISSING_CRD)
    wait_until(lambda: crd_established(admin, MISSING_CRD) is None, 60, f"CRD {MISSING_CRD} deleted")
    out = helm(
        "install", RELEASE, CHART, "-n", NAMESPACE, "--create-namespace", kubeconfig=cluster.kubeconfig
    )
    INSTALL_OUTPUT.append(out.stdout)
    MANIFESTS.append(manifest(helm, cluster, 1))
    return MANIFESTS[0]


def crd_established(admin: Any, name: str) -> bool | None:
    """None when the CRD does not exist, else whether the API server serves it."""
    try:
        crd = client.ApiextensionsV1Api(admin).read_custom_resource_definition(name)
    except client.ApiException as error:
        if error.status == 404:
            return None
        raise
    conditions = (crd.status.conditions if crd.status else None) or []
    return any(c.type == "Established" and c.status == "True" for c in conditions)


def read(admin: Any, obj: dict[str, Any]) -> dict[str, Any] | None:
    """The object as the cluster has it now, or None when it is gone."""
    resource = dynamic.DynamicClient(admin).resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
    try:
        found = resource.get(name=obj["metadata"]["name"], namespace=obj["metadata"].get("namespace"))
    except dynamic.exceptions.NotFoundError:
        return None
    result: dict[str, Any] = found.to_dict()
    return result


def test_install_creates_the_missing_defaults_and_leaves_kais_own_alone(
    installed: list[dict[str, Any]], admin: Any
) -> None:
    rendered_classes = sorted(o["metadata"]["name"] for o in find(installed, "PriorityClass"))
    assert rendered_classes == sorted(MISSING_CLASSES)
    assert [o["metadata"]["name"] for o in find(installed, "Queue")] == [MISSING_QUEUE]
    for obj in installed:
        live = read(admin, obj)
        assert live is not None, f"{obj['kind']} {obj['metadata']['name']} was not created"
        assert live["metadata"]["annotations"]["meta.helm.sh/release-name"] == RELEASE
    queue = client.CustomObjectsApi(admin).get_cluster_custom_object(GROUP, "v2", "queues", MISSING_QUEUE)
    assert queue["metadata"]["annotations"][KEEP] == "keep"
    assert queue["spec"]["parentQueue"] == KEPT_QUEUE
    # What was there before the chart is not the release's and was not touched.
    for name in KEPT_CLASSES:
        kept = client.SchedulingV1Api(admin).read_priority_class(name)
        assert "meta.helm.sh/release-name" not in (kept.metadata.annotations or {})
    parent = client.CustomObjectsApi(admin).get_cluster_custom_object(GROUP, "v2", "queues", KEPT_QUEUE)
    assert "meta.helm.sh/release-name" not in (parent["metadata"].get("annotations") or {})
    # The missing CRD came from crds/ (not part of the release: helm never upgrades nor deletes it).
    wait_until(lambda: crd_established(admin, MISSING_CRD) is True, 60, f"CRD {MISSING_CRD} Established")
    assert not [o for o in installed if o["kind"] == "CustomResourceDefinition"]
    # NOTES.txt tells what was installed and how pods reach it.
    (notes,) = INSTALL_OUTPUT
    assert f"Scheduler:  Deployment {SCHEDULER} (2 replica(s))" in notes
    assert f"Podgrouper: Deployment {PODGROUPER} (2 replica(s))" in notes
    assert "schedulerName: kai-scheduler" in notes and "kai.scheduler/queue: default-queue" in notes


def apply(admin: Any, path: Path) -> list[dict[str, Any]]:
    """Create the quickstart's objects (Namespaces, Queues, PodGroups, Pods) as an admin would."""
    core, custom = client.CoreV1Api(admin), client.CustomObjectsApi(admin)
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    for doc in docs:
        kind, namespace = doc["kind"], doc["metadata"].get("namespace")
        if kind == "Namespace":
            core.create_namespace(doc)
        elif kind == "Pod":
            core.create_namespaced_pod(namespace, doc)
        elif kind == "Queue":
            custom.create_cluster_custom_object(GROUP, "v2", "queues", doc)
        elif kind == "PodGroup":
            custom.create_namespaced_custom_object(GROUP, "v2alpha2", namespace, "podgroups", doc)
        else:
            raise AssertionError(f"{path}: no creator for {kind}")
    return docs


def test_the_installed_deployments_schedule_the_quickstart_as_their_service_accounts(
    installed: list[dict[str, Any]], cluster: DevCluster, admin: Any, tmp_path: Path
) -> None:
    deployments = {d["metadata"]["name"]: read(admin, d) for d in find(installed, "Deployment")}
    assert sorted(deployments) == [PODGROUPER, SCHEDULER]
    config_map = read(admin, one(installed, "ConfigMap", SCHEDULER))
    assert config_map is not None
    live: list[dict[str, Any]] = [config_map]
    components: list[Component] = []
    try:
        for name, deployment in sorted(deployments.items(), reverse=True):  # the scheduler first
            assert deployment is not None
            kubeconfig = devcluster.service_account_kubeconfig(
                cluster,
                admin,
                NAMESPACE,
                deployment["spec"]["template"]["spec"]["serviceAccountName"],
                tmp_path / f"{name}.kubeconfig",
            )
            components.append(Component(deployment, live, kubeconfig, tmp_path))
        scheduler, grouper = components
        assert "--no-podgrouper" in scheduler.argv and grouper.argv[1] == "podgrouper"
        for component in components:
            url = component.url()
            wait_until(lambda url=url: ready(url), 60, f"{component.name} /readyz\n{component.tail()}")

        apply(admin, QUICKSTART / "queues.yaml")
        workloads = apply(admin, QUICKSTART / "workloads.yaml")
        pods = [(d["metadata"]["namespace"], d["metadata"]["name"]) for d in workloads if d["kind"] == "Pod"]
        fits = [(ns, name) for ns, name in pods if not name.startswith("too-big")]
        core = client.CoreV1Api(admin)

        def running() -> bool:
            for component in components:
                assert component.proc.poll() is None, f"{component.name} exited\n{component.tail()}"
            return all(core.read_namespaced_pod(name, ns).status.phase == "Running" for ns, name in fits)

        wait_until(running, 120, f"the quickstart Running\n{scheduler.tail()}\n{grouper.tail()}", step=0.25)
        nodes = {core.read_namespaced_pod(name, ns).spec.node_name for ns, name in fits}
        assert nodes <= set(cluster.nodes)
        assert all(
            core.read_namespaced_pod(name, ns).spec.node_name is None
            for ns, name in pods
            if (ns, name) not in fits
        )

        # The podgrouper (as its own account) made the PodGroups of the bare pods; the scheduler bound.
        bare = sorted(name for ns, name in fits if not name.startswith("distributed-train"))
        made = [
            e
            for e in audited(cluster, account(PODGROUPER))
            if e["verb"] == "create"
            and e["objectRef"]["resource"] == "podgroups"
            and e["responseStatus"]["code"] == 201
        ]
        assert len(made) == len(bare), made
        owners = []
        for namespace in ("team-a", "team-b"):
            groups = client.CustomObjectsApi(admin).list_namespaced_custom_object(
                GROUP, "v2alpha2", namespace, "podgroups"
            )
            owners += [r["name"] for g in groups["items"] for r in g["metadata"].get("ownerReferences", [])]
        assert sorted(owners) == bare
        bindings = [
            e
            for e in audited(cluster, account(SCHEDULER))
            if e["verb"] == "create" and e["objectRef"].get("subresource") == "binding"
        ]
        assert sorted({e["objectRef"]["name"] for e in bindings}) == sorted(name for _, name in fits)

        # Not one request of either account was refused, and neither logged an error.
        for component in components:
            assert refusals(cluster, account(component.account)) == []
            troubles = [e for e in component.entries() if "raw" in e or e.get("level") == "ERROR"]
            assert troubles == [], troubles
    finally:
        codes = {component.name: component.stop() for component in components}
    assert codes == {SCHEDULER: 0, PODGROUPER: 0}

    # And what the chart does not grant is refused: Secrets, deleting a Node.
    for component in components:
        api = api_for_kubeconfig(tmp_path / f"{component.name}.kubeconfig")
        try:
            core = client.CoreV1Api(api)
            attempts: list[tuple[Callable[..., Any], tuple[str, ...]]] = [
                (core.list_namespaced_secret, (NAMESPACE,)),
                (core.list_secret_for_all_namespaces, ()),
                (core.delete_node, (cluster.nodes[0],)),
            ]
            for attempt, args in attempts:
                with pytest.raises(client.ApiException) as refused:
                    attempt(*args)
                assert refused.value.status == 403, attempt
        finally:
            api.close()
        # The audit log records the refused delete, so the "no refusal" check above could fail.
        assert refusals(cluster, account(component.account)) == [
            f"delete {{'resource': 'nodes', 'name': '{cluster.nodes[0]}', 'apiVersion': 'v1'}}"
        ]
    assert client.CoreV1Api(admin).read_node(cluster.nodes[0]).metadata.name == cluster.nodes[0]


def test_upgrade_applies_a_changed_value(
    installed: list[dict[str, Any]], helm: HelmRunner, cluster: DevCluster, admin: Any
) -> None:
    before = read(admin, one(installed, "Deployment", SCHEDULER))
    assert before is not None and before["spec"]["replicas"] == 2
    helm(
        "upgrade",
        RELEASE,
        CHART,
        "-n",
        NAMESPACE,
        "--reuse-values",
        "--set",
        "scheduler.placementStrategy=spread",
        "--set",
        "scheduler.replicas=1",
        kubeconfig=cluster.kubeconfig,
    )
    MANIFESTS.append(manifest(helm, cluster, 2))
    after = read(admin, one(installed, "Deployment", SCHEDULER))
    assert after is not None and after["spec"]["replicas"] == 1
    annotation = "checksum/config"
    assert (
        after["spec"]["template"]["metadata"]["annotations"][annotation]
        != (before["spec"]["template"]["metadata"]["annotations"][annotation])
    ), "a changed config must roll the pods (serve reads it once)"
    config_map = read(admin, one(installed, "ConfigMap", SCHEDULER))
    assert config_map is not None
    config = yaml.safe_load(config_map["data"]["config.yaml"])
    assert config["actions"] == "allocate, reclaim, preempt, stalegangeviction"
    plugins = [p["name"] for p in config["tiers"][0]["plugins"]]
    assert "gpuspread" in plugins and "gpupack" not in plugins
    # One replica: no budget for the scheduler any more; the podgrouper (2 replicas) keeps its own.
    assert read(admin, one(installed, "PodDisruptionBudget", SCHEDULER)) is None
    assert read(admin, one(installed, "PodDisruptionBudget", PODGROUPER)) is not None
    # The release's PriorityClasses stay its own; the default queue, install-only, stays (kept).
    assert sorted(o["metadata"]["name"] for o in find(MANIFESTS[-1], "PriorityClass")) == sorted(
        MISSING_CLASSES
    )
    assert find(MANIFESTS[-1], "Queue") == []
    assert read(admin, one(installed, "Queue", MISSING_QUEUE)) is not None
    status = json.loads(
        helm("status", RELEASE, "-n", NAMESPACE, "-o", "json", kubeconfig=cluster.kubeconfig).stdout
    )
    assert status["version"] == 2 and status["info"]["status"] == "deployed"


def test_uninstall_leaves_nothing_but_what_is_kept(
    installed: list[dict[str, Any]], helm: HelmRunner, cluster: DevCluster, admin: Any
) -> None:
    created = {
        (o["apiVersion"], o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]): o
        for revision in MANIFESTS
        for o in revision
    }
    cluster_scoped = {kind for (_, kind, namespace, _) in created if namespace is None}
    assert {"ClusterRole", "ClusterRoleBinding", "PriorityClass", "Queue"} <= cluster_scoped
    helm("uninstall", RELEASE, "-n", NAMESPACE, kubeconfig=cluster.kubeconfig)
    kept = {
        key for key, obj in created.items() if (obj["metadata"].get("annotations") or {}).get(KEEP) == "keep"
    }
    assert kept == {("scheduling.run.ai/v2", "Queue", None, MISSING_QUEUE)}
    for key in kept:
        assert read(admin, created[key]) is not None, f"{key} is annotated keep but was deleted"

    def left() -> list[str]:
        return [str(key) for key, obj in created.items() if key not in kept and read(admin, obj) is not None]

    try:
        # helm uninstall has returned once every delete was accepted; nothing here has finalizers.
        wait_until(lambda: not left(), 30, "the release's objects deleted")
    except AssertionError:
        assert left() == []
    # Nothing else carries the release's label either (what a template might make outside the manifest).
    selector = f"app.kubernetes.io/instance={RELEASE}"
    rbac, core = client.RbacAuthorizationV1Api(admin), client.CoreV1Api(admin)
    labelled = [
        *client.SchedulingV1Api(admin).list_priority_class(label_selector=selector).items,
        *rbac.list_cluster_role(label_selector=selector).items,
        *rbac.list_cluster_role_binding(label_selector=selector).items,
        *rbac.list_namespaced_role(NAMESPACE, label_selector=selector).items,
        *rbac.list_namespaced_role_binding(NAMESPACE, label_selector=selector).items,
        *core.list_namespaced_service_account(NAMESPACE, label_selector=selector).items,
        *core.list_namespaced_config_map(NAMESPACE, label_selector=selector).items,
        *core.list_namespaced_service(NAMESPACE, label_selector=selector).items,
        *client.AppsV1Api(admin).list_namespaced_deployment(NAMESPACE, label_selector=selector).items,
        *client.PolicyV1Api(admin)
        .list_namespaced_pod_disruption_budget(NAMESPACE, label_selector=selector)
        .items,
    ]
    assert [f"{o.kind} {o.metadata.name}" for o in labelled] == []
    queues = client.CustomObjectsApi(admin).list_cluster_custom_object(
        GROUP, "v2", "queues", label_selector=selector
    )
    assert [q["metadata"]["name"] for q in queues["items"]] == [MISSING_QUEUE]
    # KAI's own defaults and the CRDs are still there.
    for name in KEPT_CLASSES:
        client.SchedulingV1Api(admin).read_priority_class(name)
    client.CustomObjectsApi(admin).get_cluster_custom_object(GROUP, "v2", "queues", KEPT_QUEUE)
    crds = {c.metadata.name for c in client.ApiextensionsV1Api(admin).list_custom_resource_definition().items}
    assert {
        "queues.scheduling.run.ai",
        "podgroups.scheduling.run.ai",
        "bindrequests.scheduling.run.ai",
    } <= crds
    assert crd_established(admin, MISSING_CRD) is True
    proc = helm("status", RELEASE, "-n", NAMESPACE, kubeconfig=cluster.kubeconfig, check=False)
    assert proc.returncode != 0 and "not found" in proc.stderr
