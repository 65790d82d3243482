"""The Kubernetes objects of the churn benchmark: a busy cluster and the watch events that change it.

Why objects and not a `ClusterState`: the churn benchmark times what `kai-ray serve` does with
watch events (cache → models → conversion → snapshot → cycle), so its input must be what an
API server sends.  Generated from index arithmetic only, like the other shapes, so the same
name always gives the same stream of events.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from kai_ray.api.constants import (
    CORE_API_VERSION,
    POD_GROUP_NAME_ANNOTATION,
    PODGROUP_API_VERSION,
    QUEUE_API_VERSION,
    QUEUE_LABEL,
    SCHEDULER_NAME,
)

__all__ = ["CHURN_PATTERN", "NAMESPACE", "ChurnCluster", "WatchEvent", "churn_sizes"]

CHURN_PATTERN = r"churn-(\d+)x(\d+)"

NAMESPACE = "churn"
DEPARTMENTS = 4
LEAVES_PER_DEPARTMENT = 5
GPUS_PER_NODE = 8
CREATED = "2026-01-01T00:00:00Z"
STARTED = "2026-01-01T00:01:00Z"

Object = dict[str, Any]


@dataclass(frozen=True)
class WatchEvent:
    """One watch event as the cache receives it: ADDED, MODIFIED or DELETED, the cache's kind
    name, and the object (with its new resourceVersion)."""

    type: str
    kind: str
    obj: Object


def _unlimited(quota: float) -> dict[str, float]:
    return {"quota": quota, "limit": -1, "overQuotaWeight": 1}


def _queue(name: str, parent: str, gpus: float) -> Object:
    resources = {"gpu": _unlimited(gpus), "cpu": _unlimited(-1), "memory": _unlimited(-1)}
    spec: Object = {"resources": resources} | ({"parentQueue": parent} if parent else {})
    return {"apiVersion": QUEUE_API_VERSION, "kind": "Queue", "metadata": {"name": name}, "spec": spec}


def _node(name: str) -> Object:
    allocatable = {"cpu": "128", "memory": "1Ti", "pods": "110", "nvidia.com/gpu": str(GPUS_PER_NODE)}
    return {
        "apiVersion": CORE_API_VERSION,
        "kind": "Node",
        "metadata": {"name": name, "labels": {"nvidia.com/gpu.memory": "81920"}},
        "status": {"allocatable": allocatable, "conditions": [{"type": "Ready", "status": "True"}]},
    }


def _podgroup(name: str, queue: str) -> Object:
    return {
        "apiVersion": PODGROUP_API_VERSION,
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": NAMESPACE, "creationTimestamp": CREATED},
        "spec": {"queue": queue, "minMember": 1},
    }


def _pod(name: str, queue: str, node: str | None) -> Object:
    container = {
        "name": "main",
        "resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"nvidia.com/gpu": "1"}},
    }
    pod: Object = {
        "apiVersion": CORE_API_VERSION,
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "uid": f"uid-{name}",
            "creationTimestamp": CREATED,
            "labels": {QUEUE_LABEL: queue},
            "annotations": {POD_GROUP_NAME_ANNOTATION: name},
        },
        "spec": {"schedulerName": SCHEDULER_NAME, "containers": [container]},
        "status": {"phase": "Pending"},
    }
    if node is not None:
        pod["spec"]["nodeName"] = node
        pod["status"] = {"phase": "Running", "startTime": STARTED}
    return pod


class ChurnCluster:
    """`nodes` 8-GPU nodes, `pods` running one-GPU pods (each its own PodGroup) over 20 leaf
    queues; each `churn` ends the oldest 1% of the running pods and adds as many new pending ones.

    Pods are numbered in creation order; the running ones are spread round-robin over nodes,
    filling the cluster exactly when `pods` = 8 × `nodes` (the ended pods make room for the new).
    """

    def __init__(self, nodes: int, pods: int, churn_fraction: float = 0.01) -> None:
        if pods > nodes * GPUS_PER_NODE:
            raise ValueError(f"churn-{nodes}x{pods}: {pods} pods do not fit on {nodes} 8-GPU nodes")
        self.nodes = nodes
        self.pods = pods
        self.per_cycle = max(1, int(pods * churn_fraction))
        self._revision = 0
        self._oldest = 0
        self._next = pods
        self._placed: dict[str, str] = {}

    def _stamp(self, obj: Object) -> Object:
        self._revision += 1
        obj["metadata"]["resourceVersion"] = str(self._revision)
        return obj

    def _queue_of(self, index: int) -> str:
        return f"queue-{index % (DEPARTMENTS * LEAVES_PER_DEPARTMENT)}"

    def _name(self, index: int) -> str:
        return f"pod-{index:07d}"

    def initial(self) -> Iterator[WatchEvent]:
        """The cluster as a first list would give it: queues, nodes, then each running pod's
        PodGroup and pod."""
        total = float(self.nodes * GPUS_PER_NODE)
        leaves = DEPARTMENTS * LEAVES_PER_DEPARTMENT
        for department in range(DEPARTMENTS):
            yield self._added("Queue", _queue(f"dept-{department}", "", total / DEPARTMENTS))
        for leaf in range(leaves):
            parent = f"dept-{leaf // LEAVES_PER_DEPARTMENT}"
            yield self._added("Queue", _queue(f"queue-{leaf}", parent, total / leaves))
        for row in range(self.nodes):
            yield self._added("Node", _node(f"node-{row:05d}"))
        for index in range(self.pods):
            yield from self._new_pod(index, f"node-{index % self.nodes:05d}")

    def _added(self, kind: str, obj: Object) -> WatchEvent:
        return WatchEvent("ADDED", kind, self._stamp(obj))

    def _new_pod(self, index: int, node: str | None) -> Iterator[WatchEvent]:
        name, queue = self._name(index), self._queue_of(index)
        yield self._added("PodGroup", _podgroup(name, queue))
        yield self._added("Pod", _pod(name, queue, node))
        if node is not None:
            self._placed[name] = node

    def churn(self) -> list[WatchEvent]:
        """One cycle's churn: the oldest running pods end (pod and PodGroup deleted), as many
        new pending pods arrive."""
        events: list[WatchEvent] = []
        ended = 0
        while ended < self.per_cycle and self._oldest < self._next:
            name = self._name(self._oldest)
            queue = self._queue_of(self._oldest)
            node = self._placed.pop(name, None)
            self._oldest += 1
            if node is None:
                continue  # never bound: nothing ran, nothing ends
            events.append(WatchEvent("DELETED", "Pod", self._stamp(_pod(name, queue, node))))
            events.append(WatchEvent("DELETED", "PodGroup", self._stamp(_podgroup(name, queue))))
            ended += 1
        for _ in range(self.per_cycle):
            events.extend(self._new_pod(self._next, None))
            self._next += 1
        return events

    def bound(self, binds: list[tuple[str, str]]) -> list[WatchEvent]:
        """The watch events that follow a cycle's binds: (pod name, node) → the pod running there."""
        events = []
        for name, node in binds:
            index = int(name.rsplit("-", 1)[1])
            self._placed[name] = node
            events.append(WatchEvent("MODIFIED", "Pod", self._stamp(_pod(name, self._queue_of(index), node))))
        return events


def churn_sizes(name: str) -> tuple[int, int] | None:
    """(nodes, pods) of a churn shape name, or None for another kind of name."""
    match = re.fullmatch(CHURN_PATTERN, name)
    if match is None:
        return None
    nodes, pods = (int(group) for group in match.groups())
    if min(nodes, pods) < 1:
        raise ValueError(f"shape {name!r}: every size must be at least 1")
    return nodes, pods
