"""Real workload operators and `kai-ray serve` on the dev cluster: a gang binds all together or not at all.

The pods here are made by the upstream operators themselves (KubeRay's ray-operator v1.5.0
and the Kubeflow training-operator v1.8.1, built by
kai_ray/devcluster/toolchain/build-operators.sh), grouped by serve's in-process podgrouper
as KAI's podgrouper would (spec integrations.md §2, §3) and scheduled by serve.  Each test
has GPU nodes of its own (`zone`), so the arithmetic is exact:

- RayCluster with KubeRay's KAI plugin: head + 4 GPU workers bind together under one PodGroup
  with SubGroups `headgroup`/`workers`; a second RayCluster that needs more GPUs than are left
  binds nothing, not even its GPU-less head, until the first is deleted; then all of it binds.
- RayJob: KubeRay v1.5.0's KAI plugin rejects every RayJob (§2.3, shown by its own test), so
  the RayJob runs on KubeRay without the plugin, KAI's own `examples/ray` path: every pod
  template names `kai-scheduler`, the queue label is only on the RayJob, and the PodGroup
  belongs to the RayJob.  `submissionMode: HTTPMode` (supported by v1.5.0): the operator
  submits the job itself, so there is no submitter pod at all.  (The default K8sJobMode adds a
  submitter batch Job once the cluster is ready; its pod must stay on the default scheduler,
  since a pod with no SubGroup in this PodGroup is never scheduled (§2.1 rule 7), and no Job
  controller runs here to make it anyway.  Nothing answers on the head's dashboard here, so
  HTTPMode's submission keeps failing in the operator's log; scheduling does not depend on it.)
- PyTorchJob: master + 3 workers bind together (`minMember` 4, SubGroups master/worker); a
  job needing more GPUs than are free binds nothing.
- MPIJob `kubeflow.org/v1`, the training-operator's own MPI controller: launcher and workers
  bind together (§3.3; v1 has no `launcherCreationPolicy`, so the gang is the whole job from
  the start).  Its CRD has the same name as mpi-operator's `kubeflow.org/v2beta1` MPIJob, which
  the shared session cluster gets whenever a test starts the training-operator or installs the
  upstream Kubeflow CRDs there, so this test runs on a small dev cluster of its own.

"Nothing binds" is checked only once serve has seen the whole gang (every pod linked to the
PodGroup), has said why it waits (the PodGroup's `UnschedulableOnNodePool` condition) and has
run two more cycles: a scheduler without gang semantics would have bound the head by then.

Operator fixtures delete the test's custom resources while the operator still runs (a RayJob
has KubeRay's finalizer), then stop it, before the namespace's pods are deleted: nothing
else (no garbage collector) would.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kube_serve import Serve, wait_until
from kube_workloads import (
    PODGROUPS,
    TIMEOUT,
    CustomObjects,
    Resource,
    container,
    linked,
    owner_of,
    unschedulable,
)
from kube_zone import ZONE_LABEL, Zone
from kubernetes import client

from kai_ray import devcluster
from kai_ray.api.constants import QUEUE_LABEL, SCHEDULER_NAME, SUBGROUP_LABEL
from kai_ray.devcluster import DevCluster, OperatorProcess
from kai_ray.devcluster.operators import install_mpijob_v1_crd

pytestmark = pytest.mark.kube

RAYCLUSTERS: Resource = ("ray.io", "v1", "rayclusters")
RAYJOBS: Resource = ("ray.io", "v1", "rayjobs")
PYTORCHJOBS: Resource = ("kubeflow.org", "v1", "pytorchjobs")
MPIJOBS_V1: Resource = ("kubeflow.org", "v1", "mpijobs")


# ------------------------------------------------------------------------------------ operators


@pytest.fixture
def workloads(kube_api: Any, namespace: str) -> CustomObjects:
    """The test's custom resources; its operator fixture deletes them while the operator runs."""
    return CustomObjects(kube_api, namespace)


