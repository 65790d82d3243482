"""The test control plane itself: a real kube-apiserver + etcd, seeded like a fresh KAI install.

These tests pin down what every other Kubernetes test relies on: authenticated TLS access,
established CRDs, the default queues and priority classes, fake GPU nodes, a pod runner that
turns bound pods Running and finalizes deleted ones, and start/stop leaving no processes,
credentials private while running and gone after stop, the opt-in audit log, and a
non-admin ServiceAccount identity.
"""

from __future__ import annotations

import dataclasses
import json
import os
import ssl
import stat
import threading
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kube_support import api_for_kubeconfig, processes_mentioning, wait_for
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kai_ray import devcluster
from kai_ray.devcluster import DevCluster

pytestmark = pytest.mark.kube


def make_pod(name: str, gpus: int = 1) -> client.V1Pod:
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, labels={"kai.scheduler/queue": "default-queue"}),
        spec=client.V1PodSpec(
            scheduler_name="kai-scheduler",
            containers=[
                client.V1Container(
                    name="main",
                    image="busybox",
                    resources=client.V1ResourceRequirements(limits={"nvidia.com/gpu": str(gpus)}),
                )
            ],
        ),
    )


def bind(core: client.CoreV1Api, namespace: str, pod: str, node: str) -> None:
    """Bind through the pods/binding subresource, as kai-ray's binder does."""
    body = client.V1Binding(
        metadata=client.V1ObjectMeta(name=pod),
        target=client.V1ObjectReference(api_version="v1", kind="Node", name=node),
    )
    # The generated client cannot deserialize the (empty) Status this returns; skip decoding.
    core.create_namespaced_binding(namespace, body, _preload_content=False)


def phase(core: client.CoreV1Api, namespace: str, pod: str) -> str:
    return str(core.read_namespaced_pod(pod, namespace).status.phase)


def gone(core: client.CoreV1Api, namespace: str, pod: str) -> bool | None:
    try:
        core.read_namespaced_pod(pod, namespace)
    except ApiException as exc:
        if exc.status == 404:
            return True
        raise
    return None


def _get(url: str, token: str | None, ca_file: Path) -> tuple[int, str]:
    req = urllib.request.Request(url)
    if token is not None:
        req.add_header("Authorization", f"Bearer {token}")
    ctx = ssl.create_default_context(cafile=str(ca_file))
    try:
        with urllib.request.urlopen(req, timeout=10, context=ctx) as resp:
            return int(resp.status), resp.read().decode()
    except urllib.error.HTTPError as exc:
        return int(exc.code), ""


# ------------------------------------------------------------------------------------------


def test_apiserver_answers_over_verified_tls_with_token_auth(kube_cluster: DevCluster, kube_api: Any) -> None:
    status, body = _get(f"{kube_cluster.server}/readyz", kube_cluster.token, kube_cluster.ca_file)
    assert (status, body) == (200, "ok")
    # Anonymous requests are authenticated as system:anonymous and refused by RBAC: the token is real.
    anon_status, _ = _get(f"{kube_cluster.server}/api/v1/namespaces", None, kube_cluster.ca_file)
    assert anon_status in (401, 403)
    version = client.VersionApi(kube_api).get_code()
    assert version.major == "1" and version.git_version.startswith("v1.")
    assert kube_cluster.server.startswith("https://127.0.0.1:")


def test_kubeconfig_file_works_for_a_standard_client(kube_cluster: DevCluster) -> None:
    from kubernetes import config

    api = config.new_client_from_config(config_file=str(kube_cluster.kubeconfig))
    try:
        names = {ns.metadata.name for ns in client.CoreV1Api(api).list_namespace().items}
    finally:
        api.close()
    assert {"default", "kube-system"} <= names


def test_state_file_records_live_processes_and_loopback_ports(kube_cluster: DevCluster) -> None:
    state = json.loads((kube_cluster.dir / "state.json").read_text())
    assert set(state["processes"]) == {"etcd", "kube-apiserver", "pod-runner"}
    for info in state["processes"].values():
        os.kill(info["pid"], 0)  # raises if the process is gone
    assert state["ports"]["kube-apiserver"] == int(kube_cluster.server.rsplit(":", 1)[1])
    assert kube_cluster.etcd_url == f"http://127.0.0.1:{state['ports']['etcd']}"


