"""`BindRequest` (scheduling.run.ai/v1alpha2, namespaced): scheduler → binder (spec/kubernetes-api.md §4).

The DRA allocation payloads are Kubernetes `resource.k8s.io` structures that
the scheduler passes through without interpreting, so they stay plain dicts.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from kai_ray.api._base import CrdModel, KubeModel, ObjectMeta, ResourceList
from kai_ray.api.constants import BINDREQUEST_API_VERSION

ReceivedResourceType = Literal["", "Regular", "Fraction", "MigInstance"]
BindPhase = Literal["", "Pending", "Succeeded", "Failed"]


class ReceivedGPU(CrdModel):
    count: int = 0
    portion: str = "0.00"


class NumaZone(CrdModel):
    zone: str
    amount: ResourceList


class ResourceClaimAllocation(CrdModel):
    name: str = ""
    allocation: dict[str, Any] = Field(default_factory=dict)


class BindRequestSpec(CrdModel):
    pod_name: str = ""
    selected_node: str = ""
    received_resource_type: ReceivedResourceType = ""
    received_gpu: ReceivedGPU | None = Field(default=None, alias="receivedGPU")
    selected_gpu_groups: list[str] = Field(default_factory=list, alias="selectedGPUGroups")
    resource_claim_allocations: list[ResourceClaimAllocation] = Field(default_factory=list)
    extended_resource_claim_allocation: dict[str, Any] | None = None
    predicted_numa_zones: list[NumaZone] = Field(default_factory=list, alias="predictedNUMAZones")
    backoff_limit: int | None = None


class BindRequestStatus(KubeModel):
    phase: BindPhase = ""
    reason: str = ""
    failed_attempts: int = 0


class BindRequest(CrdModel):
    api_version: Literal["scheduling.run.ai/v1alpha2"] = BINDREQUEST_API_VERSION
    kind: Literal["BindRequest"] = "BindRequest"
    metadata: ObjectMeta
    spec: BindRequestSpec = Field(default_factory=BindRequestSpec)
    status: BindRequestStatus = Field(default_factory=BindRequestStatus)

    @property
    def failed(self) -> bool:
        """Failed for good: KAI retries only while `failedAttempts < backoffLimit` (§4.3)."""
        if self.status.phase != "Failed":
            return False
        limit = self.spec.backoff_limit
        return limit is None or self.status.failed_attempts >= limit