@pytest.fixture(scope="module")
def operator_bin_dir() -> Path:
    """ray-operator and training-operator, built once per machine (`make kube-bins` builds them ahead)."""
    return devcluster.build_operators()


def run_operator(
    start: Callable[..., OperatorProcess],
    cluster: DevCluster,
    bin_dir: Path,
    workloads: CustomObjects,
    **options: Any,
) -> Iterator[OperatorProcess]:
    """Run an operator for one test (an operator fixture's `yield from`): `start(cluster, **options)`.

    At the end the test's workloads are deleted while the operator still runs, since it may
    hold them with a finalizer, and only then is the operator stopped.
    """
    operator = start(cluster, bin_dir=bin_dir, die_with_parent=True, **options)
    try:
        yield operator
    finally:
        try:
            workloads.close()
        finally:
            operator.stop()


# Each operator fixture depends on `zone` (and so on `namespace`): it stops before the zone's
# pods are deleted, so it never recreates them.


@pytest.fixture
def kuberay(
    kube_cluster: DevCluster, zone: Zone, workloads: CustomObjects, operator_bin_dir: Path
) -> Iterator[OperatorProcess]:
    """KubeRay with its KAI batch-scheduler plugin (`--batch-scheduler=kai-scheduler`)."""
    yield from run_operator(devcluster.start_kuberay, kube_cluster, operator_bin_dir, workloads)


@pytest.fixture
def kuberay_without_plugin(
    kube_cluster: DevCluster, zone: Zone, workloads: CustomObjects, operator_bin_dir: Path
) -> Iterator[OperatorProcess]:
    """KubeRay without a batch scheduler: pods keep the scheduler name of their templates."""
    yield from run_operator(
        devcluster.start_kuberay, kube_cluster, operator_bin_dir, workloads, batch_scheduler=None
    )


@pytest.fixture
def training_operator(
    kube_cluster: DevCluster, zone: Zone, workloads: CustomObjects, operator_bin_dir: Path
) -> Iterator[OperatorProcess]:
    """The training-operator, PyTorchJob only."""
    yield from run_operator(devcluster.start_training_operator, kube_cluster, operator_bin_dir, workloads)


# ------------------------------------------------------------------------------------ helpers


def pod_template(zone: Zone, name: str, gpus: int = 0, *, scheduler: bool = True) -> dict[str, Any]:
    """A pod template pinned to the zone's nodes; `scheduler` names kai-scheduler in it."""
    spec: dict[str, Any] = {"nodeSelector": {ZONE_LABEL: zone.name}, "containers": [container(name, gpus)]}
    if scheduler:
        spec["schedulerName"] = SCHEDULER_NAME
    return {"spec": spec}


def pods(kube_api: Any, namespace: str, selector: str) -> list[client.V1Pod]:
    found: list[client.V1Pod] = (
        client.CoreV1Api(kube_api).list_namespaced_pod(namespace, label_selector=selector).items
    )
    return sorted(found, key=lambda pod: pod.metadata.name)


def all_bound(
    kube_api: Any, namespace: str, selector: str, count: int, serve: Serve, operator: OperatorProcess
) -> list[client.V1Pod]:
    """Wait until the operator made `count` pods matching `selector` and serve bound every one."""

    def done() -> bool:
        found = pods(kube_api, namespace, selector)
        return len(found) == count and all(pod.spec.node_name for pod in found)

    wait_until(done, TIMEOUT, f"{count} pods with {selector} bound\n{serve.tail()}\n{log_tail(operator)}")
    return pods(kube_api, namespace, selector)


def log_tail(operator: OperatorProcess, lines: int = 15) -> str:
    return "\n".join(operator.log.read_text(errors="replace").splitlines()[-lines:])


