"""`simulate` and `serve` read the same objects the same way (issue 8, item 8).

One set of objects (a queue tree, priority classes, nodes, a gang with SubGroups,
bare pods relying on the `project` label and on annotations KAI's grouper
ignores, another scheduler's pod, a pod whose queue is gone) is converted twice:
as manifests, the way `kai-ray simulate` reads a directory, and after being
applied to a real API server and read back through the informer cache, the way
`kai-ray serve` sees a cluster (its podgrouper first gives the bare pods their
PodGroups; the simulator's is the same code, run in memory).  The two cluster
states must be equal, up to what only a live cluster has (uids in generated
names, creation times, the clock).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import pytest
from kai_ray_operators.controller import PodGroupController
from kai_ray_operators.manifests import prepare_manifests
from kubernetes import client

from kai_ray.api import SourcedObject, load_sourced_objects
from kai_ray.cluster.kube.cache import ClusterCache
from kai_ray.cluster.kube.events import EventWriter
from kai_ray.cluster.kube.snapshot import snapshot
from kai_ray.convert import cluster_from_manifest_set
from kai_ray.model.objects import ClusterState, HeldPod, JobSpec, TaskSpec

pytestmark = pytest.mark.kube

TIMEOUT = 30.0
DEFAULT_TOLERATIONS = frozenset({"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"})


def objects(ns: str) -> list[dict[str, Any]]:
    """The shared input; cluster-scoped names carry the namespace so tests never collide."""

    def queue(name: str, parent: str | None, gpu: float) -> dict[str, Any]:
        unlimited = {"quota": -1, "limit": -1, "overQuotaWeight": 1}
        spec: dict[str, Any] = {
            "resources": {
                "gpu": {"quota": gpu, "limit": -1, "overQuotaWeight": 2},
                "cpu": unlimited,
                "memory": unlimited,
            },
            "priority": 120,
        }
        if parent:
            spec["parentQueue"] = parent
        return {
            "apiVersion": "scheduling.run.ai/v2",
            "kind": "Queue",
            "metadata": {"name": name},
            "spec": spec,
        }

    def node(name: str, **spec: Any) -> dict[str, Any]:
        resources = {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": "8", "pods": "110"}
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": {"nvidia.com/gpu.memory": "81920", "rack": name[-1]}},
            "spec": spec,
            "status": {"allocatable": resources, "capacity": resources},
        }

    def pod(
        name: str,
        *,
        gpus: int = 1,
        labels: dict[str, str],
        annotations: dict[str, str] | None = None,
        **spec: Any,
    ) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": ns, "labels": labels, "annotations": annotations or {}},
            "spec": {
                "schedulerName": spec.pop("schedulerName", "kai-scheduler"),
                "containers": [
                    {
                        "name": "main",
                        "image": "busybox",
                        "resources": {
                            "requests": {"cpu": "1", "memory": "1Gi"},
                            "limits": {"nvidia.com/gpu": str(gpus)},
                        },
                    }
                ],
                **spec,
            },
        }

    dept, leaf, project = f"{ns}-dept", f"{ns}-leaf", f"{ns}-proj"
    gang = {
        "apiVersion": "scheduling.run.ai/v2alpha2",
        "kind": "PodGroup",
        "metadata": {"name": "gang", "namespace": ns},
        "spec": {
            "queue": leaf,
            "priorityClassName": f"{ns}-high",
            "minSubGroup": 1,
            "subGroups": [{"name": "head", "minMember": 1}, {"name": "workers", "minMember": 2}],
            "preemptionDelay": "30s",
        },
    }
    orphan = {
        "apiVersion": "scheduling.run.ai/v2alpha2",
        "kind": "PodGroup",
        "metadata": {"name": "orphan", "namespace": ns},
        "spec": {"queue": f"{ns}-gone", "minMember": 1},
    }
    return [
        queue(dept, None, 16),
        queue(leaf, dept, 8),
        queue(project, dept, 0),
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": f"{ns}-high"},
            "value": 140,
        },
        node(f"{ns}-n0"),
        node(f"{ns}-n1", unschedulable=True),
        gang,
        pod("head-0", labels={"kai.scheduler/subgroup-name": "head"}, annotations={"pod-group-name": "gang"}),
        *(
            pod(
                f"worker-{i}",
                gpus=2,
                labels={"kai.scheduler/subgroup-name": "workers"},
                annotations={"pod-group-name": "gang"},
            )
            for i in range(3)
        ),
        pod(
            "solo",
            labels={
                "project": project,
                "priorityClassName": f"{ns}-high",
                "kai.scheduler/preemptibility": "preemptible",
            },
            annotations={
                "kai.scheduler/preemption-delay": "-5s",
                "kai.scheduler/staleness-grace-period": "2m",
            },
        ),
        pod("solo-default-queue", labels={"kai.scheduler/queue": leaf, "priorityClassName": "missing-class"}),
        pod("web", gpus=3, labels={}, schedulerName="default-scheduler", nodeName=f"{ns}-n0"),
        orphan,
        pod("orphan-0", labels={}, annotations={"pod-group-name": "orphan"}, nodeName=f"{ns}-n0"),
    ]


@pytest.fixture
def applied(kube_api: Any, namespace: str) -> Iterator[list[dict[str, Any]]]:
    """The objects, created on the API server; bound pods marked Running as a kubelet would."""
    made = objects(namespace)
    core, custom = client.CoreV1Api(kube_api), client.CustomObjectsApi(kube_api)
    scheduling = client.SchedulingV1Api(kube_api)
    for obj in made:
        kind = obj["kind"]
        if kind == "Queue":
            custom.create_cluster_custom_object("scheduling.run.ai", "v2", "queues", obj)
        elif kind == "PodGroup":
            custom.create_namespaced_custom_object(
                "scheduling.run.ai", "v2alpha2", namespace, "podgroups", obj
            )
        elif kind == "PriorityClass":
            scheduling.create_priority_class(obj)
        elif kind == "Node":
            core.create_node(obj)
            core.patch_node_status(obj["metadata"]["name"], {"status": obj["status"]})
        else:
            core.create_namespaced_pod(namespace, obj)
            if obj["spec"].get("nodeName"):
                core.patch_namespaced_pod_status(
                    obj["metadata"]["name"], namespace, {"status": {"phase": "Running"}}
                )
    try:
        yield made
    finally:
        core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
        for obj in made:
            name = obj["metadata"]["name"]
            if obj["kind"] == "Queue":
                custom.delete_cluster_custom_object("scheduling.run.ai", "v2", "queues", name)
            elif obj["kind"] == "Node":
                core.delete_node(name)
            elif obj["kind"] == "PriorityClass":
                scheduling.delete_priority_class(name)


def as_manifests(made: list[dict[str, Any]]) -> ClusterState:
    """What `kai-ray simulate` makes of them; bound pods are Running, as they are on the cluster."""
    for obj in made:
        if obj["kind"] == "Pod" and obj["spec"].get("nodeName"):
            obj["status"] = {"phase": "Running"}
    prepared = prepare_manifests([SourcedObject("manifests.yaml", 0, obj) for obj in made])
    state, _ = cluster_from_manifest_set(load_sourced_objects(prepared.documents))
    return state


def as_served(kube_api: Any, namespace: str) -> ClusterState:
    """What `kai-ray serve` makes of them, after its grouper ran."""
    cache = ClusterCache(kube_api, namespace=namespace)
    with cache:
        assert cache.wait_synced(TIMEOUT)
        assert cache.wait_until(
            lambda: len(cache.objects("Pod")) == 7 and len(cache.objects("ForeignPod")) == 1, TIMEOUT
        )
        grouped = PodGroupController(kube_api).group(cache, EventWriter(kube_api))
        assert len(grouped.created) == 2 and not grouped.failed
        state, _ = snapshot(cache)
    return state


def comparable(state: ClusterState, namespace: str) -> dict[str, Any]:
    """The state without what only a live cluster has; keyed so order does not matter."""

    def task(spec: TaskSpec) -> TaskSpec:
        # The API server's DefaultTolerationSeconds admission adds these to every pod.
        tolerations = tuple(t for t in spec.tolerations if t.key not in DEFAULT_TOLERATIONS)
        return dataclasses.replace(spec, created=0.0, tolerations=tolerations)

    def job(spec: JobSpec) -> tuple[str, JobSpec]:
        tasks = sorted((task(t) for t in spec.tasks), key=lambda t: t.name)
        # A bare pod's PodGroup is pg-<pod>-<uid>: the API server's uid, or a stable one in manifests.
        name = tasks[0].name if spec.name.startswith("pg-") else spec.name
        return name, dataclasses.replace(spec, name=name, created=0.0, tasks=tasks)

    def held(pod: HeldPod) -> tuple[str, HeldPod]:
        return pod.key, dataclasses.replace(pod, task=task(pod.task))

    return {
        "nodes": sorted((n for n in state.nodes if n.name.startswith(namespace)), key=lambda n: n.name),
        "queues": sorted(
            (dataclasses.replace(q, created=0.0) for q in state.queues if q.name.startswith(namespace)),
            key=lambda q: q.name,
        ),
        "jobs": dict(job(j) for j in state.jobs if j.namespace == namespace),
        "held": dict(held(h) for h in state.held if h.namespace == namespace),
    }


def test_simulate_and_serve_see_the_same_cluster(
    kube_api: Any, namespace: str, applied: list[dict[str, Any]]
) -> None:
    simulated = comparable(as_manifests(applied), namespace)
    served = comparable(as_served(kube_api, namespace), namespace)
    assert sorted(simulated["jobs"]) == ["gang", "solo", "solo-default-queue"]
    assert sorted(simulated["held"]) == [f"{namespace}/orphan-0", f"{namespace}/web"]
    assert served == simulated
