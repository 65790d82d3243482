"""The PodGroup of a pod that is its own top owner: KAI's default grouper rule, in one place.

Both backends need it: `kai-ray serve` creates this PodGroup on the cluster for
a pod that names none, and the simulator schedules a manifest's bare pod under
it.  One function for both is what makes a manifest directory and a live
cluster mean the same thing (spec/integrations.md §1.4, §1.5, §5.5):

- name `pg-<pod>-<uid>` (a hand-written manifest without a uid keeps the pod's
  name), owned by the pod so it goes away with it, `minMember: 1`;
- queue from `kai.scheduler/queue`, else `project` (suffixed with the pod's
  node pool when it has one), else `default-queue`;
- priority class from the `priorityClassName` label or the pod's own class when
  that class exists, else `train` (not checked, as KAI does not);
- preemptibility from `kai.scheduler/preemptibility` when it is one of the two
  valid values; preemption delay and staleness grace period from their
  annotations when they parse (a negative preemption delay is ignored, as KAI's
  grouper ignores every invalid value);
- topology constraint from the topology annotations;
- the pod's labels and annotations copied (top-owner metadata recorded).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

import yaml

from kai_ray.api import PodGroup, PodGroupSpec, TopologyConstraint, parse_duration
from kai_ray.api._base import ObjectMeta, OwnerReference
from kai_ray.api.constants import (
    DEFAULT_QUEUE,
    NODE_POOL_LABEL,
    NON_PREEMPTIBLE,
    PREEMPTIBILITY_LABEL,
    PREEMPTIBLE,
    PREEMPTION_DELAY_ANNOTATION,
    PRIORITY_CLASS_LABEL,
    PRIORITY_TRAIN,
    PROJECT_LABEL,
    QUEUE_LABEL,
    STALENESS_GRACE_PERIOD_ANNOTATION,
    TOP_OWNER_METADATA_ANNOTATION,
    TOPOLOGY_ANNOTATION,
    TOPOLOGY_PREFERRED_PLACEMENT_ANNOTATION,
    TOPOLOGY_REQUIRED_PLACEMENT_ANNOTATION,
    USER_LABEL,
)
from kai_ray.api.core import Pod
from kai_ray.api.quantity import DurationError

__all__ = ["bare_pod_group", "bare_pod_group_name", "bare_pod_group_wire"]


def bare_pod_group_name(pod: Pod) -> str:
    """`pg-<pod name>-<pod uid>`, KAI's name; a manifest pod without a uid keeps its own name."""
    meta = pod.metadata
    return f"pg-{meta.name}-{meta.uid}" if meta.uid else meta.name


def _queue(labels: Mapping[str, str]) -> str:
    """Queue label, else `project` (suffixed with the pod's node pool when it has one), else the default."""
    if labels.get(QUEUE_LABEL):
        return labels[QUEUE_LABEL]
    project = labels.get(PROJECT_LABEL)
    if project:
        pool = labels.get(NODE_POOL_LABEL)
        return f"{project}-{pool}" if pool else project
    return DEFAULT_QUEUE


def bare_pod_group(pod: Pod, priority_classes: Collection[str]) -> PodGroup:
    """The PodGroup KAI's default grouper derives from a pod without owners."""
    meta = pod.metadata
    labels, annotations = dict(meta.labels), dict(meta.annotations)
    explicit = labels.get(PREEMPTIBILITY_LABEL)
    delay = _duration(annotations, PREEMPTION_DELAY_ANNOTATION)
    spec = PodGroupSpec(
        min_member=1,
        queue=_queue(labels),
        priority_class_name=_priority_class(pod, priority_classes),
        preemptibility=explicit if explicit in (PREEMPTIBLE, NON_PREEMPTIBLE) else None,  # type: ignore[arg-type]
        topology_constraint=TopologyConstraint(
            topology=annotations.get(TOPOLOGY_ANNOTATION, ""),
            required_topology_level=annotations.get(TOPOLOGY_REQUIRED_PLACEMENT_ANNOTATION, ""),
            preferred_topology_level=annotations.get(TOPOLOGY_PREFERRED_PLACEMENT_ANNOTATION, ""),
        ),
        preemption_delay=delay if delay is not None and parse_duration(delay) >= 0 else None,
        staleness_grace_period=_duration(annotations, STALENESS_GRACE_PERIOD_ANNOTATION),
    )
    top_owner = {"name": meta.name, "uid": meta.uid or "", "group": "", "version": "v1", "kind": "Pod"}
    group_annotations = {TOP_OWNER_METADATA_ANNOTATION: yaml.safe_dump(top_owner, sort_keys=False)}
    if USER_LABEL in annotations:
        group_annotations[USER_LABEL] = annotations[USER_LABEL]
    group_annotations.update(annotations)  # the top owner's annotations win on a clash
    owners = [OwnerReference(api_version="v1", kind="Pod", name=meta.name, uid=meta.uid)] if meta.uid else []
    return PodGroup(
        metadata=ObjectMeta(
            name=bare_pod_group_name(pod),
            namespace=meta.namespace,
            labels=labels,
            annotations=group_annotations,
            owner_references=owners,
            creation_timestamp=meta.creation_timestamp,
        ),
        spec=spec,
    )


def bare_pod_group_wire(group: PodGroup) -> dict[str, Any]:
    """The PodGroup as the API server takes it: only what is set, in wire names."""
    body = group.model_dump(mode="json", by_alias=True, exclude_defaults=True, include={"metadata", "spec"})
    body["metadata"].pop("creationTimestamp", None)
    return {"apiVersion": group.api_version, "kind": group.kind, **body}


def _priority_class(pod: Pod, existing: Collection[str]) -> str:
    """The pod's one candidate class (label first, then spec) if it exists, else `train` (unchecked)."""
    candidate = pod.metadata.labels.get(PRIORITY_CLASS_LABEL) or pod.spec.priority_class_name
    return candidate if candidate and candidate in existing else PRIORITY_TRAIN


def _duration(annotations: Mapping[str, str], key: str) -> str | None:
    """A valid Go duration from an annotation; invalid values are ignored as KAI's grouper does."""
    value = annotations.get(key)
    if value is None:
        return None
    try:
        parse_duration(value)
    except DurationError:
        return None
    return value