def pod_group(workloads: CustomObjects, name: str) -> dict[str, Any]:
    found = workloads.get(PODGROUPS, name)
    assert found is not None, f"no PodGroup {name}"
    return found


def subgroups(group: dict[str, Any]) -> list[tuple[str, int]]:
    return [(sub["name"], sub["minMember"]) for sub in group["spec"].get("subGroups") or []]


def assert_none_bound(
    kube_api: Any,
    workloads: CustomObjects,
    selector: str,
    count: int,
    group_name: str,
    serve: Serve,
) -> list[client.V1Pod]:
    """Once serve saw all `count` pods in `group_name`, explained the wait, ran 2 more cycles: none bound."""
    namespace = workloads.namespace

    def seen() -> bool:
        found = pods(kube_api, namespace, selector)
        return len(found) == count and all(linked(pod) == group_name for pod in found)

    wait_until(seen, TIMEOUT, f"{count} pods with {selector} linked to {group_name}\n{serve.tail()}")
    wait_until(
        lambda: unschedulable(workloads.get(PODGROUPS, group_name)),
        TIMEOUT,
        f"an Unschedulable condition on {group_name}\n{serve.tail()}",
    )
    cycles = serve.cycles()
    wait_until(lambda: serve.cycles() >= cycles + 2, 30, f"two more cycles\n{serve.tail()}")
    found = pods(kube_api, namespace, selector)
    assert len(found) == count
    assert [pod.metadata.name for pod in found if pod.spec.node_name] == []
    return found


def delete_pods(kube_api: Any, namespace: str, selector: str) -> None:
    """What a garbage collector would do for a deleted owner (none runs here)."""
    core = client.CoreV1Api(kube_api)
    core.delete_collection_namespaced_pod(namespace, label_selector=selector, grace_period_seconds=0)
    wait_until(lambda: not pods(kube_api, namespace, selector), TIMEOUT, f"pods with {selector} gone")


# ------------------------------------------------------------------------------------ KubeRay


def ray_cluster(zone: Zone, name: str, queue: str, workers: int, gpus: int) -> dict[str, Any]:
    """Head without GPUs, one worker group `workers`; no scheduler name (KubeRay's plugin sets it)."""
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": name, "labels": {QUEUE_LABEL: queue}},
        "spec": {
            "headGroupSpec": {
                "rayStartParams": {},
                "template": pod_template(zone, "ray-head", scheduler=False),
            },
            "workerGroupSpecs": [
                {
                    "groupName": "workers",
                    "replicas": workers,
                    "minReplicas": workers,
                    "maxReplicas": workers,
                    "rayStartParams": {},
                    "template": pod_template(zone, "ray-worker", gpus, scheduler=False),
                }
            ],
        },
    }


