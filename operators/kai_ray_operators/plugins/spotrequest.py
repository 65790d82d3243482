"""NVIDIA EGX `SPOTRequest`: the default PodGroup, `inference` unless labels say otherwise (§9)."""

from __future__ import annotations

from collections.abc import Sequence

from kai_ray.api.constants import PRIORITY_INFERENCE
from kai_ray_operators.context import GroupingContext
from kai_ray_operators.fields import KubeObject
from kai_ray_operators.metadata import PodGroupMetadata
from kai_ray_operators.plugins.default import default_metadata

__all__ = ["group_spotrequest"]


def group_spotrequest(
    context: GroupingContext, top_owner: KubeObject, pod: KubeObject, all_owners: Sequence[KubeObject]
) -> PodGroupMetadata:
    """Plugin `spotrequest`."""
    return default_metadata(context, top_owner, pod, fallback_priority=PRIORITY_INFERENCE)
