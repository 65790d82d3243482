"""The one contract every grouping plugin fills in: what the PodGroup of a pod should be.

This mirrors KAI's `podgroup.Metadata`: plain values, no Kubernetes client.
`wire.build_pod_group` turns it into the object the API server takes. Records
are frozen; a plugin that refines the default grouper's answer makes a new
one with `dataclasses.replace`, so no plugin can change another's result.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from kai_ray_operators.fields import KubeObject, name, uid

__all__ = [
    "OwnerReference",
    "PodGroupMetadata",
    "SubGroupMetadata",
    "TopologyConstraint",
]


@dataclass(frozen=True)
class OwnerReference:
    """The PodGroup's single owner: garbage collection removes the PodGroup with it."""

    api_version: str
    kind: str
    name: str
    uid: str

    @classmethod
    def of(cls, obj: KubeObject) -> OwnerReference:
        return cls(str(obj.get("apiVersion") or ""), str(obj.get("kind") or ""), name(obj), uid(obj))


@dataclass(frozen=True)
class TopologyConstraint:
    """A topology name and the levels pods must share (required) or pack into (preferred)."""

    topology: str = ""
    required_level: str = ""
    preferred_level: str = ""


@dataclass(frozen=True)
class SubGroupMetadata:
    """A node of the PodGroup's SubGroup tree.

    Leaves carry `min_available` and the pods known to belong to them; parents
    carry `min_subgroup` (None: every child is required).
    """

    name: str
    min_available: int = 0
    min_subgroup: int | None = None
    parent: str | None = None
    pods: tuple[str, ...] = ()
    topology: TopologyConstraint | None = None


@dataclass(frozen=True)
class PodGroupMetadata:
    """Everything the podgrouper decides about one PodGroup.

    Durations are seconds (KAI stores Go durations; `wire` writes them back in
    Go's form). `preemptibility` is "" when neither the workload nor the
    defaults say, which lets the scheduler derive it from the priority.
    """

    name: str
    namespace: str
    owner: OwnerReference
    queue: str
    priority_class_name: str
    min_available: int = 1
    min_subgroup: int | None = None
    preemptibility: str = ""
    preemption_delay: float | None = None
    staleness_grace_period: float | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    topology: TopologyConstraint = TopologyConstraint()
    subgroups: tuple[SubGroupMetadata, ...] = ()

    def subgroup_of(self, pod_name: str) -> str | None:
        """The leaf SubGroup that lists this pod, which the pod is labelled with."""
        for subgroup in self.subgroups:
            if pod_name in subgroup.pods:
                return subgroup.name
        return None