def test_raycluster_binds_all_together_or_not_at_all(
    kube_api: Any,
    zone: Zone,
    workloads: CustomObjects,
    kuberay: OperatorProcess,
    serves: Callable[..., Serve],
) -> None:
    """8 GPUs: `first` takes 4 (4 workers × 1); `second` needs 8 (4 × 2), at most 2 of its workers fit."""
    zone.node("n0", gpus=4)
    zone.node("n1", gpus=4)
    queue = zone.queue("q")
    serve = serves(f"{zone.name}-s", zone.name)

    first = workloads.create(RAYCLUSTERS, ray_cluster(zone, "first", queue, workers=4, gpus=1))
    bound = all_bound(kube_api, zone.name, "ray.io/cluster=first", 5, serve, kuberay)
    group_name = f"pg-first-{first['metadata']['uid']}"
    group = pod_group(workloads, group_name)
    assert group["metadata"]["ownerReferences"] == [owner_of(first)]
    assert group["spec"]["queue"] == queue
    assert group["spec"]["priorityClassName"] == "train"
    assert group["spec"]["minMember"] == 5
    assert subgroups(group) == [("headgroup", 1), ("workers", 4)]
    for pod in bound:
        assert pod.spec.scheduler_name == SCHEDULER_NAME, pod.metadata.name
        assert pod.metadata.labels[QUEUE_LABEL] == queue, pod.metadata.name  # copied by the plugin
        assert linked(pod) == group_name, pod.metadata.name
        assert pod.metadata.labels[SUBGROUP_LABEL] == pod.metadata.labels["ray.io/group"], pod.metadata.name
    assert sorted(pod.metadata.labels[SUBGROUP_LABEL] for pod in bound) == ["headgroup"] + ["workers"] * 4

    second = workloads.create(RAYCLUSTERS, ray_cluster(zone, "second", queue, workers=4, gpus=2))
    second_group = f"pg-second-{second['metadata']['uid']}"
    assert_none_bound(kube_api, workloads, "ray.io/cluster=second", 5, second_group, serve)
    assert all(pod.spec.node_name for pod in pods(kube_api, zone.name, "ray.io/cluster=first"))
    waiting = pod_group(workloads, second_group)
    assert subgroups(waiting) == [("headgroup", 1), ("workers", 4)]
    assert "gang needs 5" in waiting["status"]["schedulingConditions"][-1]["message"]

    workloads.delete(RAYCLUSTERS, "first")
    delete_pods(kube_api, zone.name, "ray.io/cluster=first")
    bound = all_bound(kube_api, zone.name, "ray.io/cluster=second", 5, serve, kuberay)
    assert {linked(pod) for pod in bound} == {second_group}
    workers = [pod for pod in bound if pod.metadata.labels["ray.io/group"] == "workers"]
    assert sorted(pod.spec.node_name for pod in workers) == sorted([f"{zone.name}-n0", f"{zone.name}-n1"] * 2)


def test_kuberay_1_5_with_the_kai_plugin_rejects_rayjobs(
    zone: Zone, workloads: CustomObjects, kuberay: OperatorProcess
) -> None:
    """A documented limitation (spec §2.3): v1.5.x's plugin accepts only RayClusters.

    The RayJob gets its cluster name in status, then every reconcile fails before the
    RayCluster is created, so there is nothing to schedule.
    """
    workloads.create(RAYJOBS, ray_job(zone, "rejected", zone.name, workers=1, gpus=1))
    rejected = "currently only RayCluster is supported, got *v1.RayJob"

    def refused() -> bool:
        return any(
            rejected in line and zone.name in line
            for line in kuberay.log.read_text(errors="replace").splitlines()
        )

    wait_until(refused, TIMEOUT, f"KubeRay to reject the RayJob\n{log_tail(kuberay)}")
    job = workloads.get(RAYJOBS, "rejected")
    assert job is not None
    status = job.get("status") or {}
    assert status.get("jobDeploymentStatus") == "Initializing"
    assert status.get("rayClusterName"), status
    assert workloads.get(RAYCLUSTERS, status["rayClusterName"]) is None


def ray_job(zone: Zone, name: str, queue: str, workers: int, gpus: int) -> dict[str, Any]:
    """KAI's `examples/ray` way: kai-scheduler in every template, the queue only on the RayJob."""
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": name, "labels": {QUEUE_LABEL: queue}},
        "spec": {
            "submissionMode": "HTTPMode",
            "entrypoint": "python -c 'print(1)'",
            "rayClusterSpec": {
                "headGroupSpec": {"rayStartParams": {}, "template": pod_template(zone, "ray-head")},
                "workerGroupSpecs": [
                    {
                        "groupName": "gpu-workers",
                        "replicas": workers,
                        "minReplicas": workers,
                        "maxReplicas": workers,
                        "rayStartParams": {},
                        "template": pod_template(zone, "ray-worker", gpus),
                    }
                ],
            },
        },
    }


