"""The one translation of cluster objects (API models) into the engine's `ClusterState`.

Every backend goes through it: the simulator's manifests, the Kubernetes
informer cache, and the grouper's bare-pod rule (`bare_pods`).
"""

from kai_ray.convert.bare_pods import bare_pod_group, bare_pod_group_name, bare_pod_group_wire
from kai_ray.convert.cluster import (
    cluster_from_manifest_set,
    cluster_from_manifests,
    cluster_from_objects,
    occupancy_only,
)
from kai_ray.convert.jobs import BarePods
from kai_ray.convert.podgroups import Priorities

__all__ = [
    "BarePods",
    "Priorities",
    "bare_pod_group",
    "bare_pod_group_name",
    "bare_pod_group_wire",
    "cluster_from_manifest_set",
    "cluster_from_manifests",
    "cluster_from_objects",
    "occupancy_only",
]
