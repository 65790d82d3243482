"""Knative Services: a PodGroup per Revision, gang of `min-scale` (spec/integrations.md §8).

Pods are found through the Revision named by their `serving.knative.dev/revision`
label. With gang scheduling (the default) the Revision is the gang, its size the
`autoscaling.knative.dev/min-scale` annotation (1 when absent or not a number).
Without it, or for a Revision whose pods were already grouped one by one, every
pod gets its own `inference` PodGroup.
"""

from __future__ import annotations

from collections.abc import Sequence

from kai_ray.api.constants import POD_GROUP_NAME_ANNOTATION, PRIORITY_INFERENCE
from kai_ray_operators.context import GroupingContext
from kai_ray_operators.errors import InvalidWorkload
from kai_ray_operators.fields import (
    KubeObject,
    annotations_of,
    describe,
    field,
    labels_of,
    name,
    namespace,
    parse_int,
)
from kai_ray_operators.metadata import OwnerReference, PodGroupMetadata
from kai_ray_operators.plugins.default import group_annotations, group_labels, pod_group_name, queue_of
from kai_ray_operators.plugins.deployment import pod_owner
from kai_ray_operators.priority import priority_class

__all__ = ["group_knative"]

REVISION_API_VERSION = "serving.knative.dev/v1"
REVISION_LABEL = "serving.knative.dev/revision"
MIN_SCALE_ANNOTATION = "autoscaling.knative.dev/min-scale"


def _grouped_per_pod(context: GroupingContext, revision: KubeObject) -> bool:
    """Whether the Revision's pods already have one PodGroup each: such a Revision keeps that."""
    pods = context.reader.list("v1", "Pod", namespace(revision), {REVISION_LABEL: name(revision)})
    groups = [
        annotations_of(pod)[POD_GROUP_NAME_ANNOTATION]
        for pod in pods
        if POD_GROUP_NAME_ANNOTATION in annotations_of(pod)
    ]
    if len(set(groups)) != len(groups) or not groups:
        return False  # two pods in one PodGroup: a gang
    if len(groups) > 1:
        return True
    existing = context.existing_pod_group(namespace(revision), groups[0])
    if existing is None:
        return False
    owners = field(existing, "metadata", "ownerReferences") or []
    owner_kind = owners[0].get("kind") if owners and isinstance(owners[0], dict) else None
    if owner_kind == revision.get("kind"):
        return False
    if owner_kind == "Pod":
        return True
    raise InvalidWorkload(
        describe(existing),
        f"unexpected owner {owner_kind!r} for a Knative PodGroup",
        "metadata.ownerReferences",
    )


def _per_pod(context: GroupingContext, revision: KubeObject, pod: KubeObject) -> PodGroupMetadata:
    return PodGroupMetadata(
        name=pod_group_name(pod),
        namespace=namespace(pod),
        owner=pod_owner(pod),
        queue=queue_of(context.config, revision, pod),
        priority_class_name=PRIORITY_INFERENCE,
        labels=group_labels(revision, pod),
        annotations=group_annotations(revision, pod),
    )


def _per_revision(context: GroupingContext, revision: KubeObject, pod: KubeObject) -> PodGroupMetadata:
    min_scale = parse_int(annotations_of(revision).get(MIN_SCALE_ANNOTATION, "1"))
    priority = priority_class(context, [revision], pod, PRIORITY_INFERENCE, context.type_defaults())
    return PodGroupMetadata(
        name=pod_group_name(revision),
        namespace=namespace(revision),
        owner=OwnerReference.of(revision),
        queue=queue_of(context.config, revision, pod),
        priority_class_name=priority,
        min_available=1 if min_scale is None or min_scale < 0 else min_scale,
        labels=group_labels(revision, pod),
        annotations=group_annotations(revision, pod),
    )


def group_knative(
    context: GroupingContext, top_owner: KubeObject, pod: KubeObject, all_owners: Sequence[KubeObject]
) -> PodGroupMetadata:
    """Plugin `knative`."""
    revision_name = labels_of(pod).get(REVISION_LABEL)
    if revision_name is None:
        raise InvalidWorkload(
            describe(pod), "label is required to find the pod's Knative Revision", REVISION_LABEL
        )
    revision = context.reader.get(REVISION_API_VERSION, "Revision", namespace(pod), revision_name)
    if not context.config.gang_schedule_knative or _grouped_per_pod(context, revision):
        return _per_pod(context, revision, pod)
    return _per_revision(context, revision, pod)
