"""A test's own corner of the shared dev cluster: labelled GPU nodes, queues, and pods pinned to them.

The session's API server is shared by every Kubernetes test, and a scheduler sees every
node, so each test makes nodes of its own (labelled `kai-ray-test: <namespace>`) and pins
its pods there with a node selector; `Zone.close` removes what it made.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kube_support import queue_body
from kubernetes import client

from kai_ray import devcluster

GROUP = "scheduling.run.ai"
ZONE_LABEL = "kai-ray-test"


def gpu_pod(
    name: str,
    zone: str,
    *,
    queue: str | None = None,
    gpus: int = 1,
    group: str | None = None,
    scheduler: str = "kai-scheduler",
    node: str | None = None,
    priority_class: str | None = None,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    tolerations: list[client.V1Toleration] | None = None,
    owners: list[dict[str, Any]] | None = None,
) -> client.V1Pod:
    """A pod asking for whole GPUs, pinned to the zone's nodes (or bound to `node` directly)."""
    pod_labels = dict(labels or {})
    if queue:
        pod_labels["kai.scheduler/queue"] = queue
    pod_annotations = dict(annotations or {})
    if group:
        pod_annotations["pod-group-name"] = group
    limits = {"nvidia.com/gpu": str(gpus)} if gpus else {}
    return client.V1Pod(
        metadata=client.V1ObjectMeta(
            name=name, labels=pod_labels, annotations=pod_annotations, owner_references=owners
        ),
        spec=client.V1PodSpec(
            scheduler_name=scheduler,
            node_name=node,
            priority_class_name=priority_class,
            node_selector={ZONE_LABEL: zone},
            tolerations=tolerations,
            containers=[
                client.V1Container(
                    name="main",
                    image="busybox",
                    resources=client.V1ResourceRequirements(
                        requests={"cpu": "100m", "memory": "100Mi"}, limits=limits
                    ),
                )
            ],
        ),
    )


def batch_job(
    api: Any, namespace: str, name: str, *, parallelism: int = 1, labels: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """A batch Job, as the owner its pods name: no job controller runs here, so tests make the
    pods themselves (`gpu_pod(owners=...)`). Returns the owner reference those pods carry."""
    created = client.BatchV1Api(api).create_namespaced_job(
        namespace,
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": name, "labels": dict(labels or {})},
            "spec": {
                "parallelism": parallelism,
                "template": {
                    "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox"}]}
                },
            },
        },
    )
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "name": name,
        "uid": created.metadata.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


@dataclass
class Zone:
    """Nodes and queues made for one test (namespace `name`); `close` deletes them."""

    api: Any
    name: str
    nodes: list[str] = field(default_factory=list)
    queues: list[str] = field(default_factory=list)

    def node(self, suffix: str, gpus: int = 8, **options: Any) -> str:
        name = f"{self.name}-{suffix}"
        devcluster.create_gpu_node(self.api, name, gpus, labels={ZONE_LABEL: self.name}, **options)
        self.nodes.append(name)
        return name

    def queue(self, suffix: str, parent: str | None = None, gpu_quota: float = -1) -> str:
        name = f"{self.name}-{suffix}"
        body = queue_body(name, parent, gpu_quota)
        client.CustomObjectsApi(self.api).create_cluster_custom_object(GROUP, "v2", "queues", body)
        self.queues.append(name)
        return name

    def pod(self, name: str, **options: Any) -> dict[str, Any]:
        """Create a `gpu_pod` in the zone's namespace; returns it as the server stored it."""
        created = client.CoreV1Api(self.api).create_namespaced_pod(
            self.name, gpu_pod(name, self.name, **options)
        )
        result: dict[str, Any] = self.api.sanitize_for_serialization(created)
        return result

    def job(self, name: str, *, queue: str | None = None, parallelism: int = 1) -> dict[str, Any]:
        """A batch Job in the zone's namespace (see `batch_job`)."""
        labels = {"kai.scheduler/queue": queue} if queue else {}
        return batch_job(self.api, self.name, name, parallelism=parallelism, labels=labels)

    def close(self) -> None:
        core = client.CoreV1Api(self.api)
        core.delete_collection_namespaced_pod(self.name, grace_period_seconds=0)
        for node in self.nodes:
            core.delete_node(node)
        custom = client.CustomObjectsApi(self.api)
        for queue in reversed(self.queues):
            try:
                custom.delete_cluster_custom_object(GROUP, "v2", "queues", queue)
            except client.ApiException as error:
                if error.status != 404:
                    raise
