"""Object-level helpers every backend shares: the workload label, default cluster objects, what a
plan does to pods, and resource amounts in the API's fixed units.

Objects are never mutated here: a changed pod is a new model, so views handed out earlier stay
consistent while the cluster moves on.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from kai_ray.api import ApiObject, Manifest, ManifestSet, Node, Pod, PriorityClass, Queue
from kai_ray.api.constants import (
    BUILTIN_PRIORITY_CLASSES,
    DEFAULT_PARENT_QUEUE,
    DEFAULT_QUEUE,
    GPU_GROUP_LABEL,
    NODE_GPU_MEMORY_LABEL,
    PRIORITYCLASS_API_VERSION,
    QUEUE_API_VERSION,
    RESOURCE_CPU,
    RESOURCE_GPU,
    RESOURCE_MEMORY,
)
from kai_ray.api.quantity import QuantityError
from kai_ray.convert.common import Invalid
from kai_ray.convert.nodes import gpu_memory_mib
from kai_ray.convert.pods import gpu_request, pod_requests, share_requests
from kai_ray.engine.plan import Plan
from kai_ray.identity_cache import IdentityCache
from kai_ray.rpc.backend import BackendView, NamespacedName

__all__ = [
    "WORKLOAD_LABEL",
    "PodAmounts",
    "apply_plan",
    "default_cluster_objects",
    "min_node_gpu_memory",
    "pod_amounts",
    "rfc3339",
]

WORKLOAD_LABEL = "kai-ray.io/workload"
"""On every PodGroup and pod a submit creates: the workload (NAME of NS/NAME) they make up.