def test_crds_are_established(kube_api: Any) -> None:
    ext = client.ApiextensionsV1Api(kube_api)
    expected = {doc["metadata"]["name"] for doc in devcluster.generated_crds()}
    assert {
        "queues.scheduling.run.ai",
        "podgroups.scheduling.run.ai",
        "bindrequests.scheduling.run.ai",
    } <= expected
    for name in expected:
        crd = ext.read_custom_resource_definition(name)
        conditions = {c.type: c.status for c in crd.status.conditions}
        assert conditions.get("Established") == "True", name


def test_default_queues_exist_with_parent_and_unlimited_quota(kube_api: Any) -> None:
    custom = client.CustomObjectsApi(kube_api)
    queues = {
        q["metadata"]["name"]: q
        for q in custom.list_cluster_custom_object("scheduling.run.ai", "v2", "queues")["items"]
    }
    assert {"default-parent-queue", "default-queue"} <= set(queues)
    assert queues["default-queue"]["spec"]["parentQueue"] == "default-parent-queue"
    assert "parentQueue" not in queues["default-parent-queue"]["spec"]
    for queue in (queues["default-parent-queue"], queues["default-queue"]):
        for resource in ("cpu", "gpu", "memory"):
            assert queue["spec"]["resources"][resource] == {"quota": -1, "limit": -1, "overQuotaWeight": 1}


def test_default_priority_classes(kube_api: Any) -> None:
    sched = client.SchedulingV1Api(kube_api)
    values = {pc.metadata.name: pc.value for pc in sched.list_priority_class().items}
    assert {k: values.get(k) for k in ("train", "build-preemptible", "build", "inference")} == {
        "train": 50,
        "build-preemptible": 75,
        "build": 100,
        "inference": 125,
    }


def test_session_nodes_are_gpu_nodes_made_ready_by_the_pod_runner(
    kube_cluster: DevCluster, kube_api: Any
) -> None:
    core = client.CoreV1Api(kube_api)
    assert len(kube_cluster.nodes) >= 2  # the binding tests below use two of them
    for name in kube_cluster.nodes:
        node = core.read_node(name)
        assert kube_cluster.gpus_per_node > 0
        assert node.status.allocatable["nvidia.com/gpu"] == str(kube_cluster.gpus_per_node)
        # Created without a Ready condition: only the pod runner (kwok) could have set it.
        ready = {c.type: c.status for c in node.status.conditions}.get("Ready")
        assert ready == "True"
        assert not node.spec.taints


def test_created_gpu_node_is_readable_with_its_allocatable(kube_api: Any) -> None:
    core = client.CoreV1Api(kube_api)
    name = f"extra-{uuid.uuid4().hex[:8]}"
    devcluster.create_gpu_node(kube_api, name, gpus=4, gpu_memory_mib=40960, cpu="32", memory="256Gi")
    try:
        node = core.read_node(name)
        assert node.status.allocatable["nvidia.com/gpu"] == "4"
        assert node.status.capacity["nvidia.com/gpu"] == "4"
        assert node.status.allocatable["cpu"] == "32"
        assert node.metadata.labels["nvidia.com/gpu.memory"] == "40960"
        assert node.metadata.labels["nvidia.com/gpu.count"] == "4"
        assert node.metadata.annotations["kwok.x-k8s.io/node"] == "fake"
    finally:
        core.delete_node(name)


def test_bound_pod_becomes_running_only_on_a_fake_node(
    kube_cluster: DevCluster, kube_api: Any, namespace: str
) -> None:
    core = client.CoreV1Api(kube_api)
    # A node the pod runner does not manage (no kwok annotation): nothing plays its kubelet.
    unmanaged = f"unmanaged-{uuid.uuid4().hex[:8]}"
    core.create_node(client.V1Node(metadata=client.V1ObjectMeta(name=unmanaged)))
    try:
        core.create_namespaced_pod(namespace, make_pod("on-fake"))
        core.create_namespaced_pod(namespace, make_pod("on-unmanaged"))
        # No kube-scheduler runs: an unbound pod stays Pending without a node.
        assert core.read_namespaced_pod("on-fake", namespace).spec.node_name is None

        bind(core, namespace, "on-unmanaged", unmanaged)
        bind(core, namespace, "on-fake", kube_cluster.nodes[0])
        wait_for("pod on fake node Running", lambda: phase(core, namespace, "on-fake") == "Running" or None)

        pod = core.read_namespaced_pod("on-fake", namespace)
        assert pod.spec.node_name == kube_cluster.nodes[0]
        assert {c.type: c.status for c in pod.status.conditions}["Ready"] == "True"
        assert phase(core, namespace, "on-unmanaged") == "Pending"
    finally:
        core.delete_node(unmanaged)


