"""The storage objects a pod's volumes stand for, and ConfigMaps: what decides where a pod with
volumes may run (kube-scheduler's VolumeBinding, KAI's ConfigMap predicate).

PersistentVolumeClaims and PersistentVolumes carry their binding (`spec.volumeName`,
`spec.claimRef`) and a PV its node affinity; a StorageClass its binding mode and allowed
topologies.  Of a ConfigMap only its existence matters: its data is never modelled (it is kept
as an extra when a manifest carries it, and the cluster cache does not keep it at all).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from kai_ray.api._base import KubeModel, ObjectMeta
from kai_ray.api.constants import (
    BETA_STORAGE_CLASS_ANNOTATION,
    DEFAULT_STORAGE_CLASS_ANNOTATIONS,
    STORAGE_API_VERSION,
)
from kai_ray.api.core import NodeSelector

BindingMode = Literal["Immediate", "WaitForFirstConsumer"]


class PersistentVolumeClaimSpec(KubeModel):
    storage_class_name: str | None = None
    """None: the cluster's default class (if any); "": explicitly no class."""
    volume_name: str = ""
    """The PV it is bound to; "" while unbound."""


class PersistentVolumeClaimStatus(KubeModel):
    phase: str = "Pending"


class PersistentVolumeClaim(KubeModel):
    api_version: Literal["v1"] = "v1"
    kind: Literal["PersistentVolumeClaim"] = "PersistentVolumeClaim"
    metadata: ObjectMeta
    spec: PersistentVolumeClaimSpec = Field(default_factory=PersistentVolumeClaimSpec)
    status: PersistentVolumeClaimStatus = Field(default_factory=PersistentVolumeClaimStatus)

    @property
    def class_name(self) -> str | None:
        """The class it asks for, the beta annotation first (as Kubernetes reads it)."""
        return self.metadata.annotations.get(BETA_STORAGE_CLASS_ANNOTATION, self.spec.storage_class_name)


class VolumeNodeAffinity(KubeModel):
    required: NodeSelector | None = None


class ObjectReference(KubeModel):
    namespace: str = ""
    name: str = ""
    uid: str = ""


class PersistentVolumeSpec(KubeModel):
    storage_class_name: str = ""
    node_affinity: VolumeNodeAffinity | None = None
    claim_ref: ObjectReference | None = None


class PersistentVolumeStatus(KubeModel):
    phase: str = "Pending"


class PersistentVolume(KubeModel):
    api_version: Literal["v1"] = "v1"
    kind: Literal["PersistentVolume"] = "PersistentVolume"
    metadata: ObjectMeta
    spec: PersistentVolumeSpec = Field(default_factory=PersistentVolumeSpec)
    status: PersistentVolumeStatus = Field(default_factory=PersistentVolumeStatus)


class TopologySelectorLabelRequirement(KubeModel):
    key: str
    values: list[str] = Field(default_factory=list)


class TopologySelectorTerm(KubeModel):
    match_label_expressions: list[TopologySelectorLabelRequirement] = Field(default_factory=list)


class StorageClass(KubeModel):
    """Like PriorityClass, its fields sit at the top level, not in a spec."""

    api_version: Literal["storage.k8s.io/v1"] = STORAGE_API_VERSION
    kind: Literal["StorageClass"] = "StorageClass"
    metadata: ObjectMeta
    provisioner: str
    volume_binding_mode: BindingMode = "Immediate"
    allowed_topologies: list[TopologySelectorTerm] = Field(default_factory=list)

    @property
    def is_default(self) -> bool:
        annotations = self.metadata.annotations
        return any(annotations.get(key) == "true" for key in DEFAULT_STORAGE_CLASS_ANNOTATIONS)


class ConfigMap(KubeModel):
    api_version: Literal["v1"] = "v1"
    kind: Literal["ConfigMap"] = "ConfigMap"
    metadata: ObjectMeta
