"""kai-ray's public API objects: KAI's CRDs, the core Kubernetes objects the scheduler reads,
well-known labels and annotations (`constants`), and the manifest loader.

This package imports nothing else of kai-ray, so operators and external tools
can depend on it alone.
"""

from kai_ray.api._errors import format_path
from kai_ray.api.bindrequest import BindRequest, BindRequestSpec, BindRequestStatus, ReceivedGPU
from kai_ray.api.core import (
    Affinity,
    Container,
    Namespace,
    Node,
    NodeSelectorRequirement,
    Pod,
    PriorityClass,
    ResourceRequirements,
    Taint,
    Toleration,
)
from kai_ray.api.manifests import (
    ApiObject,
    Manifest,
    ManifestProblem,
    ManifestSet,
    SourcedObject,
    load_manifest_text,
    load_manifests,
    load_sourced_objects,
    read_manifest_documents,
    read_manifest_text,
)
from kai_ray.api.podgroup import PodGroup, PodGroupSpec, PodGroupStatus, SubGroup, TopologyConstraint
from kai_ray.api.quantity import DurationError, QuantityError, parse_duration, parse_quantity
from kai_ray.api.queue import Queue, QueueResource, QueueResources, QueueSpec, QueueStatus
from kai_ray.api.storage import ConfigMap, PersistentVolume, PersistentVolumeClaim, StorageClass
from kai_ray.api.topology import Topology, TopologyLevel, TopologySpec

__all__ = [
    "Affinity",
    "ApiObject",
    "BindRequest",
    "BindRequestSpec",
    "BindRequestStatus",
    "ConfigMap",
    "Container",
    "DurationError",
    "Manifest",
    "ManifestProblem",
    "ManifestSet",
    "Namespace",
    "Node",
    "NodeSelectorRequirement",
    "PersistentVolume",
    "PersistentVolumeClaim",
    "Pod",
    "PodGroup",
    "PodGroupSpec",
    "PodGroupStatus",
    "PriorityClass",
    "QuantityError",
    "Queue",
    "QueueResource",
    "QueueResources",
    "QueueSpec",
    "QueueStatus",
    "ReceivedGPU",
    "ResourceRequirements",
    "SourcedObject",
    "StorageClass",
    "SubGroup",
    "Taint",
    "Toleration",
    "Topology",
    "TopologyConstraint",
    "TopologyLevel",
    "TopologySpec",
    "format_path",
    "load_manifest_text",
    "load_manifests",
    "load_sourced_objects",
    "parse_duration",
    "parse_quantity",
    "read_manifest_documents",
    "read_manifest_text",
]