def test_rayjob_cluster_binds_all_together_under_the_rayjobs_podgroup(
    kube_api: Any,
    zone: Zone,
    workloads: CustomObjects,
    kuberay_without_plugin: OperatorProcess,
    serves: Callable[..., Serve],
) -> None:
    zone.node("n0", gpus=4)
    zone.node("n1", gpus=4)
    queue = zone.queue("q")
    serve = serves(f"{zone.name}-s", zone.name)

    job = workloads.create(RAYJOBS, ray_job(zone, "rj", queue, workers=3, gpus=2))

    def cluster_name() -> str | None:
        status = (workloads.get(RAYJOBS, "rj") or {}).get("status") or {}
        return status.get("rayClusterName") or None

    wait_until(
        lambda: cluster_name() is not None,
        TIMEOUT,
        f"status.rayClusterName\n{log_tail(kuberay_without_plugin)}",
    )
    name = cluster_name()
    assert name is not None
    bound = all_bound(kube_api, zone.name, f"ray.io/cluster={name}", 4, serve, kuberay_without_plugin)
    cluster = workloads.get(RAYCLUSTERS, name)
    assert cluster is not None
    assert cluster["metadata"]["ownerReferences"][0]["uid"] == job["metadata"]["uid"]

    group_name = f"pg-rj-{job['metadata']['uid']}"
    group = pod_group(workloads, group_name)
    assert group["metadata"]["ownerReferences"] == [owner_of(job)]
    assert group["spec"]["queue"] == queue
    assert group["spec"]["priorityClassName"] == "train"
    assert group["spec"]["minMember"] == 4
    assert subgroups(group) == [("headgroup", 1), ("gpu-workers", 3)]
    for pod in bound:
        assert linked(pod) == group_name, pod.metadata.name
        # No plugin: the queue is found on the top owner, the pods do not carry it.
        assert QUEUE_LABEL not in pod.metadata.labels, pod.metadata.name
    assert sorted(pod.metadata.labels[SUBGROUP_LABEL] for pod in bound) == ["gpu-workers"] * 3 + ["headgroup"]
    # HTTPMode: KubeRay submits through the dashboard, no submitter pod or Job exists.
    assert client.BatchV1Api(kube_api).list_namespaced_job(zone.name).items == []


# ------------------------------------------------------------------------------------ Kubeflow


def pytorch_job(zone: Zone, name: str, queue: str, workers: int, gpus: int) -> dict[str, Any]:
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name, "labels": {QUEUE_LABEL: queue}},
        "spec": {
            "pytorchReplicaSpecs": {
                "Master": {
                    "replicas": 1,
                    "restartPolicy": "OnFailure",
                    "template": pod_template(zone, "pytorch", 1),
                },
                "Worker": {
                    "replicas": workers,
                    "restartPolicy": "OnFailure",
                    "template": pod_template(zone, "pytorch", gpus),
                },
            }
        },
    }


def test_pytorchjob_binds_all_together_or_not_at_all(
    kube_api: Any,
    zone: Zone,
    workloads: CustomObjects,
    training_operator: OperatorProcess,
    serves: Callable[..., Serve],
) -> None:
    """8 GPUs: `fits` takes 4 (1 + 3 × 1); `too-big` needs 7 (1 + 3 × 2) of the 4 left."""
    zone.node("n0", gpus=4)
    zone.node("n1", gpus=4)
    queue = zone.queue("q")
    serve = serves(f"{zone.name}-s", zone.name)

    fits = workloads.create(PYTORCHJOBS, pytorch_job(zone, "fits", queue, workers=3, gpus=1))
    selector = "training.kubeflow.org/job-name=fits"
    bound = all_bound(kube_api, zone.name, selector, 4, serve, training_operator)
    group_name = f"pg-fits-{fits['metadata']['uid']}"
    group = pod_group(workloads, group_name)
    assert group["metadata"]["ownerReferences"] == [owner_of(fits)]
    assert group["spec"]["queue"] == queue
    assert group["spec"]["priorityClassName"] == "train"
    assert group["spec"]["minMember"] == 4
    assert subgroups(group) == [("master", 1), ("worker", 3)]
    assert (
        sorted(
            (pod.metadata.labels["training.kubeflow.org/replica-type"], pod.metadata.labels[SUBGROUP_LABEL])
            for pod in bound
        )
        == [("master", "master")] + [("worker", "worker")] * 3
    )
    assert {linked(pod) for pod in bound} == {group_name}

    too_big = workloads.create(PYTORCHJOBS, pytorch_job(zone, "too-big", queue, workers=3, gpus=2))
    too_big_group = f"pg-too-big-{too_big['metadata']['uid']}"
    assert_none_bound(kube_api, workloads, "training.kubeflow.org/job-name=too-big", 4, too_big_group, serve)
    waiting = pod_group(workloads, too_big_group)
    assert waiting["spec"]["minMember"] == 4
    assert "gang needs 4" in waiting["status"]["schedulingConditions"][-1]["message"]


