"""Writes a benchmark shape as a conformance scenario (shared FORMAT.md, schemaVersion 1).

The point is a common input: KAI itself, or any other scheduler with a
conformance harness, can run the exact cluster kai-ray was timed on. Shapes
are built in scenario units already (see `shapes`), so this is a plain
transcription; the round trip through `load_scenario` is tested to give the
same cluster and config back.  A constraint the format cannot state (a preferred
term, a spread constraint) is refused, not dropped: the scenario would be another
cluster.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from kai_ray.api.config import SchedulerConfig
from kai_ray.bench.shapes import MINUTE, Shape
from kai_ray.cluster.sim.scenario import MEGABYTE
from kai_ray.engine.cycle import schedule
from kai_ray.model.objects import (
    UNLIMITED,
    JobSpec,
    NodeSpec,
    PodAffinityTerm,
    QueueSpec,
    ResourceQuota,
    TaskSpec,
    TaskStatus,
)
from kai_ray.model.snapshot import compile_snapshot

NORMALIZED_STATUS = {
    TaskStatus.PENDING: "Pending",
    TaskStatus.GATED: "Pending",
    TaskStatus.RUNNING: "Running",
    TaskStatus.BOUND: "Running",
    TaskStatus.BINDING: "Running",
    TaskStatus.ALLOCATED: "Running",
    TaskStatus.PIPELINED: "Pipelined",
    TaskStatus.RELEASING: "Releasing",
    TaskStatus.STUCK_IN_RELEASING: "StuckInReleasing",
    TaskStatus.SUCCEEDED: "Succeeded",
    TaskStatus.FAILED: "Failed",
}
"""FORMAT.md's normalized status vocabulary, the only one `expected` accepts."""


def _number(value: float) -> int | float:
    """Integral values as ints: FORMAT.md wants integer CPU, memory and whole GPUs."""
    return int(value) if float(value).is_integer() else value


def _minutes(seconds: float) -> int | float:
    return _number(seconds / MINUTE)


def scenario_document(shape: Shape) -> dict[str, Any]:
    """The scenario as plain data; its `expected` block is what kai-ray schedules for it."""
    state = shape.state
    config = shape.config
    return {
        "schemaVersion": 1,
        "name": shape.name,
        "source": {"repo": "kai-ray", "file": "kai_ray/bench/shapes.py", "test": shape.name},
        "config": {
            "actions": list(config.actions),
            "mode": "single",
            "cyclesUntilMatch": 1,
            "cyclesAfterMatch": 0,
            "staleGangGracePeriodSeconds": _number(config.default_staleness_grace_seconds),
            "placement": _placement(config),
            "plugins": "default",
            "k8sPredicates": config.has_plugin("predicates"),
            "maxConsolidationPreemptees": config.max_consolidation_preemptees,
            "allowConsolidatingReclaim": config.allow_consolidating_reclaim,
        },
        "nodes": [_node(node) for node in state.nodes],
        "queues": [_queue(queue) for queue in state.queues],
        "jobs": [_job(job, state.now) for job in state.jobs],
        "expected": _expected(shape),
    }


def _placement(config: SchedulerConfig) -> dict[str, str]:
    """The `nodeplacement` plugin's strategies, which is where the config keeps them (binpack if unset)."""
    arguments = config.plugin_arguments("nodeplacement")
    return {"gpu": arguments.get("gpu", "binpack"), "cpu": arguments.get("cpu", "binpack")}


def write_scenario(shape: Shape, path: Path) -> None:
    """Writes the scenario YAML; libyaml's emitter when present: big shapes run to 400k lines."""
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    with path.open("w") as out:
        yaml.dump(scenario_document(shape), out, Dumper=dumper, sort_keys=False, width=120)


def _node(node: NodeSpec) -> dict[str, Any]:
    return {
        "name": node.name,
        "gpus": node.gpus,
        "gpuMemoryMiB": node.gpu_memory_mib,
        "cpuMillis": _number(node.cpu_millis),
        "memory": _number(node.memory),
        "maxPods": node.max_pods,
        "gpuMemorySynced": node.gpu_memory_synced,
        "labels": dict(node.labels),
        **({"extendedResources": {k: _number(v) for k, v in node.extended.items()}} if node.extended else {}),
    }


def _resource(quota: ResourceQuota, scale: float = 1.0) -> dict[str, int | float]:
    """One queue resource in scenario units; -1 ("no bound") is never scaled."""

    def scaled(value: float) -> int | float:
        return _number(value if value == UNLIMITED else value / scale)

    return {
        "quota": scaled(quota.quota),
        "limit": scaled(quota.limit),
        "overQuotaWeight": _number(quota.over_quota_weight),
    }


