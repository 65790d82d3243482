"""`Queue` (scheduling.run.ai/v2, cluster-scoped): the quota tree (spec/kubernetes-api.md §2).

Field names and defaults follow KAI's CRD exactly, including the surprising
one: an omitted `limit` is 0, a hard cap of nothing. We keep that rather than
"fix" it, because a queue file must mean the same here as in KAI.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import Field, field_validator
from pydantic_core import PydanticCustomError

from kai_ray.api._base import (
    ERROR_PREFIX,
    Condition,
    CrdModel,
    Duration,
    KubeModel,
    ObjectMeta,
    ResourceList,
)
from kai_ray.api.constants import DEFAULT_QUEUE_PRIORITY, QUEUE_API_VERSION

UNLIMITED = -1.0
"""KAI's "no bound" value for quota and limit."""


class QueueResource(CrdModel):
    """One resource of a queue. Units: GPUs in devices, CPU in millicores, memory in MB (10^6)."""

    quota: float = 0.0
    limit: float = 0.0
    over_quota_weight: float = 0.0

    @field_validator("quota", "limit")
    @classmethod
    def _non_negative_or_unlimited(cls, value: float) -> float:
        if value < 0 and value != UNLIMITED:
            raise PydanticCustomError(f"{ERROR_PREFIX}range", f"must be >= 0 or -1, got {value:g}")
        return value

    @field_validator("over_quota_weight")
    @classmethod
    def _non_negative(cls, value: float) -> float:
        if value < 0:
            raise PydanticCustomError(f"{ERROR_PREFIX}range", f"must be >= 0, got {value:g}")
        return value


class QueueResources(CrdModel):
    gpu: QueueResource = Field(default_factory=QueueResource)
    cpu: QueueResource = Field(default_factory=QueueResource)
    memory: QueueResource = Field(default_factory=QueueResource)


class QueueSpec(CrdModel):
    """`resources` is required: KAI's queue webhook rejects a Queue without it."""

    display_name: str = ""
    parent_queue: str = ""
    resources: QueueResources
    priority: int = DEFAULT_QUEUE_PRIORITY
    preempt_min_runtime: Duration | None = None
    reclaim_min_runtime: Duration | None = None


class QueueCondition(Condition):
    """KAI's queue conditions also carry `lastProbeTime`; a CRD generated without it would prune it."""

    last_probe_time: datetime | None = None


class QueueStatus(KubeModel):
    """Written by the queue-controller; read-only for everyone else."""

    conditions: list[QueueCondition] = Field(default_factory=list)
    child_queues: list[str] = Field(default_factory=list)
    allocated: ResourceList = Field(default_factory=dict)
    allocated_non_preemptible: ResourceList = Field(default_factory=dict)
    requested: ResourceList = Field(default_factory=dict)


class Queue(CrdModel):
    api_version: Literal["scheduling.run.ai/v2"] = QUEUE_API_VERSION
    kind: Literal["Queue"] = "Queue"
    metadata: ObjectMeta
    spec: QueueSpec
    status: QueueStatus | None = None
