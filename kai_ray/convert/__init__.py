"""The one translation of cluster objects (API models) into the engine's `ClusterState`.

Every backend goes through it: the simulator's manifests (after the
podgrouper of `kai_ray_operators` grouped their pods) and the Kubernetes
informer cache.
"""

from kai_ray.convert.cluster import (
    JobContext,
    cluster_from_manifest_set,
    cluster_from_manifests,
    job_problems,
    occupancy_only,
)
from kai_ray.convert.podgroups import Priorities

__all__ = [
    "JobContext",
    "Priorities",
    "cluster_from_manifest_set",
    "cluster_from_manifests",
    "job_problems",
    "occupancy_only",
]