def _pool(node_pool: str) -> dict[str, str]:
    """`nodePool` only when set: the conformance format does not know it, and shapes without
    pools must stay valid scenarios for it."""
    return {"nodePool": node_pool} if node_pool else {}


def _queue(queue: QueueSpec) -> dict[str, Any]:
    return {
        **_pool(queue.node_pool),
        "name": queue.name,
        "parent": queue.parent,
        "priority": queue.priority,
        "createdMinute": int(queue.created // MINUTE),
        "resources": {
            "gpu": _resource(queue.gpu),
            "cpu": _resource(queue.cpu),
            "memory": _resource(queue.memory, MEGABYTE),
        },
    }


def _job(job: JobSpec, now: float) -> dict[str, Any]:
    """Shapes only build single-pod-set gangs, so `minMember` (the default pod set's size) says it all."""
    return {
        **_pool(job.node_pool),
        "name": job.name,
        "namespace": job.namespace,
        "queue": job.queue,
        "priority": job.priority,
        "preemptible": job.preemptible,
        "ageMinutes": _minutes(now - job.created),
        "startedMinutesAgo": None if job.last_start is None else _minutes(now - job.last_start),
        "minMember": job.subgroups.pod_sets[0].min_available,
        "tasks": [_task(task, job.namespace) for task in job.tasks],
    }


def _task(task: TaskSpec, namespace: str) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "name": task.name,
        "status": task.status.value,
        "node": task.node,
        "cpuMillis": _number(task.cpu_millis),
        "memory": _number(task.memory),
        "gpu": _number(task.gpu),
        "gpuMemoryMiB": task.gpu_memory_mib,
        "gpuGroups": list(task.gpu_groups),
    }
    if task.is_shared_gpu:
        raw["gpuDevices"] = task.gpu_devices
    if task.labels:
        raw["labels"] = dict(task.labels)
    if task.extended:
        raw["extendedResources"] = {name: _number(amount) for name, amount in task.extended}
    return raw | _pod_affinity(task, namespace)


def _pod_affinity(task: TaskSpec, namespace: str) -> dict[str, Any]:
    """FORMAT.md's "Inter-pod affinity": required terms only, each on `matchLabels`."""
    affinity = task.pod_affinity
    unwritable = [
        what
        for what, given in (
            ("preferred node affinity", task.preferred_node_affinity),
            ("preferred pod (anti-)affinity", affinity and (affinity.preferred or affinity.preferred_anti)),
            ("topology spread constraints", task.spread),
            ("host ports", task.host_ports),
        )
        if given
    ]
    if unwritable:
        raise ValueError(f"task {task.name!r}: the scenario format has no {', '.join(unwritable)}")
    if affinity is None:
        return {}
    written: dict[str, Any] = {}
    for key, terms in (("podAffinity", affinity.required), ("podAntiAffinity", affinity.required_anti)):
        if terms:
            required = [_term(task.name, term, namespace) for term in terms]
            written[key] = {"requiredDuringSchedulingIgnoredDuringExecution": required}
    return written


def _term(task: str, term: PodAffinityTerm, namespace: str) -> dict[str, Any]:
    selector = term.selector
    if selector is None or selector.expressions or not term.namespaces:
        raise ValueError(
            f"task {task!r}: the scenario format's pod affinity terms select on matchLabels,"
            " in namespaces it names"
        )
    raw: dict[str, Any] = {
        "labelSelector": {"matchLabels": dict(selector.match_labels)},
        "topologyKey": term.topology_key,
    }
    if term.namespaces != {namespace}:
        raw["namespaces"] = sorted(term.namespaces)
    return raw


def _expected(shape: Shape) -> dict[str, Any]:
    """What kai-ray makes of the first pending job, and per-cycle counts no plan can exceed.

    FORMAT.md requires something to check; the head of the pending line is
    the job every scheduler must decide on. A cycle changes each task at most
    once (bound, pipelined or evicted, and a pod allocated earlier in the
    cycle may be evicted by a later action), so the task count bounds all
    three counts without constraining any scheduler.
    """
    jobs = shape.state.jobs
    pending = [job for job in jobs if any(t.status == TaskStatus.PENDING for t in job.tasks)]
    if not pending:
        raise ValueError(f"shape {shape.name}: no pending job to set an expectation on")
    head = pending[0]
    plan = schedule(compile_snapshot(shape.state), shape.config)
    statuses = {NORMALIZED_STATUS[plan.tasks[(head.key, task.name)].status] for task in head.tasks}
    if len(statuses) != 1:
        raise ValueError(f"shape {shape.name}: job {head.name} ends split over {sorted(statuses)}")
    tasks = sum(len(job.tasks) for job in jobs)
    return {
        "jobs": {head.name: {"status": statuses.pop()}},
        "counts": {"maxBinds": tasks, "maxEvictions": tasks, "maxPipelined": tasks},
    }
