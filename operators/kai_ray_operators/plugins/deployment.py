"""apps/v1 Deployment: one PodGroup per pod, `inference` by default (spec/integrations.md §5.3).

Replicas of a Deployment are independent servers, so each pod gets its own
PodGroup, owned by the pod so it disappears with it; queue, labels and
topology still come from the Deployment.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from kai_ray.api.constants import PRIORITY_INFERENCE
from kai_ray_operators.context import GroupingContext
from kai_ray_operators.fields import KubeObject, name, uid
from kai_ray_operators.metadata import OwnerReference, PodGroupMetadata
from kai_ray_operators.plugins.default import default_metadata, pod_group_name

__all__ = ["group_deployment", "pod_owner"]


def pod_owner(pod: KubeObject) -> OwnerReference:
    """The pod as a PodGroup owner (a pod read from the API may lack apiVersion and kind)."""
    return OwnerReference("v1", "Pod", name(pod), uid(pod))


def group_deployment(
    context: GroupingContext, top_owner: KubeObject, pod: KubeObject, all_owners: Sequence[KubeObject]
) -> PodGroupMetadata:
    """Plugin `deployment`."""
    metadata = default_metadata(context, top_owner, pod, fallback_priority=PRIORITY_INFERENCE)
    return dataclasses.replace(metadata, name=pod_group_name(pod), owner=pod_owner(pod))
