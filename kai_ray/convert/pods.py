"""A Pod manifest → `TaskSpec`: requests, GPU-sharing annotations, placement constraints, status.

Each rule follows what KAI's scheduler derives from a pod (spec/scheduling.md
§1.3 for requests and statuses, §17 for GPU sharing), so a pod file means the
same request here as there.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TypeVar

from kai_ray.api import Manifest, Pod, parse_quantity
from kai_ray.api.constants import (
    DEFAULT_SUBGROUP,
    GPU_FRACTION,
    GPU_FRACTION_NUM_DEVICES,
    GPU_GROUP_LABEL,
    GPU_MEMORY,
    RESOURCE_CPU,
    RESOURCE_GPU,
    RESOURCE_MEMORY,
    SUBGROUP_LABEL,
    TASK_PRIORITY_LABEL,
)
from kai_ray.api.core import Container, PodSpec
from kai_ray.api.quantity import QuantityError
from kai_ray.convert.common import (
    VECTOR_RESOURCES,
    Invalid,
    annotation_field,
    created,
    epoch,
    label_field,
)
from kai_ray.convert.constraints import (
    NamespaceLabels,
    host_ports,
    node_affinity,
    pod_affinity,
    preferred_node_affinity,
    spread_constraints,
)
from kai_ray.identity_cache import IdentityCache
from kai_ray.model.objects import TaskSpec, TaskStatus, Toleration

STUCK_IN_RELEASING_SECONDS = 120.0
"""A Running pod deleted longer ago than this is StuckInReleasing (KAI's default threshold)."""

Resources = dict[str, float]
T = TypeVar("T")


@dataclass(frozen=True)
class PodContext:
    """What a pod's status depends on besides the pod: the clock, nodes and live BindRequests."""

    now: float
    nodes: frozenset[str]
    binding: dict[tuple[str, str], str]
    """(namespace, pod name) → selected node, for BindRequests that have not failed."""
    gpu_groups: dict[tuple[str, str], tuple[str, ...]] = field(default_factory=dict)
    """(namespace, pod name) → shared GPU groups a BindRequest selected."""
    namespaces: NamespaceLabels = field(default_factory=dict)
    """Namespace → labels, for inter-pod affinity terms with a `namespaceSelector`."""


@dataclass(frozen=True)
class _GpuRequest:
    gpu: float = 0.0
    devices: int = 1
    memory_mib: int = 0


def task_from_pod(manifest: Manifest[Pod], context: PodContext) -> TaskSpec:
    pod = manifest.obj
    requests = pod_requests(pod.spec)
    gpu = gpu_request(pod.metadata.annotations, requests.get(RESOURCE_GPU, 0.0))
    status, node = task_status(pod, context)
    shared = gpu.memory_mib > 0 or 0 < gpu.gpu < 1
    return TaskSpec(
        name=pod.metadata.name,
        status=status,
        node=node,
        gpu_groups=gpu_groups(pod, context, gpu.devices) if shared and node is not None else (),
        cpu_millis=requests.get(RESOURCE_CPU, 0.0) * 1000,
        memory=requests.get(RESOURCE_MEMORY, 0.0),
        gpu=gpu.gpu,
        gpu_devices=gpu.devices,
        gpu_memory_mib=gpu.memory_mib,
        subgroup=pod.metadata.labels.get(SUBGROUP_LABEL, DEFAULT_SUBGROUP),
        node_affinity=node_affinity(pod.spec),
        node_selector=dict(pod.spec.node_selector),
        tolerations=tuple(Toleration(t.key, t.operator, t.value, t.effect) for t in pod.spec.tolerations),
        task_priority=_task_priority(pod.metadata.labels),
        labels=dict(pod.metadata.labels),
        created=created(manifest),
        preferred_node_affinity=preferred_node_affinity(pod.spec),
        pod_affinity=pod_affinity(pod, context.namespaces),
        spread=spread_constraints(pod),
        host_ports=host_ports(pod.spec),
        extended=extended_requests(requests),
    )


def held_task(manifest: Manifest[Pod], context: PodContext) -> TaskSpec | None:
    """What a pod that is not scheduled here occupies on its node; None when it occupies none of ours.

    Read like any pod where possible.  A pod that cannot be read that way still
    holds its containers' requests; a GPU-sharing request that does not parse
    holds a whole device per requested device, the most it could be using.  Its
    labels, host ports, extended requests and pod (anti-)affinity, where they read,
    still bind the pods placed beside it: Kubernetes applies them to every pod on a node.
    """
    pod = manifest.obj
    node = pod.spec.node_name or None
    if node is None or node not in context.nodes or pod.status.phase in ("Succeeded", "Failed"):
        return None
    try:
        return task_from_pod(manifest, context)
    except Invalid:
        pass
    requests = pod_requests(pod.spec)
    gpus = held_gpus(pod.metadata.annotations, requests.get(RESOURCE_GPU, 0.0))
    releasing = pod.metadata.deletion_timestamp is not None
    return TaskSpec(
        name=pod.metadata.name,
        status=TaskStatus.RELEASING if releasing else TaskStatus.RUNNING,
        node=node,
        cpu_millis=requests.get(RESOURCE_CPU, 0.0) * 1000,
        memory=requests.get(RESOURCE_MEMORY, 0.0),
        gpu=gpus,
        created=created(manifest),
        labels=dict(pod.metadata.labels),
        pod_affinity=_lenient(lambda: pod_affinity(pod, context.namespaces), None),
        host_ports=_lenient(lambda: host_ports(pod.spec), ()),
        extended=extended_requests(requests),
    )


def held_gpus(annotations: dict[str, str], whole_gpus: float) -> float:
    """The devices an unreadable placed pod may be using: the larger of its whole GPUs and one
    device per GPU-sharing device it asks for.

    The kubelet hands out `nvidia.com/gpu` whatever the annotations say, and a sharing request
    holds at least part of each device it names; counting the larger never lets a node look
    freer than it is (a 4-GPU pod annotated with a fraction once counted as 1 GPU).
    """
    if GPU_FRACTION not in annotations and GPU_MEMORY not in annotations:
        return whole_gpus
    count = annotations.get(GPU_FRACTION_NUM_DEVICES, "1")
    shared = float(int(count)) if count.isdecimal() and int(count) > 0 else 1.0
    return max(whole_gpus, shared)


def gpu_disagreement(manifest: Manifest[Pod]) -> Invalid | None:
    """Why a placed pod's GPU count is a guess, naming the sharing annotation: it asks for whole
    GPUs and shares GPUs at once."""
    pod = manifest.obj
    annotations = pod.metadata.annotations
    sharing = next((key for key in (GPU_FRACTION, GPU_MEMORY) if key in annotations), None)
    whole = pod_requests(pod.spec).get(RESOURCE_GPU, 0.0)
    if sharing is None or not whole or not pod.spec.node_name:
        return None
    counted = held_gpus(annotations, whole)
    message = (
        f"{annotations[sharing]!r} shares GPUs while the pod requests {whole:g} {RESOURCE_GPU}; "
        f"counted as holding {counted:g} GPUs on node {pod.spec.node_name}"
    )
    return Invalid(annotation_field(sharing), message)


def _lenient(read: Callable[[], T], otherwise: T) -> T:
    """One part of a pod that could not be read whole, or `otherwise` when that part is the culprit."""
    try:
        return read()
    except Invalid:
        return otherwise


def gpu_groups(pod: Pod, context: PodContext, devices: int) -> tuple[str, ...]:
    """The shared GPUs a placed fractional pod holds, so it occupies them in the snapshot.

    The binder labels the pod (`runai-gpu-group`, or one `runai-gpu-group/<g>` per
    device); before that, its BindRequest names them. A placed pod with neither
    (bound by someone else) still holds devices: it gets groups of its own.
    """
    labels = pod.metadata.labels
    if GPU_GROUP_LABEL in labels:
        return (labels[GPU_GROUP_LABEL],)
    per_device = sorted(value for key, value in labels.items() if key.startswith(GPU_GROUP_LABEL + "/"))
    if per_device:
        return tuple(per_device)
    selected = context.gpu_groups.get((pod.metadata.namespace or "", pod.metadata.name))
    if selected:
        return selected
    owner = pod.metadata.uid or f"{pod.metadata.namespace}/{pod.metadata.name}"
    return tuple(f"{owner}-{index}" for index in range(devices))


def pod_requests(spec: PodSpec) -> Resources:
    """Σ containers + Σ native sidecars, at least each init container's peak, plus overhead.

    Remembered per spec object (`IdentityCache`): every cycle converts every pod again, and the
    replicas a submit or a workload controller makes often share one spec.  A copy is returned,
    so a caller changing it cannot change what the next caller gets.
    """
    return dict(_pod_requests(spec))


def share_requests(source: PodSpec, target: PodSpec) -> None:
    """``target`` is a copy of ``source`` with the same containers, init containers and overhead:
    its requests need not be parsed again (a pod being bound or unbound)."""
    _pod_requests.share(source, target)


def _compute_pod_requests(spec: PodSpec) -> Resources:
    running = _sum(_container_requests(c) for c in spec.containers)
    sidecars: Resources = {}
    init_peak: Resources = {}
    for init in spec.init_containers:
        if init.restart_policy == "Always":
            sidecars = _sum([sidecars, _container_requests(init)])
        else:
            init_peak = _max(init_peak, _sum([sidecars, _container_requests(init)]))
    overhead = {name: parse_quantity(value) for name, value in spec.overhead.items()}
    return _sum([_max(_sum([running, sidecars]), init_peak), overhead])


_pod_requests: IdentityCache[PodSpec, Resources] = IdentityCache(_compute_pod_requests)


def extended_requests(requests: Resources) -> tuple[tuple[str, float], ...]:
    """The requests outside the node vector (`VECTOR_RESOURCES`), by name: they must fit the node
    without being a queue's to account."""
    return tuple(
        sorted(
            (name, amount) for name, amount in requests.items() if name not in VECTOR_RESOURCES and amount > 0
        )
    )


def _container_requests(container: Container) -> Resources:
    """Requests, with limits standing in where no request is given (the API server's defaulting)."""
    merged = {**container.resources.limits, **container.resources.requests}
    return {name: parse_quantity(value) for name, value in merged.items()}


def _sum(parts: Iterable[Resources]) -> Resources:
    total: Resources = {}
    for part in parts:
        for name, amount in part.items():
            total[name] = total.get(name, 0.0) + amount
    return total


def _max(left: Resources, right: Resources) -> Resources:
    return {name: max(left.get(name, 0.0), right.get(name, 0.0)) for name in left.keys() | right.keys()}


def gpu_request(annotations: dict[str, str], whole_gpus: float) -> _GpuRequest:
    """Whole GPUs from `nvidia.com/gpu`, or a shared request from the GPU-sharing annotations.

    `gpu-fraction` wins over `gpu-memory` (§17); combining a fraction with
    whole GPUs, or giving a device count alone, is refused as KAI's admission does.
    """
    fraction = _fraction(annotations)
    memory = _positive_int(annotations, GPU_MEMORY)
    devices = _positive_int(annotations, GPU_FRACTION_NUM_DEVICES)
    if (fraction or memory) and whole_gpus:
        field = annotation_field(GPU_FRACTION if fraction else GPU_MEMORY)
        raise Invalid(field, f"cannot be combined with a {RESOURCE_GPU} request")
    if devices and not (fraction or memory):
        raise Invalid(annotation_field(GPU_FRACTION_NUM_DEVICES), f"needs {GPU_FRACTION} or {GPU_MEMORY}")
    if fraction:
        return _GpuRequest(gpu=fraction, devices=devices or 1)
    if memory:
        return _GpuRequest(memory_mib=memory, devices=devices or 1)
    return _GpuRequest(gpu=whole_gpus)


def _fraction(annotations: dict[str, str]) -> float | None:
    text = annotations.get(GPU_FRACTION)
    if text is None:
        return None
    try:
        value: float | None = parse_quantity(text)
    except QuantityError:
        value = None
    if value is None or not 0.0 < value <= 1.0:
        raise Invalid(annotation_field(GPU_FRACTION), f"must be a number in (0, 1], got {text!r}")
    return value


def _positive_int(annotations: dict[str, str], key: str) -> int | None:
    text = annotations.get(key)
    if text is None:
        return None
    if not text.isdecimal() or int(text) == 0:
        raise Invalid(annotation_field(key), f"must be a positive integer, got {text!r}")
    return int(text)


def _task_priority(labels: dict[str, str]) -> int | None:
    text = labels.get(TASK_PRIORITY_LABEL)
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        raise Invalid(label_field(TASK_PRIORITY_LABEL), f"must be an integer, got {text!r}") from None


def task_status(pod: Pod, context: PodContext) -> tuple[TaskStatus, str | None]:
    """KAI's pod state (spec/kubernetes-api.md §12) and the node the pod occupies, if any."""
    phase, node = pod.status.phase, pod.spec.node_name or None
    if node is not None and node not in context.nodes:
        raise Invalid("spec.nodeName", f"node {node!r} does not exist")
    if phase in ("Succeeded", "Failed"):
        return TaskStatus(phase), node
    if phase not in ("Pending", "Running"):
        raise Invalid("status.phase", f"unsupported phase {phase!r}")
    if phase == "Running" and node is None:
        raise Invalid("spec.nodeName", "a Running pod must name its node")
    deleted = epoch(pod.metadata.deletion_timestamp)
    if deleted is not None:
        stuck = phase == "Running" and context.now - deleted > STUCK_IN_RELEASING_SECONDS
        return (TaskStatus.STUCK_IN_RELEASING if stuck else TaskStatus.RELEASING), node
    return _live_status(pod, node, context)


def _live_status(pod: Pod, node: str | None, context: PodContext) -> tuple[TaskStatus, str | None]:
    if pod.status.phase == "Running":
        return TaskStatus.RUNNING, node
    if node is not None:
        return TaskStatus.BOUND, node
    selected = context.binding.get((pod.metadata.namespace or "", pod.metadata.name))
    if selected is not None:
        return TaskStatus.BINDING, selected
    if pod.spec.scheduling_gates:
        return TaskStatus.GATED, None
    return TaskStatus.PENDING, None