def test_a_second_binding_of_a_bound_pod_is_rejected(
    kube_cluster: DevCluster, kube_api: Any, namespace: str
) -> None:
    core = client.CoreV1Api(kube_api)
    core.create_namespaced_pod(namespace, make_pod("once"))
    bind(core, namespace, "once", kube_cluster.nodes[0])
    with pytest.raises(ApiException) as err:
        bind(core, namespace, "once", kube_cluster.nodes[1])
    assert err.value.status == 409
    assert core.read_namespaced_pod("once", namespace).spec.node_name == kube_cluster.nodes[0]


def test_deleted_pod_on_fake_node_is_finalized(
    kube_cluster: DevCluster, kube_api: Any, namespace: str
) -> None:
    core = client.CoreV1Api(kube_api)
    core.create_namespaced_pod(namespace, make_pod("doomed"))
    bind(core, namespace, "doomed", kube_cluster.nodes[1])
    wait_for("pod Running", lambda: phase(core, namespace, "doomed") == "Running" or None)
    # A graceful delete only sets deletionTimestamp; the pod runner must finish it.
    core.delete_namespaced_pod("doomed", namespace, grace_period_seconds=30)
    wait_for("pod deleted", lambda: gone(core, namespace, "doomed"))


def test_fake_kubelet_runs_pods_on_its_nodes(kube_cluster: DevCluster, kube_api: Any, namespace: str) -> None:
    """The Python fallback pod runner, on nodes with their own annotation so kwok ignores them."""
    core = client.CoreV1Api(kube_api)
    annotation = ("kai-ray.test/fake-kubelet", uuid.uuid4().hex[:8])
    node = f"fk-{annotation[1]}"
    devcluster.create_gpu_node(kube_api, node, gpus=2, ready=False)
    core.patch_node(
        node, {"metadata": {"annotations": {"kwok.x-k8s.io/node": None, annotation[0]: annotation[1]}}}
    )
    stop = threading.Event()
    errors: list[BaseException] = []

    def run() -> None:
        try:
            devcluster.run_fake_kubelet(kube_cluster.kubeconfig, stop, node_annotation=annotation)
        except BaseException as exc:  # surfaced to the test below
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        wait_for(
            "fake kubelet marks its node Ready",
            lambda: (
                {c.type: c.status for c in core.read_node(node).status.conditions or []}.get("Ready")
                == "True"
                or None
            ),
        )
        core.create_namespaced_pod(namespace, make_pod("fk-pod"))
        bind(core, namespace, "fk-pod", node)
        wait_for(
            "pod Running via fake kubelet", lambda: phase(core, namespace, "fk-pod") == "Running" or None
        )
        core.delete_namespaced_pod("fk-pod", namespace, grace_period_seconds=30)
        wait_for("pod finalized by fake kubelet", lambda: gone(core, namespace, "fk-pod"))
    finally:
        stop.set()
        thread.join(timeout=30)
        core.delete_node(node)
    assert not thread.is_alive()
    assert errors == []


def _forbidden(call: Any) -> ApiException:
    with pytest.raises(ApiException) as err:
        call()
    assert err.value.status == 403
    return err.value


def test_service_account_kubeconfig_is_a_non_admin_identity_subject_to_rbac(
    kube_cluster: DevCluster, kube_api: Any, namespace: str, tmp_path: Path
) -> None:
    path = devcluster.service_account_kubeconfig(
        kube_cluster, kube_api, namespace, "tester", tmp_path / "tester.kubeconfig"
    )
    assert path == tmp_path / "tester.kubeconfig"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    # Again for an existing ServiceAccount (409 is not an error): a second kubeconfig for it.
    devcluster.service_account_kubeconfig(kube_cluster, kube_api, namespace, "tester", tmp_path / "again")
    rbac = client.RbacAuthorizationV1Api(kube_api)
    role = f"list-pods-{namespace}"
    rbac.create_cluster_role(
        client.V1ClusterRole(
            metadata=client.V1ObjectMeta(name=role),
            rules=[client.V1PolicyRule(api_groups=[""], resources=["pods"], verbs=["list"])],
        )
    )
    api = api_for_kubeconfig(path)
    try:
        core = client.CoreV1Api(api)
        denied = _forbidden(lambda: core.list_namespaced_pod(namespace))
        # Anonymous requests are refused too: the refusal must name the ServiceAccount.
        assert f"system:serviceaccount:{namespace}:tester" in str(denied.body)

        rbac.create_namespaced_role_binding(
            namespace,
            client.V1RoleBinding(
                metadata=client.V1ObjectMeta(name="tester-list-pods"),
                role_ref=client.V1RoleRef(
                    api_group="rbac.authorization.k8s.io", kind="ClusterRole", name=role
                ),
                subjects=[client.RbacV1Subject(kind="ServiceAccount", name="tester", namespace=namespace)],
            ),
        )

        def lists_pods() -> bool | None:
            try:
                core.list_namespaced_pod(namespace)
            except ApiException as exc:
                if exc.status == 403:
                    return None  # the authorizer's RBAC cache has not seen the binding yet
                raise
            return True

        wait_for("the RoleBinding to let the ServiceAccount list pods", lists_pods)
        # Exactly what was granted: not other verbs, not other namespaces.
        _forbidden(lambda: core.create_namespaced_pod(namespace, make_pod("not-allowed")))
        _forbidden(lambda: core.list_namespaced_pod("default"))
    finally:
        api.close()
        rbac.delete_cluster_role(role)


