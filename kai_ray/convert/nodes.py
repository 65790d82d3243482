"""Node manifests → `NodeSpec`s in internal units (millicores, bytes, devices, MiB).

GPU memory comes from the GPU feature discovery label, the same source KAI
uses for GPU-memory requests (spec/scheduling.md §17).
"""

from __future__ import annotations

from kai_ray.api import Manifest, Node, parse_quantity
from kai_ray.api.constants import (
    NODE_GPU_MEMORY_LABEL,
    RESOURCE_CPU,
    RESOURCE_GPU,
    RESOURCE_MEMORY,
    RESOURCE_PODS,
)
from kai_ray.convert.common import VECTOR_RESOURCES, Invalid, label_field
from kai_ray.model.objects import NodeSpec, Taint

DEFAULT_MAX_PODS = 110
"""Kubelet's default pod limit, used when a node states none."""
GPU_MEMORY_PLACEHOLDER_MIB = 100
"""What KAI assumes when the GPU memory label is missing; GPU-memory requests are then refused."""
_MIB = 2**20


def node_spec(manifest: Manifest[Node]) -> NodeSpec:
    node = manifest.obj
    labels = node.metadata.labels
    gpu_memory = gpu_memory_mib(labels)
    return NodeSpec(
        name=node.metadata.name,
        cpu_millis=_amount(node, RESOURCE_CPU) * 1000,
        memory=_amount(node, RESOURCE_MEMORY),
        gpus=int(_amount(node, RESOURCE_GPU)),
        gpu_memory_mib=gpu_memory or GPU_MEMORY_PLACEHOLDER_MIB,
        max_pods=int(_amount(node, RESOURCE_PODS, DEFAULT_MAX_PODS)),
        gpu_memory_synced=gpu_memory is not None,
        labels=dict(labels),
        taints=tuple(Taint(t.key, t.value, t.effect) for t in node.spec.taints),
        unschedulable=node.spec.unschedulable,
        ready=_ready(node),
        extended=_extended(node),
    )


def gpu_memory_mib(labels: dict[str, str]) -> int | None:
    """Per-GPU memory in MiB from `nvidia.com/gpu.memory`, floored to a multiple of 100.

    Values of 2^20 and above are byte counts (some exporters write bytes).
    """
    text = labels.get(NODE_GPU_MEMORY_LABEL)
    if text is None:
        return None
    if not text.isdecimal():
        raise Invalid(label_field(NODE_GPU_MEMORY_LABEL), f"must be a whole number of MiB, got {text!r}")
    value = int(text)
    mib = value // _MIB if value >= _MIB else value
    floored = mib - mib % 100
    if floored < GPU_MEMORY_PLACEHOLDER_MIB:
        raise Invalid(label_field(NODE_GPU_MEMORY_LABEL), f"must be at least 100 MiB, got {text!r}")
    return floored


def _amount(node: Node, resource: str, default: float = 0.0) -> float:
    """Allocatable amount, falling back to capacity, per resource (quantities were validated on load)."""
    value = node.status.allocatable.get(resource, node.status.capacity.get(resource))
    return default if value is None else parse_quantity(value)


def _extended(node: Node) -> dict[str, float]:
    """Every resource outside the node vector, allocatable falling back to capacity as `_amount`
    does; a zero is kept (a MIG profile the node has, with none free)."""
    status = node.status
    names = (status.capacity.keys() | status.allocatable.keys()) - VECTOR_RESOURCES
    return {name: _amount(node, name) for name in sorted(names)}


_TROUBLE = frozenset({"MemoryPressure", "DiskPressure", "PIDPressure", "NetworkUnavailable"})


def _ready(node: Node) -> bool:
    """Ready and under no pressure (spec/scheduling.md §16.1, 6), judged only on conditions reported.

    A node without conditions is ready: hand-written manifests rarely carry status, and
    KAI's own test nodes have none.
    """
    for condition in node.status.conditions:
        if condition.type == "Ready" and condition.status != "True":
            return False
        if condition.type in _TROUBLE and condition.status == "True":
            return False
    return True
