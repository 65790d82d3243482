"""The Kubernetes-style node filter (§16.1) as array masks.

Masks that depend only on a task's constraints (affinity, selector,
tolerations, GPU-memory sync) are computed once per constraint signature
per session; a thousand identical pods cost one evaluation.
"""

from __future__ import annotations

import numpy as np

from kai_ray.engine.jobs import Task
from kai_ray.engine.plugins.base import NodeFilter, Plugin
from kai_ray.model.objects import AffinityRequirement, NodeSpec, Taint, TaskSpec, Toleration

SignatureKey = tuple[object, ...]


class PredicatesPlugin(Plugin):
    name = "predicates"

    def on_session_open(self) -> None:
        self._static: dict[SignatureKey, NodeFilter] = {}
        self._max_allocatable = self.session.nodes.table.allocatable.max(axis=0, initial=0.0)

    def pre_predicate(self, task: Task) -> str | None:
        over = task.request > self._max_allocatable + 1e-9
        if over.any():
            return "the pod requests more than the largest node in the pool offers"
        return None

    def node_filter(self, task: Task) -> NodeFilter:
        key = _signature(task.spec)
        cached = self._static.get(key)
        if cached is None:
            cached = self._static_filter(task.spec)
            self._static[key] = cached
        return cached

    def _static_filter(self, spec: TaskSpec) -> NodeFilter:
        table = self.session.nodes.table
        stages = [
            (table.schedulable, "unschedulable or not ready"),
            (
                np.array([_matches_node(spec, node) for node in table.specs], dtype=bool),
                "fail node affinity/taints",
            ),
        ]
        if spec.gpu_memory_mib > 0:
            stages.append((table.gpu_memory_synced, "do not publish GPU memory"))
        mask = np.ones(len(table), dtype=bool)
        reasons = []
        for stage_mask, words in stages:
            turned_away = int(np.count_nonzero(mask & ~stage_mask))
            if turned_away:
                reasons.append(f"{turned_away} {words}")
            mask &= stage_mask
        return NodeFilter(mask, ", ".join(reasons))


def _signature(spec: TaskSpec) -> SignatureKey:
    return (
        spec.node_affinity,
        tuple(sorted(spec.node_selector.items())),
        spec.tolerations,
        spec.gpu_memory_mib > 0,
    )


def _matches_node(spec: TaskSpec, node: NodeSpec) -> bool:
    labels = node.labels
    if any(labels.get(k) != v for k, v in spec.node_selector.items()):
        return False
    if not all(_requirement_holds(req, labels) for req in spec.node_affinity):
        return False
    return all(_tolerated(taint, spec.tolerations) for taint in node.taints)


def _requirement_holds(req: AffinityRequirement, labels: dict[str, str]) -> bool:
    value = labels.get(req.key)
    match req.operator:
        case "In":
            return value is not None and value in req.values
        case "NotIn":
            return value is None or value not in req.values
        case "Exists":
            return value is not None
        case "DoesNotExist":
            return value is None
        case "Gt" | "Lt":
            return _numeric_compare(value, req)
    return False


def _numeric_compare(value: str | None, req: AffinityRequirement) -> bool:
    try:
        left, right = int(value or ""), int(req.values[0])
    except (ValueError, IndexError):
        return False
    return left > right if req.operator == "Gt" else left < right


def _tolerated(taint: Taint, tolerations: tuple[Toleration, ...]) -> bool:
    if taint.effect == "PreferNoSchedule":
        return True
    for toleration in tolerations:
        if toleration.effect and toleration.effect != taint.effect:
            continue
        if toleration.operator == "Exists" and (not toleration.key or toleration.key == taint.key):
            return True
        if toleration.key == taint.key and toleration.value == taint.value:
            return True
    return False