# ------------------------------------------------------------------------------------------
# start/stop lifecycle (separate, minimal clusters so the session cluster is untouched)

#: Files holding a credential (the admin token or a private key), relative to the cluster dir.
SECRET_FILES = (
    "tokens.csv",
    "kubeconfig",
    "state.json",
    "sa.key",
    "pki/apiserver.key",
    "kube-controller-manager.kubeconfig",
    "pki/kube-controller-manager.key",
)
PROBE_AGENT = "probe/1 (x)"


@pytest.fixture(scope="module")
def audited_cluster(kube_bin_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevCluster]:
    """One small cluster with the audit log on, shared by this module's audit and file-mode tests."""
    cluster_dir = tmp_path_factory.mktemp("audited")
    cluster = devcluster.start(
        cluster_dir, bin_dir=kube_bin_dir, pod_runner="none", audit=True, die_with_parent=True
    )
    try:
        yield cluster
    finally:
        devcluster.stop(cluster_dir)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_credentials_are_readable_by_the_owner_only(audited_cluster: DevCluster) -> None:
    root = audited_cluster.dir
    assert {name: oct(_mode(root / name)) for name in (*SECRET_FILES, "audit.log")} == {
        name: "0o600" for name in (*SECRET_FILES, "audit.log")
    }
    assert oct(_mode(root / "pki")) == "0o700"
    # Whatever else is in the directory: no file group/other can read holds the admin token.
    assert _holding(root, audited_cluster.token) == {"tokens.csv", "kubeconfig", "state.json"}
    # The controller manager's own token: in the apiserver's token file and its kubeconfig only.
    cm_kubeconfig = yaml.safe_load((root / "kube-controller-manager.kubeconfig").read_text())
    (cm_user,) = cm_kubeconfig["users"]
    assert cm_user["name"] == "system:kube-controller-manager"
    assert _holding(root, cm_user["user"]["token"]) == {"tokens.csv", "kube-controller-manager.kubeconfig"}


def _holding(root: Path, secret: str) -> set[str]:
    """The files under `root` (etcd's data aside) that contain `secret`, each checked to be private."""
    holding = {
        str(path.relative_to(root))
        for path in root.rglob("*")
        if path.is_file() and "etcd-data" not in path.parts and secret in path.read_text(errors="replace")
    }
    assert all(_mode(root / name) & 0o077 == 0 for name in holding)
    return holding


def test_audit_log_records_mutations_with_their_user_agent_and_not_reads(audited_cluster: DevCluster) -> None:
    assert audited_cluster.audit_log == audited_cluster.dir / "audit.log"
    state = json.loads((audited_cluster.dir / "state.json").read_text())
    assert state["audit_log"] == str(audited_cluster.audit_log)
    api = audited_cluster.api_client()
    api.user_agent = PROBE_AGENT
    name = f"audited-{uuid.uuid4().hex[:8]}"
    try:
        core = client.CoreV1Api(api)
        core.create_namespaced_pod("default", make_pod(name))
        core.read_namespaced_pod(name, "default")
        core.list_namespaced_pod("default")
        core.delete_namespaced_pod(name, "default", grace_period_seconds=0)
    finally:
        api.close()
    # Read at once: blocking mode puts each event on disk before its response is sent.
    probed = [e for e in devcluster.read_audit_events(audited_cluster) if e["userAgent"] == PROBE_AGENT]
    assert [(e["verb"], e["objectRef"]["resource"], e["objectRef"]["namespace"]) for e in probed] == [
        ("create", "pods", "default"),
        ("delete", "pods", "default"),
    ]
    create, delete = probed
    assert create["level"] == "Metadata" and "requestObject" not in create
    assert create["user"]["username"] == "admin"
    assert create["responseStatus"]["code"] == 201
    assert delete["objectRef"]["name"] == name


