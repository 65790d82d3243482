"""Short builders for manifest-conversion tests: each returns one object as the dict a user would write."""

from __future__ import annotations

from typing import Any

import yaml
from kai_ray_operators.manifests import cluster_from_workload_documents

from kai_ray.api import load_manifest_text, read_manifest_text
from kai_ray.convert import cluster_from_manifest_set
from kai_ray.model.objects import ClusterState

Obj = dict[str, Any]


def queue(name: str, parent: str = "", gpu: float = 0, **spec: Any) -> Obj:
    resources = {"gpu": {"quota": gpu, "limit": -1, "overQuotaWeight": 1}}
    body = {"parentQueue": parent, "resources": resources, **spec}
    return {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": name}, "spec": body}


def node(name: str = "n1", gpus: int = 8, labels: dict[str, str] | None = None, **status: Any) -> Obj:
    allocatable = {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": str(gpus)}
    meta = {"name": name, "labels": labels if labels is not None else {"nvidia.com/gpu.memory": "81920"}}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": meta,
        "status": {"allocatable": allocatable, **status},
    }


def topology(name: str, *levels: str, aliases: dict[str, str] | None = None) -> Obj:
    """A Topology: node label keys from the coarsest level to the finest; `aliases`: label → alias."""
    named = aliases or {}
    written = [{"nodeLabel": level} | ({"alias": named[level]} if level in named else {}) for level in levels]
    return {
        "apiVersion": "kai.scheduler/v1alpha1",
        "kind": "Topology",
        "metadata": {"name": name},
        "spec": {"levels": written},
    }


def podgroup(name: str, queue: str = "team-a", ns: str = "team-a", **spec: Any) -> Obj:
    meta = {"name": name, "namespace": ns}
    body = {"queue": queue, **spec}
    return {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup", "metadata": meta, "spec": body}


def pod(
    name: str,
    ns: str = "team-a",
    gpus: float = 0,
    group: str | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    **spec: Any,
) -> Obj:
    """A kai-scheduler pod; `labels` defaults to the team-a queue label."""
    notes = dict(annotations or {})
    if group is not None:
        notes["pod-group-name"] = group
    limits = {"nvidia.com/gpu": str(gpus)} if gpus else {}
    container = {"name": "main", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": limits}}
    meta = {
        "name": name,
        "namespace": ns,
        "labels": {"kai.scheduler/queue": "team-a"} if labels is None else labels,
    }
    body = {"schedulerName": "kai-scheduler", "containers": [container], **spec}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {**meta, "annotations": notes}, "spec": body}


def convert(*objects: Obj, group_pods: bool = True) -> tuple[ClusterState, list[str]]:
    """Write the objects to one YAML stream named test.yaml and convert them as `simulate` does,
    pods grouped by the podgrouper first; `group_pods=False`: as a cluster's cache shows them
    before the podgrouper ran (pods naming no PodGroup wait)."""
    text = yaml.safe_dump_all(objects, sort_keys=False)
    if group_pods:
        documents, read_problems = read_manifest_text(text, "test.yaml")
        state, problems = cluster_from_workload_documents(documents, read_problems)
    else:
        state, problems = cluster_from_manifest_set(load_manifest_text(text, "test.yaml"))
    return state, [str(problem) for problem in problems]


def base(*objects: Obj) -> tuple[ClusterState, list[str]]:
    """Convert `objects` on top of one 8-GPU node and a team-a queue."""
    return convert(queue("team-a", gpu=8), node(), *objects)
