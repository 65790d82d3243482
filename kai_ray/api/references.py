"""What a pod names of other objects that must exist before it can run: volumes and ConfigMaps.

Only the parts that decide where (and whether) the pod may be placed are modelled: the claim a
`persistentVolumeClaim` or `ephemeral` volume stands for, and the ConfigMaps a volume, a
projected volume or the containers' environment read, with their `optional` flags.  Every other
volume type and field is kept as an extra and never read.  Apart from `core.py` so that the Pod's
model and the storage objects (`storage.py`, which reads `core.NodeSelector`) import each other
in one direction only.
"""

from __future__ import annotations

from pydantic import Field

from kai_ray.api._base import KubeModel


class ConfigMapReference(KubeModel):
    """The shape shared by a `configMap` volume, a projected `configMap`, `envFrom[].configMapRef`
    and `env[].valueFrom.configMapKeyRef`: a name, and whether the pod runs without it."""

    name: str = ""
    optional: bool | None = None

    @property
    def required(self) -> bool:
        """Kubernetes' default: a reference not marked optional must resolve."""
        return not self.optional


class EnvVarSource(KubeModel):
    config_map_key_ref: ConfigMapReference | None = None


class EnvVar(KubeModel):
    name: str = ""
    value_from: EnvVarSource | None = None


class EnvFromSource(KubeModel):
    config_map_ref: ConfigMapReference | None = None


class PersistentVolumeClaimVolumeSource(KubeModel):
    claim_name: str


class VolumeProjection(KubeModel):
    config_map: ConfigMapReference | None = None


class ProjectedVolumeSource(KubeModel):
    sources: list[VolumeProjection] = Field(default_factory=list)


class EphemeralVolumeSource(KubeModel):
    """A generic ephemeral volume: only its presence matters, its claim is `<pod>-<volume>`."""


class Volume(KubeModel):
    name: str
    persistent_volume_claim: PersistentVolumeClaimVolumeSource | None = None
    ephemeral: EphemeralVolumeSource | None = None
    config_map: ConfigMapReference | None = None
    projected: ProjectedVolumeSource | None = None
