"""Argo Workflows and mpi-operator v2 MPIJobs under `kai-ray serve`, their pods made by the test.

Stand-ins for controllers this repository cannot run (tests/kube/test_workloads_real_operators.py
runs KubeRay and the training-operator for real):

- Argo's **workflow-controller**: only its v4 module is served to this machine, and that
  version has reported security flaws, so it is not built.  The Workflow object is real (its
  upstream CRD from ../shared/crds/argo); its step pods are created as
  workflow/controller/workflowpod.go does: named `<workflow>-<template>-<fnv32a(node name)>`
  (pod name format v2), owned by the Workflow (`controller: true`), labelled
  `workflows.argoproj.io/workflow` and `workflows.argoproj.io/completed: "false"`, annotated
  with `workflows.argoproj.io/node-name` and `workflows.argoproj.io/node-id`, with the
  Workflow's `schedulerName` and `nodeSelector`, `restartPolicy: Never`, and the `init`,
  `wait` and `main` containers of the emissary executor.
- Kubeflow's **mpi-operator** (v2, `kubeflow.org/v2beta1` MPIJob): not served either.  The
  MPIJob object is real (its upstream CRD); the pods are what pkg/controller/
  mpi_job_controller.go creates: workers `<job>-worker-<i>` owned by the MPIJob, labelled
  `training.kubeflow.org/operator-name: mpi-operator`, `.../job-name`, `.../job-role: worker`
  and `.../replica-index` (mpi-operator sets no `replica-type` label); the launcher is a batch
  Job `<job>-launcher` owned by the MPIJob whose pod (made here as the Job controller would,
  none runs in the dev cluster) carries `.../job-role: launcher`.  With
  `launcherCreationPolicy: WaitForWorkersReady` the Job is created only once every worker is
  Ready, and the test does the same.

What is shown (spec integrations.md §4 and §3.3): Argo gets one PodGroup per step pod
(`minMember` 1, owned by the pod, queue from the Workflow's label), so two steps that cannot
run at once are scheduled independently: one binds, the other waits and binds once the first
is gone.  The MPIJob's workers form a gang of `minMember` = workers before the launcher exists;
the launcher then joins the same PodGroup, whose `minMember` becomes workers + launcher.

The MPIJob CRD name `mpijobs.kubeflow.org` is also the training-operator's `kubeflow.org/v1`
one: the session cluster only ever gets mpi-operator's v2beta1 (the v1 test runs on a dev
cluster of its own), which this test checks before it relies on it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
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
from kai_ray.api.constants import QUEUE_LABEL, SCHEDULER_NAME
from kai_ray.devcluster.operators import MPIJOB_CRD

pytestmark = pytest.mark.kube

WORKFLOWS: Resource = ("argoproj.io", "v1alpha1", "workflows")
MPIJOBS: Resource = ("kubeflow.org", "v2beta1", "mpijobs")
JOB_NAME, JOB_ROLE = "training.kubeflow.org/job-name", "training.kubeflow.org/job-role"


@pytest.fixture
def objects(kube_api: Any, namespace: str) -> Iterator[CustomObjects]:
    """The test's custom resources, deleted at its end (no controller or garbage collector would)."""
    made = CustomObjects(kube_api, namespace)
    try:
        yield made
    finally:
        made.close()


def controller_ref(owner: dict[str, Any]) -> dict[str, Any]:
    """`metav1.NewControllerRef`: what every one of these controllers puts on what it creates."""
    meta = owner["metadata"]
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def create_pod(kube_api: Any, namespace: str, body: dict[str, Any]) -> client.V1Pod:
    return client.CoreV1Api(kube_api).create_namespaced_pod(namespace, body)


def read_pod(kube_api: Any, namespace: str, name: str) -> client.V1Pod:
    return client.CoreV1Api(kube_api).read_namespaced_pod(name, namespace)


# ------------------------------------------------------------------------------------ Argo


