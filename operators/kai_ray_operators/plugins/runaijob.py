"""Run:ai `RunaiJob` (spec/integrations.md §9).

The PodGroup is named after the pod without its last `-suffix`
(`pg-<job>-<uid>` for pod `<job>-<suffix>`). PodGroups named the older way
(per pod for parallel jobs, per job otherwise) are kept while they exist.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from kai_ray_operators.context import GroupingContext
from kai_ray_operators.fields import KubeObject, field, name, namespace, uid
from kai_ray_operators.metadata import PodGroupMetadata
from kai_ray_operators.plugins.default import POD_GROUP_PREFIX, default_metadata

__all__ = ["group_runaijob"]


def _legacy_name(top_owner: KubeObject, pod: KubeObject) -> str:
    parallelism = field(top_owner, "spec", "parallelism")
    parallel = isinstance(parallelism, int) and not isinstance(parallelism, bool) and parallelism > 1
    base = name(pod) if parallel else name(top_owner)
    return f"{POD_GROUP_PREFIX}-{base}-{uid(top_owner)}"


def group_runaijob(
    context: GroupingContext, top_owner: KubeObject, pod: KubeObject, all_owners: Sequence[KubeObject]
) -> PodGroupMetadata:
    """Plugin `runaijob`."""
    metadata = default_metadata(context, top_owner, pod)
    if context.config.search_for_legacy_pod_groups:
        legacy = _legacy_name(top_owner, pod)
        if context.existing_pod_group(namespace(pod), legacy) is not None:
            return dataclasses.replace(metadata, name=legacy)
    head, dash, _ = name(pod).rpartition("-")
    base = head if dash else name(pod)
    return dataclasses.replace(metadata, name=f"{POD_GROUP_PREFIX}-{base}-{uid(top_owner)}")
