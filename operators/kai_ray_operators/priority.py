"""Priority class and preemptibility of a PodGroup (spec/integrations.md §1.5, §1.4).

The order is KAI's, quirks included, because users rely on which label wins:

1. per owner, nearest first, ONE candidate: the owner's `priorityClassName`
   label, else the pod's label, else `pod.spec.priorityClassName`; the first
   candidate that exists as a PriorityClass wins. A missing class moves on to
   the next owner, never to the pod's other values.
2. the defaults ConfigMap entry of each owner's type, if that class exists;
3. the plugin's fallback (`train`, `inference`, `build`), not checked.

Preemptibility: the first valid `kai.scheduler/preemptibility` label on an
owner (nearest first), then on the pod, then the defaults ConfigMap, else "".
"""

from __future__ import annotations

from collections.abc import Sequence

from kai_ray.api.constants import NON_PREEMPTIBLE, PREEMPTIBILITY_LABEL, PREEMPTIBLE, PRIORITY_CLASS_LABEL
from kai_ray_operators.context import GroupingContext
from kai_ray_operators.fields import GroupVersionKind, KubeObject, field, labels_of
from kai_ray_operators.type_defaults import TypeDefaults

__all__ = ["VALID_PREEMPTIBILITY", "preemptibility", "priority_class"]

VALID_PREEMPTIBILITY = (PREEMPTIBLE, NON_PREEMPTIBLE)


def _candidate(owner: KubeObject, pod: KubeObject) -> str:
    """The one class an owner proposes: a label that is present wins even when empty, as in KAI."""
    owner_labels, pod_labels = labels_of(owner), labels_of(pod)
    if PRIORITY_CLASS_LABEL in owner_labels:
        return owner_labels[PRIORITY_CLASS_LABEL]
    if PRIORITY_CLASS_LABEL in pod_labels:
        return pod_labels[PRIORITY_CLASS_LABEL]
    spec_class = field(pod, "spec", "priorityClassName")
    return spec_class if isinstance(spec_class, str) else ""


def priority_class(
    context: GroupingContext,
    owners: Sequence[KubeObject],
    pod: KubeObject,
    fallback: str,
    defaults: TypeDefaults,
) -> str:
    for owner in owners:
        candidate = _candidate(owner, pod)
        if context.priority_class_exists(candidate):
            return candidate
    for owner in owners:
        entry = defaults.for_type(GroupVersionKind.of(owner))
        if entry is not None and context.priority_class_exists(entry.priority_class_name):
            return entry.priority_class_name
    return fallback


def preemptibility(owners: Sequence[KubeObject], pod: KubeObject, defaults: TypeDefaults) -> str:
    for obj in (*owners, pod):
        value = labels_of(obj).get(PREEMPTIBILITY_LABEL)
        if value in VALID_PREEMPTIBILITY:
            return value
    for owner in owners:
        entry = defaults.for_type(GroupVersionKind.of(owner))
        if entry is not None and entry.preemptibility.lower() in VALID_PREEMPTIBILITY:
            return entry.preemptibility.lower()
    return ""