def fnv32a(text: str) -> int:
    """Go's hash/fnv New32a, which Argo names nodes and pods by."""
    value = 0x811C9DC5
    for byte in text.encode():
        value = ((value ^ byte) * 0x01000193) & 0xFFFFFFFF
    return value


def argo_step_pod(workflow: dict[str, Any], node_name: str, template: dict[str, Any]) -> dict[str, Any]:
    """The pod Argo's workflow-controller creates for one step (pod name format v2)."""
    name = workflow["metadata"]["name"]
    spec = workflow["spec"]
    main = container("main", **{k: v for k, v in template["container"].items() if k != "resources"})
    main["resources"] = template["container"]["resources"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{name}-{template['name']}-{fnv32a(node_name)}",
            "labels": {"workflows.argoproj.io/workflow": name, "workflows.argoproj.io/completed": "false"},
            "annotations": {
                "workflows.argoproj.io/node-name": node_name,
                "workflows.argoproj.io/node-id": f"{name}-{fnv32a(node_name)}",
            },
            "ownerReferences": [controller_ref(workflow)],
        },
        "spec": {
            "restartPolicy": "Never",
            "schedulerName": spec["schedulerName"],
            "nodeSelector": spec["nodeSelector"],
            "initContainers": [container("init", image="quay.io/argoproj/argoexec")],
            "containers": [container("wait", image="quay.io/argoproj/argoexec"), main],
        },
    }


def test_argo_steps_get_a_podgroup_each_and_are_scheduled_independently(
    kube_api: Any, zone: Zone, objects: CustomObjects, serves: Callable[..., Serve]
) -> None:
    """One 4-GPU node, two parallel steps of 3 GPUs: exactly one runs at a time."""
    devcluster.install_upstream_crds(kube_api, "argo")
    zone.node("n0", gpus=4)
    queue = zone.queue("q")
    gpu_step = {
        "name": "gpu",
        "container": {
            "image": "busybox",
            "command": ["sh", "-c", "sleep 10"],
            "resources": {"limits": {"nvidia.com/gpu": "3"}},
        },
    }
    workflow = objects.create(
        WORKFLOWS,
        {
            "apiVersion": "argoproj.io/v1alpha1",
            "kind": "Workflow",
            "metadata": {"name": "wf", "labels": {QUEUE_LABEL: queue}},
            "spec": {
                "schedulerName": SCHEDULER_NAME,
                "nodeSelector": {ZONE_LABEL: zone.name},
                "entrypoint": "main",
                "templates": [
                    {
                        "name": "main",
                        "steps": [[{"name": "a", "template": "gpu"}, {"name": "b", "template": "gpu"}]],
                    },
                    gpu_step,
                ],
            },
        },
    )
    serve = serves(f"{zone.name}-s", zone.name)
    steps = [create_pod(kube_api, zone.name, argo_step_pod(workflow, f"wf[0].{s}", gpu_step)) for s in "ab"]
    names = [pod.metadata.name for pod in steps]
    assert names == [f"wf-gpu-{fnv32a('wf[0].a')}", f"wf-gpu-{fnv32a('wf[0].b')}"]

    def one_bound() -> bool:
        return any(read_pod(kube_api, zone.name, name).spec.node_name for name in names)

    wait_until(one_bound, TIMEOUT, f"a step pod bound\n{serve.tail()}")
    for step in steps:
        group_name = f"pg-{step.metadata.name}-{step.metadata.uid}"
        group = objects.get(PODGROUPS, group_name)
        assert group is not None, group_name
        assert group["metadata"]["ownerReferences"] == [
            {"apiVersion": "v1", "kind": "Pod", "name": step.metadata.name, "uid": step.metadata.uid}
        ]
        assert group["spec"]["queue"] == queue  # from the Workflow: the pods carry no queue label
        assert group["spec"]["minMember"] == 1
        assert not group["spec"].get("subGroups")
        assert linked(read_pod(kube_api, zone.name, step.metadata.name)) == group_name

    running = next(name for name in names if read_pod(kube_api, zone.name, name).spec.node_name)
    waiting = next(name for name in names if name != running)
    waiting_uid = read_pod(kube_api, zone.name, waiting).metadata.uid
    waiting_group = f"pg-{waiting}-{waiting_uid}"
    wait_until(
        lambda: unschedulable(objects.get(PODGROUPS, waiting_group)),
        TIMEOUT,
        f"{waiting_group} explained\n{serve.tail()}",
    )
    cycles = serve.cycles()
    wait_until(lambda: serve.cycles() >= cycles + 2, 30, f"two more cycles\n{serve.tail()}")
    assert read_pod(kube_api, zone.name, waiting).spec.node_name is None
    assert read_pod(kube_api, zone.name, running).spec.node_name == f"{zone.name}-n0"

    # The first step is done and its pod removed (Argo's pod GC): the second step runs on its own.
    client.CoreV1Api(kube_api).delete_namespaced_pod(running, zone.name, grace_period_seconds=0)
    wait_until(
        lambda: read_pod(kube_api, zone.name, waiting).spec.node_name == f"{zone.name}-n0",
        TIMEOUT,
        f"{waiting} bound once {running} is gone\n{serve.tail()}",
    )


