"""`PodGroup` (scheduling.run.ai/v2alpha2, namespaced): the gang (spec/kubernetes-api.md §3).

Only the CRD's own schema rules live here (types, minimums, name patterns,
enums). Cross-field rules of KAI's webhook, such as parents that must exist,
need the whole SubGroup list and are checked where the tree is built.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import AfterValidator, Field

from kai_ray.api._base import (
    DNS_LABEL_PATTERN,
    CrdModel,
    DnsLabel,
    Duration,
    KubeModel,
    ObjectMeta,
    ResourceList,
    non_negative_duration,
)
from kai_ray.api.constants import PODGROUP_API_VERSION

Count = Annotated[int, Field(ge=0)]
Preemptibility = Literal["preemptible", "non-preemptible"]


class TopologyConstraint(CrdModel):
    """Ignored by the scheduler when `topology` is empty; naming a missing Topology keeps the job pending."""

    topology: str = ""
    required_topology_level: str = ""
    preferred_topology_level: str = ""


class SubGroup(CrdModel):
    name: DnsLabel
    parent: Annotated[str, Field(pattern=DNS_LABEL_PATTERN)] | None = None
    min_member: Count | None = None
    min_sub_group: Count | None = None
    topology_constraint: TopologyConstraint | None = None


class PodGroupSpec(CrdModel):
    min_member: Count | None = None
    min_sub_group: Count | None = None
    queue: str = ""
    priority_class_name: str = ""
    preemptibility: Preemptibility | None = None
    topology_constraint: TopologyConstraint = Field(default_factory=TopologyConstraint)
    sub_groups: list[SubGroup] = Field(default_factory=list)
    mark_unschedulable: bool | None = None
    scheduling_backoff: int | None = None
    preemption_delay: Annotated[Duration | None, AfterValidator(non_negative_duration)] = None
    staleness_grace_period: Duration | None = None


class QuotaDetails(KubeModel):
    name: str = ""
    queue_requested_resources: ResourceList = Field(default_factory=dict)
    queue_deserved_resources: ResourceList = Field(default_factory=dict)
    queue_allocated_resources: ResourceList = Field(default_factory=dict)
    queue_allocated_non_preemptible_resources: ResourceList = Field(default_factory=dict)
    queue_resource_limits: ResourceList = Field(default_factory=dict)
    pod_group_requested_resources: ResourceList = Field(default_factory=dict)
    pod_group_requested_non_preemptible_resources: ResourceList = Field(default_factory=dict)


class UnschedulableDetails(KubeModel):
    queue_details: QuotaDetails | None = None


class UnschedulableExplanation(KubeModel):
    reason: str = ""
    message: str = ""
    details: UnschedulableDetails | None = None


class SchedulingCondition(KubeModel):
    """Why the scheduler could not place the PodGroup in one node pool (§13.2)."""

    type: str = "UnschedulableOnNodePool"
    node_pool: str = ""
    reason: str = ""
    message: str = ""
    reasons: list[UnschedulableExplanation] = Field(default_factory=list)
    last_transition_time: datetime | None = None
    status: str = ""
    transition_id: str = Field(default="", alias="transitionID")


class PodGroupCondition(KubeModel):
    type: str = ""
    status: str = ""
    transition_id: str = Field(default="", alias="transitionID")
    last_transition_time: datetime | None = None
    reason: str = ""
    message: str = ""


class ResourcesStatus(KubeModel):
    requested: ResourceList = Field(default_factory=dict)
    allocated: ResourceList = Field(default_factory=dict)
    allocated_non_preemptible: ResourceList = Field(default_factory=dict)


class PodGroupStatus(KubeModel):
    conditions: list[PodGroupCondition] = Field(default_factory=list)
    scheduling_conditions: list[SchedulingCondition] | None = None
    resources_status: ResourcesStatus | None = None


class PodGroup(CrdModel):
    api_version: Literal["scheduling.run.ai/v2alpha2"] = PODGROUP_API_VERSION
    kind: Literal["PodGroup"] = "PodGroup"
    metadata: ObjectMeta
    spec: PodGroupSpec = Field(default_factory=PodGroupSpec)
    status: PodGroupStatus | None = None