Workloads are recovered from objects by this label, so a backend needs no side table and a
restarted server (or another replica) sees the same workloads.
"""

GPU = RESOURCE_GPU
DEFAULT_NODE_CPU = "128"
DEFAULT_NODE_MEMORY = "1Ti"
DEFAULT_NODE_PODS = "256"
DEFAULT_NODE_EPHEMERAL_STORAGE = "1Ti"
"""Local scratch space, which every kubelet publishes and pods may ask for (kai-ray fits it)."""
DEFAULT_GPU_MEMORY_MIB = 81920


def rfc3339(moment: float) -> str:
    return datetime.fromtimestamp(moment, UTC).isoformat().replace("+00:00", "Z")


def default_cluster_objects(nodes: int, gpus_per_node: int = 8) -> list[ApiObject]:
    """N GPU nodes and what a fresh KAI install has: its priority classes and the two default
    queues (unlimited quota), as `kai-ray devcluster` seeds them."""
    width = len(str(max(nodes - 1, 0)))
    resources = {"quota": -1, "limit": -1, "overQuotaWeight": 1}
    queue_resources = {"cpu": resources, "gpu": resources, "memory": resources}
    objects: list[ApiObject] = [
        Queue.model_validate(
            {
                "apiVersion": QUEUE_API_VERSION,
                "kind": "Queue",
                "metadata": {"name": DEFAULT_PARENT_QUEUE},
                "spec": {"resources": queue_resources},
            }
        ),
        Queue.model_validate(
            {
                "apiVersion": QUEUE_API_VERSION,
                "kind": "Queue",
                "metadata": {"name": DEFAULT_QUEUE},
                "spec": {"parentQueue": DEFAULT_PARENT_QUEUE, "resources": queue_resources},
            }
        ),
    ]
    objects.extend(
        PriorityClass.model_validate(
            {
                "apiVersion": PRIORITYCLASS_API_VERSION,
                "kind": "PriorityClass",
                "metadata": {"name": name},
                "value": value,
            }
        )
        for name, value in BUILTIN_PRIORITY_CLASSES.items()
    )
    for index in range(nodes):
        name = f"node-{index:0{width}d}"
        allocatable = {
            "cpu": DEFAULT_NODE_CPU,
            "memory": DEFAULT_NODE_MEMORY,
            "pods": DEFAULT_NODE_PODS,
            "ephemeral-storage": DEFAULT_NODE_EPHEMERAL_STORAGE,
            GPU: str(gpus_per_node),
        }
        objects.append(
            Node.model_validate(
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "metadata": {
                        "name": name,
                        "labels": {
                            "kubernetes.io/hostname": name,
                            "nvidia.com/gpu.count": str(gpus_per_node),
                            NODE_GPU_MEMORY_LABEL: str(DEFAULT_GPU_MEMORY_MIB),
                        },
                    },
                    "status": {
                        "allocatable": allocatable,
                        "capacity": allocatable,
                        "conditions": [{"type": "Ready", "status": "True"}],
                    },
                }
            )
        )
    return objects


def apply_plan(pods: dict[NamespacedName, Pod], plan: Plan) -> list[NamespacedName]:
    """What the simulated cluster does with a plan, in place on `pods`; returns the pods changed.

    Pods "run" once bound (the binder and kubelet are instant here); a shared-GPU pod gets the
    group labels the binder writes, so the next snapshot sees which devices it holds.  An evicted
    pod is deleted and recreated as pending at once (its controller would recreate it).  A
    pipelined pod stays pending: pipelining reserves nothing across cycles.
    """
    changed: list[NamespacedName] = []
    for bind in plan.binds:
        key = (_namespace_of(bind.job), bind.task)
        pod = pods.get(key)
        if pod is not None:
            pods[key] = _bound(pod, bind.node, bind.gpu_groups)
            changed.append(key)
    for eviction in plan.evictions:
        key = (_namespace_of(eviction.job), eviction.task)
        pod = pods.get(key)
        if pod is not None and pod.spec.node_name:
            pods[key] = _unbound(pod)
            changed.append(key)
    return changed


def _namespace_of(job_key: str) -> str:
    return job_key.split("/", 1)[0] if "/" in job_key else ""


def _bound(pod: Pod, node: str, groups: tuple[str, ...]) -> Pod:
    labels = {k: v for k, v in pod.metadata.labels.items() if not k.startswith(GPU_GROUP_LABEL)}
    if len(groups) == 1:
        labels[GPU_GROUP_LABEL] = groups[0]
    else:
        labels.update({f"{GPU_GROUP_LABEL}/{index}": group for index, group in enumerate(groups)})
    metadata = pod.metadata.model_copy(update={"labels": labels})
    spec = pod.spec.model_copy(update={"node_name": node})
    status = pod.status.model_copy(update={"phase": "Running"})
    return _same_requests(pod, pod.model_copy(update={"metadata": metadata, "spec": spec, "status": status}))


def _unbound(pod: Pod) -> Pod:
    labels = {k: v for k, v in pod.metadata.labels.items() if not k.startswith(GPU_GROUP_LABEL)}
    metadata = pod.metadata.model_copy(update={"labels": labels})
    spec = pod.spec.model_copy(update={"node_name": ""})
    status = pod.status.model_copy(update={"phase": "Pending"})
    return _same_requests(pod, pod.model_copy(update={"metadata": metadata, "spec": spec, "status": status}))


def _same_requests(source: Pod, copy: Pod) -> Pod:
    """``copy`` differs from ``source`` only in its node, phase and GPU-group labels, none of which
    a request reads: carry over what was parsed, or every bind would parse its pod again (the
    next cycle converts it, the workload views derive it)."""
    share_requests(source.spec, copy.spec)
    _pod_amounts.share(source, copy)
    return copy


@dataclass(frozen=True)
class PodAmounts:
    """A pod's request in the API's units: cpu in cores, memory in bytes, GPUs (fractional when shared)."""

    cpu: float = 0.0
    memory: float = 0.0
    gpu: float = 0.0
    gpu_memory_mib: int = 0

    def as_map(self, node_gpu_memory_mib: float) -> dict[str, float]:
        gpus = self.gpu
        if self.gpu_memory_mib and node_gpu_memory_mib > 0:
            gpus = min(1.0, self.gpu_memory_mib / node_gpu_memory_mib)
        return {RESOURCE_CPU: self.cpu, RESOURCE_MEMORY: self.memory, GPU: gpus}


def pod_amounts(pod: Pod) -> PodAmounts:
    """What the pod asks for; a pod whose request does not parse counts as asking for nothing
    (the conversion reports it as a problem and it is not scheduled).  Remembered per pod object
    (`IdentityCache`)."""
    return _pod_amounts(pod)


def _compute_pod_amounts(pod: Pod) -> PodAmounts:
    try:
        requests = pod_requests(pod.spec)
        gpu = gpu_request(pod.metadata.annotations, requests.get(GPU, 0.0))
    except (Invalid, QuantityError):
        return PodAmounts()
    gpus = gpu.gpu * gpu.devices if 0 < gpu.gpu < 1 else gpu.gpu
    return PodAmounts(
        requests.get(RESOURCE_CPU, 0.0),
        requests.get(RESOURCE_MEMORY, 0.0),
        gpus,
        gpu.memory_mib * gpu.devices,
    )


_pod_amounts: IdentityCache[Pod, PodAmounts] = IdentityCache(_compute_pod_amounts)


def node_gpu_memory(node: Node | None) -> float:
    """Per-GPU memory in MiB the node publishes (0 when it publishes none); remembered per node
    object, since every workload's view asks it of every node."""
    if node is None:
        return 0.0
    return _node_gpu_memory(node)