# ------------------------------------------------------------------------------------ MPIJob v2


def mpi_pod_template(
    job: dict[str, Any], role: str, hostname: str, restart_policy: str
) -> tuple[dict[str, str], dict[str, Any]]:
    """The labels and pod spec mpi-operator v2 gives every `role` pod (`newWorker`, `newLauncherPodTemplate`).

    The MPIJob's template for the role (`mpiReplicaSpecs` key `Worker` or `Launcher`), its labels
    plus mpi-operator's `defaultLabels`, the pod's hostname with the job's name as subdomain, the
    role's restart policy and `K_MPI_JOB_ROLE` in the (first) container's env.
    """
    name = job["metadata"]["name"]
    template = job["spec"]["mpiReplicaSpecs"][role.capitalize()]["template"]
    labels = {
        **(template.get("metadata") or {}).get("labels", {}),
        "training.kubeflow.org/operator-name": "mpi-operator",
        JOB_NAME: name,
        JOB_ROLE: role,
    }
    spec = {**template["spec"], "hostname": hostname, "subdomain": name, "restartPolicy": restart_policy}
    spec["containers"] = [{**spec["containers"][0], "env": [{"name": "K_MPI_JOB_ROLE", "value": role}]}]
    return labels, spec


def mpi_worker(job: dict[str, Any], index: int) -> dict[str, Any]:
    """mpi-operator v2's `newWorker`: the Worker template plus its index label, sshd and owner."""
    name = f"{job['metadata']['name']}-worker-{index}"
    labels, spec = mpi_pod_template(job, "worker", name, "Never")
    labels["training.kubeflow.org/replica-index"] = str(index)
    spec["containers"][0]["command"] = ["/usr/sbin/sshd", "-De"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels, "ownerReferences": [controller_ref(job)]},
        "spec": spec,
    }


def mpi_launcher_job(kube_api: Any, namespace: str, job: dict[str, Any]) -> dict[str, Any]:
    """mpi-operator v2's `newLauncherJob`: a batch Job owned by the MPIJob; returns it as stored."""
    name = job["metadata"]["name"]
    labels, spec = mpi_pod_template(job, "launcher", f"{name}-launcher", "OnFailure")
    body = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": f"{name}-launcher",
            "labels": {"app": name},
            "ownerReferences": [controller_ref(job)],
        },
        "spec": {"template": {"metadata": {"labels": labels}, "spec": spec}},
    }
    created = client.BatchV1Api(kube_api).create_namespaced_job(namespace, body)
    stored: dict[str, Any] = kube_api.sanitize_for_serialization(created)
    return {"apiVersion": "batch/v1", "kind": "Job", **stored}


