"""The default grouper: one PodGroup per top owner, `minMember 1` (spec/integrations.md §1.4).

Every other plugin starts from this answer and changes what its workload
knows better (gang size, SubGroups, name). The rules, in KAI's order:

- name `pg-<top owner>-<uid>`, namespace of the pod, owned by the top owner;
- labels: all of the top owner's, plus the pod's `user` label if the owner has none;
- annotations: the pod's `user` annotation, `kai.scheduler/top-owner-metadata`,
  then all of the top owner's (the owner wins a clash);
- queue: queue label on the top owner, then on the pod, then `project`
  (suffixed with the pod's node pool), then `default-queue`;
- priority class and preemptibility: `priority.py`;
- preemption delay and staleness grace period: the first valid annotation on
  an owner (nearest first), then on the pod; invalid values are skipped;
- root topology constraint from the top owner's annotations.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Sequence

import yaml

from kai_ray.api.constants import (
    DEFAULT_QUEUE,
    PREEMPTION_DELAY_ANNOTATION,
    PRIORITY_TRAIN,
    PROJECT_LABEL,
    STALENESS_GRACE_PERIOD_ANNOTATION,
    TOP_OWNER_METADATA_ANNOTATION,
    TOPOLOGY_ANNOTATION,
    TOPOLOGY_PREFERRED_PLACEMENT_ANNOTATION,
    TOPOLOGY_REQUIRED_PLACEMENT_ANNOTATION,
    USER_LABEL,
)
from kai_ray.api.quantity import DurationError, parse_duration
from kai_ray_operators.config import GroupingConfig
from kai_ray_operators.context import GroupingContext
from kai_ray_operators.fields import (
    GroupVersionKind,
    KubeObject,
    annotations_of,
    labels_of,
    name,
    namespace,
    uid,
)
from kai_ray_operators.metadata import OwnerReference, PodGroupMetadata, TopologyConstraint
from kai_ray_operators.priority import preemptibility, priority_class

__all__ = [
    "default_metadata",
    "group_annotations",
    "group_default",
    "group_labels",
    "pod_group_name",
    "queue_of",
    "topology_from_annotations",
]

POD_GROUP_PREFIX = "pg"


def pod_group_name(obj: KubeObject) -> str:
    return f"{POD_GROUP_PREFIX}-{name(obj)}-{uid(obj)}"


def queue_of(config: GroupingConfig, top_owner: KubeObject, pod: KubeObject) -> str:
    """A present queue label wins even when empty, as in KAI."""
    owner_labels, pod_labels = labels_of(top_owner), labels_of(pod)
    for source in (owner_labels, pod_labels):
        if config.queue_label_key in source:
            return source[config.queue_label_key]
    project = owner_labels.get(PROJECT_LABEL, pod_labels.get(PROJECT_LABEL, ""))
    if not project:
        return DEFAULT_QUEUE
    node_pool = pod_labels.get(config.node_pool_label_key)
    return f"{project}-{node_pool}" if node_pool is not None else project


def group_labels(top_owner: KubeObject, pod: KubeObject) -> dict[str, str]:
    result = labels_of(top_owner)
    pod_labels = labels_of(pod)
    if USER_LABEL not in result and USER_LABEL in pod_labels:
        result[USER_LABEL] = pod_labels[USER_LABEL]
    return result


def group_annotations(top_owner: KubeObject, pod: KubeObject) -> dict[str, str]:
    result: dict[str, str] = {}
    pod_annotations = annotations_of(pod)
    if USER_LABEL in pod_annotations:
        result[USER_LABEL] = pod_annotations[USER_LABEL]
    result[TOP_OWNER_METADATA_ANNOTATION] = top_owner_metadata(top_owner)
    result.update(annotations_of(top_owner))
    return result


def top_owner_metadata(top_owner: KubeObject) -> str:
    """The YAML KAI writes (`name`, `uid`, `group`, `version`, `kind`), quoted as Go's encoder quotes."""
    gvk = GroupVersionKind.of(top_owner)
    items = {"name": name(top_owner), "uid": uid(top_owner), "group": gvk.group}
    items |= {"version": gvk.version, "kind": gvk.kind}
    return "".join(f"{key}: {_yaml_scalar(value)}\n" for key, value in items.items())


@functools.lru_cache(maxsize=1024)
def _yaml_scalar(value: str) -> str:
    """Plain when YAML reads it back as the same string, else double-quoted (`""`, `"1"`, `"true"`).

    Remembered: three of the five values of every pod's owner (group, version, kind) repeat,
    and a YAML parse per value was a third of grouping a bare pod."""
    try:
        plain = value != "" and value == value.strip() and yaml.safe_load(value) == value
    except yaml.YAMLError:
        plain = False
    return value if plain else json.dumps(value)


def topology_from_annotations(obj: KubeObject) -> TopologyConstraint:
    values = annotations_of(obj)
    return TopologyConstraint(
        topology=values.get(TOPOLOGY_ANNOTATION, ""),
        required_level=values.get(TOPOLOGY_REQUIRED_PLACEMENT_ANNOTATION, ""),
        preferred_level=values.get(TOPOLOGY_PREFERRED_PLACEMENT_ANNOTATION, ""),
    )


def _first_duration(objects: Sequence[KubeObject], key: str, accept: Callable[[float], bool]) -> float | None:
    """Seconds of the first annotation that parses as a Go duration and is accepted."""
    for obj in objects:
        text = annotations_of(obj).get(key)
        if text is None:
            continue
        try:
            seconds = parse_duration(text)
        except DurationError:
            continue
        if accept(seconds):
            return seconds
    return None


def default_metadata(
    context: GroupingContext,
    top_owner: KubeObject,
    pod: KubeObject,
    all_owners: Sequence[KubeObject] = (),
    fallback_priority: str = PRIORITY_TRAIN,
) -> PodGroupMetadata:
    """KAI's `DefaultGrouper.GetPodGroupMetadata`; without `all_owners` the top owner is the only owner."""
    owners = list(all_owners) or [top_owner]
    defaults = context.type_defaults()
    chain = [*owners, pod]
    return PodGroupMetadata(
        name=pod_group_name(top_owner),
        namespace=namespace(pod),
        owner=OwnerReference.of(top_owner),
        queue=queue_of(context.config, top_owner, pod),
        priority_class_name=priority_class(context, owners, pod, fallback_priority, defaults),
        preemptibility=preemptibility(owners, pod, defaults),
        preemption_delay=_first_duration(chain, PREEMPTION_DELAY_ANNOTATION, lambda s: s >= 0),
        staleness_grace_period=_first_duration(chain, STALENESS_GRACE_PERIOD_ANNOTATION, lambda s: True),
        min_available=1,
        labels=group_labels(top_owner, pod),
        annotations=group_annotations(top_owner, pod),
        topology=topology_from_annotations(top_owner),
    )


def group_default(
    context: GroupingContext, top_owner: KubeObject, pod: KubeObject, all_owners: Sequence[KubeObject]
) -> PodGroupMetadata:
    """Plugin `default`: StatefulSets, ReplicaSets, DaemonSets and every type no plugin claims."""
    return default_metadata(context, top_owner, pod, all_owners)
