"""What tasks ask of queues in the fairness dimensions (cpu, memory, GPUs), and what the cluster
has to divide: made once per pod spec where a lone task's answer never changes, summed in plain
floats where a gang's is asked per job, always the very floats a numpy running sum gives."""

from __future__ import annotations

import struct
from collections.abc import Sequence

import numpy as np

from kai_ray.engine.jobs import Task
from kai_ray.engine.queues import Charge
from kai_ray.identity_cache import IdentityCache
from kai_ray.model.objects import (
    TaskSpec,
)
from kai_ray.model.resources import CPU, GPU, MEMORY
from kai_ray.model.snapshot import NodeTable, Snapshot

__all__ = [
    "DEFAULT_GPU_MEMORY_MIB",
    "REQUEST_BYTES",
    "FairnessFloats",
    "cluster_fairness_totals",
    "gpu_memory_bounds",
    "lone_request",
    "lone_request_floats",
    "summed_request",
    "whole_gpu_charge",
]

DEFAULT_GPU_MEMORY_MIB = 100.0

FairnessFloats = tuple[Charge, bytes]
"""A fairness request's floats (cpu, memory, GPUs) and the bytes of its array."""


def whole_gpu_charge(spec: TaskSpec) -> Charge:
    """`Session.placed_charge` of a pod that shares no GPU, the same on every row (its accepted
    GPUs are its whole ones): a tuple, as sessions share it. Made once per pod spec and kept with
    its facts (`SpecFacts.queue_charge`): a scheduler's specs outlive its cycles
    (`convert.live`), and a new tuple per placed pod was most of a charge."""
    return float(spec.cpu_millis), float(spec.memory), float(spec.accepted_gpus(DEFAULT_GPU_MEMORY_MIB))


def _lone_request(spec: TaskSpec) -> np.ndarray | None:
    """`Session.fairness_request` of a lone task of the spec if it shares no GPU (its accepted
    GPUs are its whole ones on any GPU memory), None if it does: read-only, as sessions share it.
    Made of `lone_request_floats`' floats, so the two agree float for float."""
    known = lone_request_floats(spec)
    if known is None:
        return None
    request = np.array(known[0])
    request.flags.writeable = False
    return request


lone_request = IdentityCache(_lone_request)
"""A lone task's `Session.fairness_request`, made once per pod spec: building the array was most
of a request's cost."""


def lone_request_floats(spec: TaskSpec) -> FairnessFloats | None:
    """`Session.fairness_request_floats` of a lone task of the spec if it shares no GPU: the
    floats and the bytes a float64 array of them holds, without making the array. Each sum starts
    from 0.0 as `fairness_request`'s does, so the floats are the very ones it gives. Made once per
    pod spec and kept with its facts (`SpecFacts.lone_request`): the job queue asks one per pod
    placed, and `tobytes` per request and `tolist` per queue order key were most of it."""
    if spec.is_shared_gpu:
        return None
    floats = (float(0.0 + spec.cpu_millis), float(0.0 + spec.memory), float(0.0 + spec.gpu))
    return floats, REQUEST_BYTES.pack(*floats)


def summed_request(tasks: Sequence[Task], gpu_memory: float) -> Charge:
    """The tasks' fairness request summed in plain floats, in task order from 0.0: the very floats
    a numpy running sum gives, without a numpy call per task (queue order asks this of every job
    it weighs)."""
    cpu = memory = gpus = 0.0
    for task in tasks:
        spec = task.spec
        cpu += spec.cpu_millis
        memory += spec.memory
        gpus += spec.accepted_gpus(gpu_memory)
    return cpu, memory, gpus


REQUEST_BYTES = struct.Struct("=3d")
"""Three floats packed as a float64 array of them holds them: the bytes `tobytes` gives."""


def gpu_memory_bounds(table: NodeTable) -> tuple[float, float]:
    """The smallest and largest GPU memory of the nodes that report one (the default otherwise):
    a pending pod's GPU-memory request counts as a share of the smallest, queue order weighs it
    on the largest."""
    memories = [m for m in table.gpu_memory if m > DEFAULT_GPU_MEMORY_MIB]
    return (
        float(min(memories, default=DEFAULT_GPU_MEMORY_MIB)),
        float(max(memories, default=DEFAULT_GPU_MEMORY_MIB)),
    )


def cluster_fairness_totals(snapshot: Snapshot) -> np.ndarray:
    """Cluster capacity queues divide (§6.1): allocatable of the ready nodes, less what other
    schedulers' pods hold on them."""
    table = snapshot.nodes
    ready = table.allocatable[table.schedulable]
    totals = np.array([ready[:, CPU].sum(), ready[:, MEMORY].sum(), ready[:, GPU].sum()])
    for pod in snapshot.held:
        row = table.index[pod.task.node] if pod.task.node is not None else None
        if pod.foreign and row is not None and table.schedulable[row]:
            task = pod.task
            totals -= (task.cpu_millis, task.memory, task.accepted_gpus(float(table.gpu_memory[row])))
    remaining: np.ndarray = np.maximum(totals, 0.0)
    return remaining