def job_pod(job: dict[str, Any]) -> dict[str, Any]:
    """The pod the Job controller would create: the Job's template (with the selector labels the API
    server added) and the Job as controller."""
    template = job["spec"]["template"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": f"{job['metadata']['name']}-",
            "labels": template["metadata"]["labels"],
            "ownerReferences": [controller_ref(job)],
        },
        "spec": template["spec"],
    }


def test_mpijob_v2_workers_gang_first_and_the_launcher_joins_later(
    kube_api: Any, zone: Zone, objects: CustomObjects, serves: Callable[..., Serve]
) -> None:
    devcluster.install_upstream_crds(kube_api, "kubeflow")
    crd = client.ApiextensionsV1Api(kube_api).read_custom_resource_definition(MPIJOB_CRD)
    assert [v.name for v in crd.spec.versions if v.served] == ["v2beta1"], "not mpi-operator's MPIJob CRD"
    zone.node("n0", gpus=4)
    queue = zone.queue("q")
    pod_spec = {"schedulerName": SCHEDULER_NAME, "nodeSelector": {ZONE_LABEL: zone.name}}
    job = objects.create(
        MPIJOBS,
        {
            "apiVersion": "kubeflow.org/v2beta1",
            "kind": "MPIJob",
            "metadata": {"name": "mpi", "labels": {QUEUE_LABEL: queue}},
            "spec": {
                "launcherCreationPolicy": "WaitForWorkersReady",
                "slotsPerWorker": 1,
                "mpiReplicaSpecs": {
                    "Launcher": {
                        "replicas": 1,
                        "template": {"spec": {**pod_spec, "containers": [container("launcher")]}},
                    },
                    "Worker": {
                        "replicas": 3,
                        "template": {"spec": {**pod_spec, "containers": [container("worker", 1)]}},
                    },
                },
            },
        },
    )
    group_name = f"pg-mpi-{job['metadata']['uid']}"
    serve = serves(f"{zone.name}-s", zone.name)
    workers = [create_pod(kube_api, zone.name, mpi_worker(job, index)).metadata.name for index in range(3)]

    def workers_ready() -> bool:
        found = [read_pod(kube_api, zone.name, name) for name in workers]
        return all(
            pod.spec.node_name
            and any(c.type == "Ready" and c.status == "True" for c in (pod.status.conditions or []))
            for pod in found
        )

    wait_until(workers_ready, TIMEOUT, f"the 3 workers bound and Ready\n{serve.tail()}")
    group = objects.get(PODGROUPS, group_name)
    assert group is not None
    assert group["metadata"]["ownerReferences"] == [owner_of(job)]
    assert group["spec"]["queue"] == queue
    assert group["spec"]["minMember"] == 3  # the launcher (1) does not exist yet
    assert not group["spec"].get("subGroups")
    assert {linked(read_pod(kube_api, zone.name, name)) for name in workers} == {group_name}

    # Every worker is Ready: mpi-operator now creates the launcher Job, the Job controller its pod.
    launcher_job = mpi_launcher_job(kube_api, zone.name, job)
    launcher = create_pod(kube_api, zone.name, job_pod(launcher_job)).metadata.name
    wait_until(
        lambda: read_pod(kube_api, zone.name, launcher).spec.node_name == f"{zone.name}-n0",
        TIMEOUT,
        f"the launcher bound\n{serve.tail()}",
    )
    assert linked(read_pod(kube_api, zone.name, launcher)) == group_name
    wait_until(
        lambda: (objects.get(PODGROUPS, group_name) or {})["spec"]["minMember"] == 4,
        TIMEOUT,
        f"{group_name} minMember 4 with the launcher\n{serve.tail()}",
    )
    assert all(read_pod(kube_api, zone.name, name).spec.node_name for name in workers)
