"""Why a pod is evicted and why a job waits, as types a backend can switch on.

The engine explains itself in prose for people; backends and metrics need
to act on the same explanation (an Event annotation, a metric label, KAI's
machine-readable `UnschedulableExplanation.reason`).  Recovering that from
the prose would break the first time a message is reworded, so every
explanation carries its cause as an enum next to its message.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = [
    "GENERIC_KAI_REASON",
    "SPECIFIC_CAUSES",
    "EvictionCause",
    "EvictionReason",
    "NodeFilterCause",
    "NodeRefusal",
    "PendingCause",
    "PendingReason",
    "main_cause",
]

GENERIC_KAI_REASON = "Unable to schedule podgroup"
"""KAI's `UnschedulableExplanation.reason` when no specific one applies (§13.2)."""
TOPOLOGY_KAI_REASON = "Not enough resources for the workload"
"""KAI's reason when no topology domain can hold a (sub)group (kubernetes-api.md §7)."""


class EvictionCause(enum.StrEnum):
    """The action that evicted a pod; the values are KAI's action names (`evictor-action-type`)."""

    RECLAIM = "reclaim"
    PREEMPT = "preempt"
    CONSOLIDATION = "consolidation"
    STALE_GANG = "stalegangeviction"


@dataclass(frozen=True)
class EvictionReason:
    """`preemptor` is the key of the job the room is made for (None for stale gangs)."""

    cause: EvictionCause
    message: str
    preemptor: str | None = None

    def __str__(self) -> str:
        return self.message


@dataclass(frozen=True)
class StaleMark:
    """A change in when a running gang fell below its minimum: `since` is that time, or None when
    it no longer is; `active` and `minimum` count its pods then (for KAI's `StaleJob` Event)."""

    since: float | None
    active: int
    minimum: int

    def describe(self) -> str:
        """KAI's `StaleJob` words."""
        return f"Job is stale. {self.active} pods are active, minMember is {self.minimum}"


class PendingCause(enum.StrEnum):
    """Why a job still waits.  Values that KAI also uses are spelled as KAI spells them."""

    NOT_READY = "NotReady"
    """Fewer pods exist than the gang minimum."""
    NO_ROOM = "NoRoom"
    """No placement for the gang: nodes lack free resources or fail its constraints."""
    OVER_LIMIT = "OverLimit"
    NON_PREEMPTIBLE_OVER_QUOTA = "NonPreemptibleOverQuota"
    PREEMPTION_DELAY = "PreemptionDelayNotElapsed"
    OVER_FAIR_SHARE = "OverFairShare"
    """Its queue is at its fair share, so it may not take resources from others."""
    NOT_REACHED = "NotReached"
    """Earlier jobs took the capacity, or its queue's turn did not come this cycle."""
    QUEUE_DOES_NOT_EXIST = "QueueDoesNotExist"
    INVALID = "InvalidObject"
    """The PodGroup (or its tree) cannot be interpreted; it is skipped."""
    EVICTION_BLOCKED = "EvictionBlocked"
    """A victim it needs could not be evicted (a PodDisruptionBudget said no)."""
    WAITING_FOR_OBJECT = "WaitingForObject"
    """A pod of it needs an object that is not there yet (a volume claim, its volume, a ConfigMap)."""
    NO_TOPOLOGY_DOMAIN = "NoTopologyDomain"
    """No domain of its topology constraint's levels has room for a (sub)group."""
    TOPOLOGY_MISCONFIGURED = "TopologyMisconfigured"
    """Its constraint names a Topology that does not exist, or a level that topology lacks."""

    @property
    def kai_reason(self) -> str:
        """The `UnschedulableExplanation.reason` written for this cause.

        KAI's own reasons where it has one; KAI's generic reason for "it did not fit" in
        its various forms; our own names for what KAI does not report this way (clients
        must tolerate new reasons, §13.2).
        """
        if self is PendingCause.NO_TOPOLOGY_DOMAIN:
            return TOPOLOGY_KAI_REASON
        return GENERIC_KAI_REASON if self in _GENERIC else self.value


_GENERIC = frozenset(
    {
        PendingCause.NOT_READY,
        PendingCause.NO_ROOM,
        PendingCause.OVER_FAIR_SHARE,
        PendingCause.NOT_REACHED,
    }
)

SPECIFIC_CAUSES = frozenset(
    {
        PendingCause.NOT_READY,
        PendingCause.OVER_LIMIT,
        PendingCause.NON_PREEMPTIBLE_OVER_QUOTA,
        PendingCause.PREEMPTION_DELAY,
        PendingCause.QUEUE_DOES_NOT_EXIST,
        PendingCause.INVALID,
        PendingCause.EVICTION_BLOCKED,
        PendingCause.WAITING_FOR_OBJECT,
        PendingCause.NO_TOPOLOGY_DOMAIN,
        PendingCause.TOPOLOGY_MISCONFIGURED,
    }
)
"""Causes that say more than "it did not fit": when several actions explain a job, these win."""


class NodeFilterCause(enum.StrEnum):
    """Why a node refuses a pod, named as kube-scheduler's filter plugin (or KAI's predicate) that
    refuses it, so explanations, Events and the gRPC API can count nodes per cause."""

    UNSCHEDULABLE = "NodeUnschedulable"
    NODE_AFFINITY = "NodeAffinity"
    TAINTS = "TaintToleration"
    GPU_MEMORY_UNKNOWN = "GpuMemoryNotPublished"
    POD_AFFINITY = "InterPodAffinity"
    POD_ANTI_AFFINITY = "InterPodAntiAffinity"
    EXISTING_ANTI_AFFINITY = "ExistingPodsAntiAffinity"
    SPREAD = "PodTopologySpread"
    HOST_PORTS = "NodePorts"
    INSUFFICIENT_RESOURCES = "NodeResourcesFit"


@dataclass(frozen=True)
class NodeRefusal:
    """How many nodes one cause refuses a pod, and what to tell a person."""

    cause: NodeFilterCause
    nodes: int
    message: str

    def __str__(self) -> str:
        return f"{self.nodes} nodes: {self.message}" if self.nodes != 1 else f"1 node: {self.message}"


@dataclass(frozen=True)
class PendingReason:
    """`refusals`: when a pod found no node, each cause that refused it some node (`node_refusals`),
    so a backend writes typed causes (PodGroup conditions) without reading them back from the
    message; empty for every other reason."""

    cause: PendingCause
    message: str
    refusals: tuple[NodeRefusal, ...] = ()

    def __str__(self) -> str:
        return self.message


def main_cause(causes: Iterable[PendingCause]) -> PendingCause:
    """The cause to report when several actions explained one job: the first specific one, else the first."""
    ordered = list(causes)
    if not ordered:
        return PendingCause.NOT_REACHED
    return next((cause for cause in ordered if cause in SPECIFIC_CAUSES), ordered[0])