def test_read_audit_events_skips_a_partial_last_line(audited_cluster: DevCluster, tmp_path: Path) -> None:
    log = tmp_path / "audit.log"
    log.write_text('{"verb": "create"}\n\n{"verb": "delete"}\n{"verb": "upd')
    assert devcluster.read_audit_events(dataclasses.replace(audited_cluster, audit_log=log)) == [
        {"verb": "create"},
        {"verb": "delete"},
    ]
    with pytest.raises(devcluster.DevClusterError, match="audit=True"):
        devcluster.read_audit_events(dataclasses.replace(audited_cluster, audit_log=None))


def _pids(state_dir: Path) -> list[int]:
    state = json.loads((state_dir / "state.json").read_text())
    return [int(p["pid"]) for p in state["processes"].values()]


def _running(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def _exists(pid: int) -> bool:
    """Even as a zombie: stop() must also reap the processes it started."""
    return Path(f"/proc/{pid}").exists()


def _children() -> set[int]:
    """PIDs (zombies included) whose parent is this test process."""
    me = os.getpid()
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat[stat.rindex(")") + 2 :].split()[1]) == me:
                found.add(int(entry.name))
    return found


def test_restart_in_same_dir_replaces_the_cluster_and_stop_leaves_nothing(
    kube_bin_dir: Path, tmp_path: Path
) -> None:
    first = devcluster.start(tmp_path, bin_dir=kube_bin_dir, pod_runner="none", die_with_parent=True)
    first_pids = _pids(tmp_path)
    # The second cluster runs the Python fake kubelet as its pod runner (the kwok fallback).
    second = devcluster.start(
        tmp_path, nodes=1, bin_dir=kube_bin_dir, pod_runner="fake-kubelet", audit=True, die_with_parent=True
    )
    try:
        second_pids = _pids(tmp_path)
        assert not any(_exists(pid) for pid in first_pids), (
            "start() must stop (and reap) the previous cluster"
        )
        # etcd, kube-apiserver, kube-controller-manager and the fake kubelet.
        assert len(second_pids) == 4 and all(_running(pid) for pid in second_pids)
        assert second.token != first.token and second.pod_runner == "fake-kubelet"
        api = second.api_client()
        try:
            core = client.CoreV1Api(api)
            # start() created the node un-Ready and waited for the fake kubelet to mark it Ready.
            node = core.read_node(second.nodes[0])
            assert {c.type: c.status for c in node.status.conditions}["Ready"] == "True"
            core.create_namespaced_pod("default", make_pod("p"))
            bind(core, "default", "p", second.nodes[0])
            wait_for(
                "pod Running via fake-kubelet process",
                lambda: phase(core, "default", "p") == "Running" or None,
            )
        finally:
            api.close()
    finally:
        devcluster.stop(tmp_path)
    assert [Path(f"/proc/{pid}/stat").read_text() for pid in second_pids if _exists(pid)] == []
    # No credential or audit log outlives the cluster; the process logs stay for post-mortems.
    assert [
        name for name in (*SECRET_FILES, "pki", "audit.log", "etcd-data") if (tmp_path / name).exists()
    ] == []
    logs = ("etcd.log", "kube-apiserver.log", "kube-controller-manager.log", "pod-runner.log")
    assert all((tmp_path / name).is_file() for name in logs)
    devcluster.stop(tmp_path)  # a second stop is a no-op


def test_failed_start_leaves_no_processes(kube_bin_dir: Path, tmp_path: Path) -> None:
    bins = tmp_path / "bin"
    bins.mkdir()
    (bins / "etcd").symlink_to(kube_bin_dir / "etcd")
    broken = bins / "kube-apiserver"
    broken.write_text("#!/bin/sh\necho 'simulated crash' >&2\nexit 3\n")
    broken.chmod(0o755)
    cluster_dir = tmp_path / "cluster"
    children_before = _children()
    with pytest.raises(devcluster.DevClusterError, match="simulated crash"):
        devcluster.start(cluster_dir, bin_dir=bins, pod_runner="none", ready_timeout=60)
    # The apiserver is only launched once etcd is healthy, so "simulated crash" proves a real etcd
    # ran; it must now be gone, and reaped (no zombie child left behind).
    assert _children() - children_before == set()
    assert processes_mentioning(str(cluster_dir)) == []
    assert not (cluster_dir / "state.json").exists()