@pytest.fixture
def own_cluster(tmp_path: Path, kube_bin_dir: Path) -> Iterator[DevCluster]:
    """A small dev cluster of this test's own: one 4-GPU node, the default queues."""
    cluster = devcluster.start(
        tmp_path / "cluster", nodes=1, gpus_per_node=4, bin_dir=kube_bin_dir, die_with_parent=True
    )
    try:
        yield cluster
    finally:
        devcluster.stop(cluster.dir)  # ends its operator too


def test_mpijob_v1_launcher_and_workers_bind_together(
    own_cluster: DevCluster, operator_bin_dir: Path, serves: Callable[..., Serve]
) -> None:
    """The training-operator's own kubeflow.org/v1 MPIJob: launcher Pod and workers, both owned by it."""
    namespace = "mpi"
    with contextlib.closing(own_cluster.api_client()) as api:
        core = client.CoreV1Api(api)
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
        install_mpijob_v1_crd(api)
        operator = devcluster.start_training_operator(
            own_cluster, bin_dir=operator_bin_dir, schemes=("mpijob",), die_with_parent=True
        )
        serve = serves("mpi-s", namespace, kubeconfig=own_cluster.kubeconfig)
        workloads = CustomObjects(api, namespace)
        template = {"spec": {"schedulerName": SCHEDULER_NAME, "containers": [container("mpi")]}}
        gpu_template = {"spec": {"schedulerName": SCHEDULER_NAME, "containers": [container("mpi", 1)]}}
        job = workloads.create(
            MPIJOBS_V1,
            {
                "apiVersion": "kubeflow.org/v1",
                "kind": "MPIJob",
                "metadata": {"name": "mpi", "labels": {QUEUE_LABEL: "default-queue"}},
                "spec": {
                    "slotsPerWorker": 1,
                    "mpiReplicaSpecs": {
                        "Launcher": {"replicas": 1, "template": template},
                        "Worker": {"replicas": 3, "template": gpu_template},
                    },
                },
            },
        )
        bound = all_bound(api, namespace, "training.kubeflow.org/job-name=mpi", 4, serve, operator)
        group_name = f"pg-mpi-{job['metadata']['uid']}"
        group = pod_group(workloads, group_name)
        assert group["metadata"]["ownerReferences"] == [owner_of(job)]
        assert group["spec"]["queue"] == "default-queue"
        assert group["spec"]["priorityClassName"] == "train"
        assert group["spec"]["minMember"] == 4
        assert subgroups(group) == []
        roles = sorted(pod.metadata.labels["training.kubeflow.org/replica-type"] for pod in bound)
        assert roles == ["launcher", "worker", "worker", "worker"]
        for pod in bound:
            assert linked(pod) == group_name, pod.metadata.name
            refs = [(r.kind, r.name, r.controller) for r in pod.metadata.owner_references]
            assert refs == [("MPIJob", "mpi", True)], pod.metadata.name
