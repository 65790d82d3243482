"""The engine's `ClusterState` from the cluster cache, through the one translation of objects.

A live cluster and a directory of manifests must mean the same thing to the scheduler, so the
cached objects go through `kai_ray.convert` like manifests do (`LiveCluster` gives what
`cluster_from_manifest_set` gives for the same objects).  Every object it cannot use becomes a
`ManifestProblem` (file "cluster") and is skipped; the rest is scheduled.

A `CacheReader` follows the cache's change log: each read validates and converts only what
changed since the reader's previous read, so a cycle costs what changed, not the cluster.

Pods of this scheduler without a `pod-group-name` annotation wait for the grouper to give them a
PodGroup first (as KAI's podgrouper does before the scheduler ever sees a pod): scheduling them
under an implicit job in the meantime would bind them under a name no PodGroup carries.  Such a
pod that already sits on a node, like every pod of another scheduler there, still counts on that
node.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from kai_ray.api import ManifestProblem
from kai_ray.cluster.kube.cache import ClusterCache
from kai_ray.cluster.kube.models import ModelCache
from kai_ray.convert.live import KIND_ORDER, LiveCluster
from kai_ray.model.objects import ClusterState

__all__ = ["SOURCE", "CacheReader", "snapshot"]

SOURCE = "cluster"
"""The `file` of every problem found in the cache."""


class CacheReader:
    """One reader's view of the cache, kept between reads: models and their conversions."""

    def __init__(self, scheduler_name: str) -> None:
        self._models = ModelCache(SOURCE)
        self._live = LiveCluster(SOURCE, scheduler_name)
        self._generation: int | None = None

    def read(self, cache: ClusterCache, now: float) -> tuple[ClusterState, list[ManifestProblem]]:
        """The cache's contents at one generation, converted at `now` (epoch seconds); problems
        are returned, never raised.  Never calls the API server."""
        changes = cache.changes(self._generation, KIND_ORDER)
        updated = self._models.update(changes)
        if changes.complete:
            for kind, models in updated.items():
                self._live.replace_kind(
                    kind, {key: model for key, model in models.items() if model is not None}
                )
        else:
            self._live.apply(updated)
        self._generation = changes.generation
        return self._live.state(now)

    def assume_bound(self, pods: Mapping[tuple[str, str], tuple[str, str]]) -> None:
        """See `LiveCluster.assume_bound`: pods this scheduler bound itself, (node, uid) each."""
        self._live.assume_bound(pods)

    def __len__(self) -> int:
        """Objects remembered (memory follows the cluster)."""
        return len(self._live)

    def remembered(self) -> int:
        """What is kept besides the objects (`LiveCluster.remembered`)."""
        return self._live.remembered()


def snapshot(cache: ClusterCache, now: float | None = None) -> tuple[ClusterState, list[ManifestProblem]]:
    """A one-off read of the cache by a new reader; `now` defaults to the wall clock."""
    return CacheReader(cache.scheduler_name).read(cache, time.time() if now is None else now)
