"""The seam between the scheduling loop and the podgrouper: what a grouper must do in each pass.

KAI's podgrouper (owner chains, one plugin per workload kind) lives in
`operators/` (`kai_ray_operators`), which the core never imports: the CLI
builds a grouper and hands it to the loop, which only knows this protocol and runs its passes
beside the cycles (`kai_ray.server.grouping_passes`).
A loop without a grouper schedules PodGroups made by someone else (KAI's own
podgrouper, or users) and leaves ungrouped pods waiting.
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Final, Protocol

from kai_ray.cluster.kube.cache import ClusterCache
from kai_ray.cluster.kube.events import EventWriter

__all__ = ["PODGROUPER_WARNING", "GroupingResult", "PodGrouper", "log_grouping"]

log = logging.getLogger(__name__)

PODGROUPER_WARNING: Final = "PodGrouperWarning"
"""KAI's Event reason when a pod cannot be grouped (spec/kubernetes-api.md §13.3)."""


@dataclass
class GroupingResult:
    """What one grouping pass did, objects named "namespace/name"."""

    created: list[str] = field(default_factory=list)
    """PodGroups created."""
    updated: list[str] = field(default_factory=list)
    """PodGroups whose spec, owners, labels or annotations were brought up to date."""
    annotated: list[str] = field(default_factory=list)
    """Pods linked to their PodGroup (and leaf SubGroup)."""
    failed: list[tuple[str, str]] = field(default_factory=list)
    """Pods left ungrouped this time, with why (a `PodGrouperWarning` Event says it on the pod)."""
    noticed: list[tuple[str, str]] = field(default_factory=list)
    """Pods grouped all the same, with what their owner should know (an unreadable owner, a queue
    label overridden); a `PodGrouperWarning` Event says it on the pod."""
    left: int = 0
    """Pods due that this pass left for the next, at most (a pass takes a bounded number; some
    of those left may turn out to need nothing)."""


class PodGrouper(Protocol):
    """Gives pods of this scheduler their PodGroup, in passes beside the scheduling cycles."""

    def group(self, cache: ClusterCache, events: EventWriter) -> GroupingResult:
        """One pass over the cached pods, taking a bounded number of them (the rest are `left`
        for the next pass); never raises for bad workloads."""
        ...

    def forget(self, pods: Collection[tuple[str, str]]) -> None:
        """Drop what is remembered about pods ((namespace, name)) no longer in the cluster."""
        ...

    def tracked(self) -> dict[str, int]:
        """Sizes of what the grouper remembers, by memory (for the bounded-memory metric)."""
        ...


def log_grouping(result: GroupingResult) -> None:
    """One line per pod left ungrouped (rate-limited per pod), one line for what was written."""
    for pod, reason in result.failed:
        log.warning("pod %s not grouped: %s", pod, reason, extra={"repeat_key": ("ungrouped", pod)})
    for pod, notice in result.noticed:
        log.warning("pod %s grouped, but %s", pod, notice, extra={"repeat_key": ("noticed", pod, notice)})
    if result.created or result.updated or result.annotated:
        log.info(
            "grouping: %d PodGroups created, %d updated, %d pods linked",
            len(result.created),
            len(result.updated),
            len(result.annotated),
        )
