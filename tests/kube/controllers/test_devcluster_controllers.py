"""The dev cluster's kube-controller-manager: workloads get pods and owners clean up, as on a real cluster.

`devcluster.start` runs kube-controller-manager with `devcluster.CONTROLLERS` when it was built
(`build-bins.sh` builds it from kube-apiserver's module).  Each test here checks one of those
controllers by what only it does, on the session cluster with controllers (this directory's
conftest), so each fails (times out) on a cluster without the controller manager.  Nothing
binds the pods: no kube-scheduler runs, and the pods ask for kai-scheduler but select nodes of
this test's zone, which has none, so a kai-ray started by another test could not place them.
"""

from __future__ import annotations

import functools
import json
import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kube_serve import KAI_RAY
from kube_support import processes_mentioning, wait_for
from kube_zone import ZONE_LABEL
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kai_ray import devcluster
from kai_ray.api.constants import SCHEDULER_NAME
from kai_ray.devcluster import DevCluster

pytestmark = pytest.mark.kube


def pod_template(namespace: str, app: str, restart_policy: str = "Always") -> dict[str, Any]:
    """A kai-scheduler pod template pinned to the test's (empty) zone, so it stays Pending."""
    return {
        "metadata": {"labels": {"app": app}},
        "spec": {
            "schedulerName": SCHEDULER_NAME,
            "nodeSelector": {ZONE_LABEL: namespace},
            "restartPolicy": restart_policy,
            "containers": [{"name": "main", "image": "busybox"}],
        },
    }


def controlled_by(items: list[Any], owner_uid: str) -> list[Any]:
    """The objects whose controller (the ownerReference with `controller: true`) is `owner_uid`."""
    return [
        item
        for item in items
        if any(ref.controller and ref.uid == owner_uid for ref in item.metadata.owner_references or [])
    ]


def exactly(count: int, list_them: Callable[[], list[Any]]) -> list[Any] | None:
    """`list_them()` once it has exactly `count` items (a probe for `wait_for`)."""
    items = list_them()
    return items if len(items) == count else None


def create_deployment(kube_api: Any, namespace: str, name: str, replicas: int) -> Any:
    body = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": pod_template(namespace, name),
        },
    }
    return client.AppsV1Api(kube_api).create_namespaced_deployment(namespace, body)


def replica_sets_of(kube_api: Any, namespace: str, deployment_uid: str) -> list[Any]:
    items = client.AppsV1Api(kube_api).list_namespaced_replica_set(namespace).items
    return controlled_by(items, deployment_uid)


def pods_of(kube_api: Any, namespace: str, owner_uid: str) -> list[Any]:
    return controlled_by(client.CoreV1Api(kube_api).list_namespaced_pod(namespace).items, owner_uid)


def test_the_cluster_says_which_controllers_run_and_runs_no_scheduler(kube_cluster: DevCluster) -> None:
    assert kube_cluster.controllers == devcluster.CONTROLLERS
    state = json.loads((kube_cluster.dir / "state.json").read_text())
    assert state["controllers"] == list(devcluster.CONTROLLERS)
    argv = state["processes"]["kube-controller-manager"]["argv"]
    assert f"--controllers={','.join(devcluster.CONTROLLERS)}" in argv
    assert f"--secure-port={state['ports']['kube-controller-manager']}" in argv
    # kai-ray is the scheduler; kwok owns the nodes, so nothing may taint, evict or collect its pods.
    assert "kube-scheduler" not in state["processes"]
    fights_kwok = {
        "node-lifecycle-controller",
        "taint-eviction-controller",
        "pod-garbage-collector-controller",
        "daemonset-controller",
    }
    assert fights_kwok.isdisjoint(devcluster.CONTROLLERS)


def test_devcluster_up_says_which_controllers_run_and_down_stops_them_from_another_process(
    kube_bin_dir: Path, tmp_path: Path
) -> None:
    def kai_ray(*args: str) -> str:
        """`kai-ray devcluster ARGS` in a process of its own; its stdout."""
        argv = [str(KAI_RAY), "devcluster", *args]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        return done.stdout

    up = kai_ray("up", "--dir", str(tmp_path), "--bin-dir", str(kube_bin_dir))
    try:
        assert f"controllers: {', '.join(devcluster.CONTROLLERS)}\n" in up
        running = processes_mentioning(str(tmp_path))
        assert [p for p in running if p.startswith(str(kube_bin_dir / "kube-controller-manager"))] != []
    finally:
        kai_ray("down", "--dir", str(tmp_path))
    assert processes_mentioning(str(tmp_path)) == []
    assert not (tmp_path / "kube-controller-manager.kubeconfig").exists()
    off = kai_ray("up", "--dir", str(tmp_path), "--bin-dir", str(kube_bin_dir), "--controller-manager", "off")
    try:
        assert "controllers: none (no kube-controller-manager)\n" in off
        assert "kube-controller-manager" not in json.loads((tmp_path / "state.json").read_text())["processes"]
    finally:
        kai_ray("down", "--dir", str(tmp_path))