def _compute_node_gpu_memory(node: Node) -> float:
    return float(gpu_memory_mib(node.metadata.labels) or 0)


_node_gpu_memory: IdentityCache[Node, float] = IdentityCache(_compute_node_gpu_memory)


class _LastNodes:
    """The smallest published GPU memory of the last node table asked about, by identity."""

    lock = threading.Lock()
    nodes: Mapping[NamespacedName, ApiObject] | None = None
    smallest = 0.0


def min_node_gpu_memory(nodes: Mapping[NamespacedName, ApiObject]) -> float:
    """The smallest per-GPU memory any node publishes (0 when none does): what a pending pod's
    GPU-memory request is counted against.

    Every workload view needs it, and it reads every node; remembering it for the last node
    table (by identity) makes it O(1) per view.  Sound because a view's tables are never
    changed once handed out (`BackendView`); with the simulated backend's copy-on-write views
    the node table stays the same object until a node changes.
    """
    with _LastNodes.lock:
        if _LastNodes.nodes is nodes:
            return _LastNodes.smallest
    found = [m for m in (node_gpu_memory(n) for n in nodes.values() if isinstance(n, Node)) if m > 0]
    smallest = min(found) if found else 0.0
    with _LastNodes.lock:
        _LastNodes.nodes, _LastNodes.smallest = nodes, smallest
    return smallest


def add_amounts(total: dict[str, float], part: Mapping[str, float]) -> None:
    for name, amount in part.items():
        total[name] = total.get(name, 0.0) + amount


def priority_values(view: BackendView) -> dict[str, int]:
    """PriorityClass values by name; KAI's four classes exist even when not written out."""
    values = dict(BUILTIN_PRIORITY_CLASSES)
    values.update(
        {
            name: obj.value
            for (_, name), obj in view.all("PriorityClass").items()
            if isinstance(obj, PriorityClass)
        }
    )
    return values


def queues_of(view: BackendView) -> dict[str, Queue]:
    return {name: obj for (_, name), obj in view.all("Queue").items() if isinstance(obj, Queue)}


def manifest_set(
    kinds: Mapping[str, Mapping[NamespacedName, ApiObject]], source: str = "<cluster>"
) -> ManifestSet:
    """The objects as the conversion reads them, numbered kind by kind in insertion order.

    Both the live cycle and a what-if build their input here, so an object written without a
    creation time gets the same place in both, and the same objects give the same plan.
    """
    manifests: list[Manifest[ApiObject]] = []
    for by_name in kinds.values():
        for obj in by_name.values():
            manifests.append(Manifest(source, 0, len(manifests), obj))
    return ManifestSet(manifests=manifests)


def unbound_pod(pod: Pod) -> Pod:
    """The pod as its controller recreates it after an eviction: pending, on no node."""
    return _unbound(pod)
