"""The engine's `ClusterState` from the cluster cache, through the one translation of objects.

A live cluster and a directory of manifests must mean the same thing to the
scheduler, so the cached objects go through `kai_ray.convert` like
manifests do.  Every object it cannot use becomes a `ManifestProblem` (file
"cluster") and is skipped; the rest is scheduled.

Pods of this scheduler without a `pod-group-name` annotation wait for the
grouper to give them a PodGroup first (as KAI's podgrouper does before the
scheduler ever sees a pod): scheduling them under an implicit job in the
meantime would bind them under a name no PodGroup carries.  Such a pod that
already sits on a node, like every pod of another scheduler there, still
counts on that node.
"""

from __future__ import annotations

import time

from kai_ray.api import ManifestProblem
from kai_ray.cluster.kube.cache import FOREIGN_POD, ClusterCache
from kai_ray.cluster.kube.models import ModelCache
from kai_ray.convert import cluster_from_manifest_set
from kai_ray.model.objects import ClusterState

__all__ = ["SOURCE", "snapshot"]

SOURCE = "cluster"
"""The `file` of every problem found in the cache."""

# Queues and priority classes before what refers to them only for readable problem order.
_ORDER = ("Queue", "PriorityClass", "Topology", "Node", "PodGroup", "BindRequest", "Pod", FOREIGN_POD)


def snapshot(
    cache: ClusterCache, now: float | None = None, models: ModelCache | None = None
) -> tuple[ClusterState, list[ManifestProblem]]:
    """Convert the cache's current contents; `now` defaults to the wall clock (epoch seconds).

    Reads one consistent `cache.entries()`, never the API server. Problems are returned, never
    raised.  ``models``: the reader's models from its previous reads (a scheduler keeps one), so
    only objects whose resourceVersion moved are parsed and validated again.
    """
    objects = (ModelCache(SOURCE) if models is None else models).load(cache.entries(_ORDER), _ORDER)
    return cluster_from_manifest_set(
        objects.loaded,
        now=time.time() if now is None else now,
        scheduler_name=cache.scheduler_name,
        occupants=objects.occupants,
    )