def test_a_deployment_gets_a_replicaset_and_its_pods(kube_api: Any, namespace: str) -> None:
    deployment = create_deployment(kube_api, namespace, "web", replicas=2)
    (replica_set,) = wait_for(
        "the Deployment's ReplicaSet",
        functools.partial(exactly, 1, lambda: replica_sets_of(kube_api, namespace, deployment.metadata.uid)),
    )
    pods = wait_for(
        "the ReplicaSet's 2 pods",
        functools.partial(exactly, 2, lambda: pods_of(kube_api, namespace, replica_set.metadata.uid)),
    )
    assert [(p.spec.scheduler_name, p.spec.node_name, p.status.phase) for p in pods] == [
        (SCHEDULER_NAME, None, "Pending")
    ] * 2


def test_a_job_gets_its_pod(kube_api: Any, namespace: str) -> None:
    body = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "once"},
        "spec": {"parallelism": 1, "completions": 1, "template": pod_template(namespace, "once", "Never")},
    }
    job = client.BatchV1Api(kube_api).create_namespaced_job(namespace, body)
    (pod,) = wait_for(
        "the Job's pod", functools.partial(exactly, 1, lambda: pods_of(kube_api, namespace, job.metadata.uid))
    )
    assert pod.metadata.labels["job-name"] == "once"
    assert pod.spec.scheduler_name == SCHEDULER_NAME


def test_deleting_a_deployment_collects_its_replicaset_and_pods(kube_api: Any, namespace: str) -> None:
    deployment = create_deployment(kube_api, namespace, "doomed", replicas=2)
    uid = deployment.metadata.uid
    (replica_set,) = wait_for(
        "the Deployment's ReplicaSet",
        functools.partial(exactly, 1, lambda: replica_sets_of(kube_api, namespace, uid)),
    )
    wait_for(
        "the ReplicaSet's 2 pods",
        functools.partial(exactly, 2, lambda: pods_of(kube_api, namespace, replica_set.metadata.uid)),
    )
    # Background propagation: the Deployment goes at once, the garbage collector removes the rest.
    client.AppsV1Api(kube_api).delete_namespaced_deployment(
        "doomed", namespace, propagation_policy="Background"
    )
    wait_for(
        "the garbage collector to delete the ReplicaSet",
        functools.partial(exactly, 0, lambda: replica_sets_of(kube_api, namespace, uid)),
    )
    wait_for(
        "the garbage collector to delete the pods",
        functools.partial(exactly, 0, lambda: pods_of(kube_api, namespace, replica_set.metadata.uid)),
    )


@pytest.fixture
def storage(kube_api: Any) -> Iterator[str]:
    """A unique name for this test's cluster-scoped StorageClass and PV, both deleted afterwards."""
    name = f"t-{uuid.uuid4().hex[:10]}"
    try:
        yield name
    finally:
        for delete in (
            client.CoreV1Api(kube_api).delete_persistent_volume,
            client.StorageV1Api(kube_api).delete_storage_class,
        ):
            try:
                delete(name)
            except ApiException as exc:
                if exc.status != 404:
                    raise


def test_a_claim_binds_to_a_matching_volume(kube_api: Any, namespace: str, storage: str) -> None:
    core = client.CoreV1Api(kube_api)
    client.StorageV1Api(kube_api).create_storage_class(
        {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "StorageClass",
            "metadata": {"name": storage},
            # Pre-made volumes only; Immediate: the binder does not wait for a pod to be scheduled.
            "provisioner": "kubernetes.io/no-provisioner",
            "volumeBindingMode": "Immediate",
        }
    )
    core.create_persistent_volume(
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": storage},
            "spec": {
                "storageClassName": storage,
                "capacity": {"storage": "1Gi"},
                "accessModes": ["ReadWriteOnce"],
                "hostPath": {"path": f"/tmp/{storage}"},
            },
        }
    )
    core.create_namespaced_persistent_volume_claim(
        namespace,
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "data"},
            "spec": {
                "storageClassName": storage,
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "1Gi"}},
            },
        },
    )

    def bound() -> Any:
        claim = core.read_namespaced_persistent_volume_claim("data", namespace)
        return claim if claim.status.phase == "Bound" else None

    claim = wait_for("the PV binder to bind the claim", bound)
    assert claim.spec.volume_name == storage
    claim_ref = core.read_persistent_volume(storage).spec.claim_ref
    assert (claim_ref.namespace, claim_ref.name, claim_ref.uid) == (namespace, "data", claim.metadata.uid)
