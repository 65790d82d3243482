"""The kinds the cluster cache follows, and how an object of each is trimmed before it is kept."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from kai_ray.api.constants import (
    BINDREQUEST_API_VERSION,
    CORE_API_VERSION,
    PODGROUP_API_VERSION,
    PRIORITYCLASS_API_VERSION,
    QUEUE_API_VERSION,
    STORAGE_API_VERSION,
    TOPOLOGY_API_VERSION,
)
from kai_ray.cluster.kube.reduced import REDUCED_KINDS, reduce, reduce_pod
from kai_ray.convert import occupancy_only

__all__ = ["FOREIGN_POD", "KINDS", "RESOURCES", "Resource", "normalise", "snake"]


FOREIGN_POD: Final = "ForeignPod"
"""The cache's name for pods of other schedulers that occupy a node (their objects say `kind: Pod`)."""


@dataclass(frozen=True)
class Resource:
    """One kind the cache follows, with what is needed to list and watch it.

    `name` is the cache's key for it; it differs from `kind` only for `ForeignPod`.
    """

    kind: str
    api_version: str
    plural: str
    namespaced: bool
    name: str = ""

    @property
    def key(self) -> str:
        return self.name or self.kind

    @property
    def group(self) -> str:
        return self.api_version.rpartition("/")[0]

    @property
    def version(self) -> str:
        return self.api_version.rpartition("/")[2]


RESOURCES: Final[Mapping[str, Resource]] = {
    r.key: r
    for r in (
        Resource("Pod", CORE_API_VERSION, "pods", namespaced=True),
        Resource("Pod", CORE_API_VERSION, "pods", namespaced=True, name=FOREIGN_POD),
        Resource("Node", CORE_API_VERSION, "nodes", namespaced=False),
        Resource("Namespace", CORE_API_VERSION, "namespaces", namespaced=False),
        Resource("Queue", QUEUE_API_VERSION, "queues", namespaced=False),
        Resource("PodGroup", PODGROUP_API_VERSION, "podgroups", namespaced=True),
        Resource("BindRequest", BINDREQUEST_API_VERSION, "bindrequests", namespaced=True),
        Resource("PriorityClass", PRIORITYCLASS_API_VERSION, "priorityclasses", namespaced=False),
        Resource("Topology", TOPOLOGY_API_VERSION, "topologies", namespaced=False),
        Resource("PersistentVolumeClaim", CORE_API_VERSION, "persistentvolumeclaims", namespaced=True),
        Resource("PersistentVolume", CORE_API_VERSION, "persistentvolumes", namespaced=False),
        Resource("StorageClass", STORAGE_API_VERSION, "storageclasses", namespaced=False),
        Resource("ConfigMap", CORE_API_VERSION, "configmaps", namespaced=True),
    )
}
KINDS: Final = tuple(RESOURCES)


def normalise(obj: dict[str, Any], resource: Resource) -> dict[str, Any]:
    """Fill in what list items omit and drop what nobody reads (see the module docstring)."""
    obj.setdefault("apiVersion", resource.api_version)
    obj.setdefault("kind", resource.kind)
    if resource.key == FOREIGN_POD:
        return occupancy_only(obj)
    if resource.kind in REDUCED_KINDS:
        return reduce(obj)
    if resource.key == "Pod":
        return reduce_pod(obj)
    meta = obj.get("metadata")
    if isinstance(meta, dict) and "managedFields" in meta:
        obj["metadata"] = {k: v for k, v in meta.items() if k != "managedFields"}
    return obj


def snake(kind: str) -> str:
    """How the generated client names a core kind in its methods: PersistentVolumeClaim →
    persistent_volume_claim."""
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in kind).lstrip("_")
