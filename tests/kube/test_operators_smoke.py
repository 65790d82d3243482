"""The real upstream operators on the dev cluster: KubeRay v1.5.0 and the Kubeflow training-operator v1.8.1.

What KAI's grouping of Ray and PyTorch workloads relies on (spec integrations.md §2.3, §3),
checked on the pods the operators really create, built from their Go modules by
kai_ray/devcluster/toolchain/build-operators.sh: KubeRay with ``--batch-scheduler=kai-scheduler`` stamps the
scheduler name and the RayCluster's queue label on every pod, the training-operator labels each
replica, and both make the pods owned by their custom resource.  Nothing schedules these pods
(no kai-ray scheduler runs in this module), so they stay Pending.

Also: an operator is a process of its dev cluster, recorded in state.json, replaced when
started again and ended by the cluster's ``stop``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kube_support import wait_for
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kai_ray import devcluster
from kai_ray.devcluster import DevCluster, OperatorProcess

pytestmark = pytest.mark.kube

QUEUE_LABEL = "kai.scheduler/queue"
#: Not a Queue that exists: even a pod left behind could never be scheduled by a later test's scheduler.
QUEUE = "operators-smoke"
KAI_SCHEDULER = "kai-scheduler"


@pytest.fixture(scope="module")
def operator_bin_dir() -> Path:
    """ray-operator and training-operator, built once per machine (`make kube-bins` builds them ahead)."""
    return devcluster.build_operators()


@pytest.fixture
def kuberay(kube_cluster: DevCluster, namespace: str, operator_bin_dir: Path) -> Iterator[OperatorProcess]:
    """KubeRay with its KAI batch-scheduler plugin on the session cluster, for one test.

    Depends on ``namespace`` so it is stopped before the namespace's pods are deleted: a running
    operator would create them again.
    """
    operator = devcluster.start_kuberay(kube_cluster, bin_dir=operator_bin_dir, die_with_parent=True)
    try:
        yield operator
    finally:
        operator.stop()


@pytest.fixture
def training_operator(
    kube_cluster: DevCluster, namespace: str, operator_bin_dir: Path
) -> Iterator[OperatorProcess]:
    """The training-operator (PyTorchJob only) on the session cluster, for one test; see ``kuberay``."""
    operator = devcluster.start_training_operator(
        kube_cluster, bin_dir=operator_bin_dir, die_with_parent=True
    )
    try:
        yield operator
    finally:
        operator.stop()


def created_pods(
    core: client.CoreV1Api, namespace: str, selector: str, count: int, operator: OperatorProcess
) -> list[client.V1Pod]:
    """The ``count`` pods matching ``selector`` once the operator made them all; a timeout shows its log."""

    def probe() -> list[client.V1Pod] | None:
        pods = core.list_namespaced_pod(namespace, label_selector=selector).items
        return pods if len(pods) == count else None

    try:
        return wait_for(f"{operator.name} to create {count} pods with {selector}", probe)
    except pytest.fail.Exception as exc:
        lines = operator.log.read_text(errors="replace").splitlines()[-40:]
        pytest.fail(f"{exc}\n{operator.log} ends with:\n" + "\n".join(lines))


def delete_if_present(delete: Callable[[], object]) -> None:
    """Delete a custom resource at the end of a test (already gone is fine).

    An operator started later on the session cluster would otherwise act on it again, in a
    namespace that never finishes terminating.
    """
    try:
        delete()
    except ApiException as exc:
        if exc.status != 404:
            raise


def assert_owned_by(pod: client.V1Pod, owner: dict[str, Any]) -> None:
    refs = [(r.api_version, r.kind, r.name, r.uid, r.controller) for r in pod.metadata.owner_references or []]
    meta = owner["metadata"]
    assert refs == [(owner["apiVersion"], owner["kind"], meta["name"], meta["uid"], True)], pod.metadata.name


def test_kuberay_gives_raycluster_pods_the_kai_scheduler_and_the_queue_label(
    kube_api: Any, namespace: str, kuberay: OperatorProcess
) -> None:
    custom = client.CustomObjectsApi(kube_api)
    core = client.CoreV1Api(kube_api)
    # Neither the scheduler name nor the queue is in the pod templates: KubeRay's plugin adds both.
    container = {"name": "ray", "image": "rayproject/ray:2.54.0", "resources": {"limits": {"cpu": "1"}}}
    body = {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": "rc", "labels": {QUEUE_LABEL: QUEUE}},
        "spec": {
            "headGroupSpec": {"rayStartParams": {}, "template": {"spec": {"containers": [container]}}},
            "workerGroupSpecs": [
                {
                    "groupName": "workers",
                    "replicas": 2,
                    "minReplicas": 2,
                    "maxReplicas": 2,
                    "rayStartParams": {},
                    "template": {"spec": {"containers": [container]}},
                }
            ],
        },
    }
    raycluster = custom.create_namespaced_custom_object("ray.io", "v1", namespace, "rayclusters", body)
    try:
        pods = created_pods(core, namespace, "ray.io/cluster=rc", 3, kuberay)
    finally:
        delete_if_present(
            lambda: custom.delete_namespaced_custom_object("ray.io", "v1", namespace, "rayclusters", "rc")
        )

    roles = sorted((p.metadata.labels["ray.io/node-type"], p.metadata.labels["ray.io/group"]) for p in pods)
    assert roles == [("head", "headgroup"), ("worker", "workers"), ("worker", "workers")]
    for pod in pods:
        assert pod.spec.scheduler_name == KAI_SCHEDULER, pod.metadata.name
        assert pod.metadata.labels[QUEUE_LABEL] == QUEUE, pod.metadata.name
        assert_owned_by(pod, raycluster)


def test_training_operator_labels_pytorchjob_replicas_and_owns_them(
    kube_api: Any, namespace: str, training_operator: OperatorProcess
) -> None:
    custom = client.CustomObjectsApi(kube_api)
    core = client.CoreV1Api(kube_api)
    template = {
        "spec": {
            "schedulerName": KAI_SCHEDULER,
            "containers": [
                {"name": "pytorch", "image": "pytorch/pytorch:2.5.1", "resources": {"limits": {"cpu": "1"}}}
            ],
        }
    }
    body = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "pt", "labels": {QUEUE_LABEL: QUEUE}},
        "spec": {
            "pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "restartPolicy": "OnFailure", "template": template},
                "Worker": {"replicas": 2, "restartPolicy": "OnFailure", "template": template},
            }
        },
    }
    job = custom.create_namespaced_custom_object("kubeflow.org", "v1", namespace, "pytorchjobs", body)
    try:
        pods = created_pods(core, namespace, "training.kubeflow.org/job-name=pt", 3, training_operator)
    finally:
        delete_if_present(
            lambda: custom.delete_namespaced_custom_object(
                "kubeflow.org", "v1", namespace, "pytorchjobs", "pt"
            )
        )

    replicas = sorted(
        (
            p.metadata.labels["training.kubeflow.org/replica-type"],
            p.metadata.labels["training.kubeflow.org/replica-index"],
            p.metadata.labels.get("training.kubeflow.org/job-role"),
        )
        for p in pods
    )
    assert replicas == [("master", "0", "master"), ("worker", "0", None), ("worker", "1", None)]
    for pod in pods:
        assert pod.spec.scheduler_name == KAI_SCHEDULER, pod.metadata.name
        assert pod.metadata.labels["training.kubeflow.org/operator-name"] == "pytorchjob-controller"
        # The job's own labels are not copied: KAI's podgrouper reads the queue from the top owner.
        assert QUEUE_LABEL not in pod.metadata.labels, pod.metadata.name
        assert_owned_by(pod, job)


def test_operator_is_a_process_of_its_dev_cluster(
    tmp_path: Path, kube_bin_dir: Path, operator_bin_dir: Path
) -> None:
    """Recorded in state.json, replaced when started again, ended by the cluster's stop()."""
    cluster = devcluster.start(
        tmp_path / "cluster", bin_dir=kube_bin_dir, pod_runner="none", die_with_parent=True
    )
    try:
        first = devcluster.start_training_operator(cluster, bin_dir=operator_bin_dir, die_with_parent=True)
        second = devcluster.start_training_operator(cluster, bin_dir=operator_bin_dir, die_with_parent=True)
        assert not Path(f"/proc/{first.pid}").exists()
        recorded = json.loads((cluster.dir / "state.json").read_text())["processes"]
        assert recorded[devcluster.TRAINING_OPERATOR]["pid"] == second.pid
        assert second.metrics_url.startswith("http://127.0.0.1:")
        assert second.readyz_url.startswith("http://127.0.0.1:")
    finally:
        devcluster.stop(cluster.dir)
    assert not Path(f"/proc/{second.pid}").exists()
    assert not (cluster.dir / "state.json").exists()
