"""The engine's `ClusterState` from the cluster cache, through the same converter as manifests.

A live cluster and a directory of manifests must mean the same thing to the
scheduler, so the cached objects are fed through the API models and the
simulator's converter (`cluster_from_manifest_set`) rather than a second,
drifting translation. Every object the converter cannot use becomes a
`ManifestProblem` (file "cluster") and is skipped; the rest is scheduled.

Pods without a `pod-group-name` annotation are left out: the grouper gives
them a PodGroup first (as KAI's podgrouper does before the scheduler ever
sees a pod), and scheduling them under an implicit job in the meantime would
bind them under a name no PodGroup carries.
"""

from __future__ import annotations

import time
from typing import Any

from kai_ray.api import ManifestProblem
from kai_ray.api.constants import POD_GROUP_NAME_ANNOTATION
from kai_ray.api.manifests import load_manifest_objects
from kai_ray.cluster.kube.cache import ClusterCache
from kai_ray.cluster.sim.manifests import cluster_from_manifest_set
from kai_ray.model.objects import ClusterState

__all__ = ["SOURCE", "is_grouped", "snapshot"]

SOURCE = "cluster"
"""The `file` of every problem found in the cache."""

# Queues and priority classes before what refers to them only for readable problem order.
_ORDER = ("Queue", "PriorityClass", "Topology", "Node", "PodGroup", "BindRequest", "Pod")


def snapshot(cache: ClusterCache, now: float | None = None) -> tuple[ClusterState, list[ManifestProblem]]:
    """Convert the cache's current contents; `now` defaults to the wall clock (epoch seconds).

    Reads one consistent `cache.contents()`, never the API server. Problems are
    returned, never raised. To skip cycles where nothing changed, compare
    `cache.generation` read before calling this with the previous one.
    """
    contents = cache.contents()
    objects: list[dict[str, Any]] = []
    for kind in _ORDER:
        items = contents.objects.get(kind, [])
        objects.extend(item for item in items if kind != "Pod" or is_grouped(item))
    loaded = load_manifest_objects(objects, SOURCE)
    return cluster_from_manifest_set(
        loaded, now=time.time() if now is None else now, scheduler_name=cache.scheduler_name
    )


def is_grouped(pod: dict[str, Any]) -> bool:
    """Whether the pod names its PodGroup (by the podgrouper or by its author)."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    return POD_GROUP_NAME_ANNOTATION in annotations
