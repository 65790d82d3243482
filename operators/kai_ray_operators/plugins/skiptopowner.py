"""Skip-top-owner: group by the owner below a wrapper kind (spec/integrations.md §1.7).

Argo Workflows, Kubeflow TrainJobs, run.ai workloads and Dynamo deployments
wrap another workload; what should be grouped is the owner right below them
(a step's pod, a TrainJob's JobSet). That "last owner" is read again in full,
given the wrapper's labels and annotations it lacks (after the wrapper kind's
entry of the defaults ConfigMap, so an administrator's default beats the
wrapper's own priority label), and grouped by the plugin registered for its
exact type, with the wrapper dropped from the owner chain.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from kai_ray.api.constants import PREEMPTIBILITY_LABEL, PRIORITY_CLASS_LABEL
from kai_ray_operators.context import GroupingContext
from kai_ray_operators.fields import GroupVersionKind, KubeObject, annotations_of, labels_of, name, namespace
from kai_ray_operators.metadata import PodGroupMetadata
from kai_ray_operators.owners import as_pod

__all__ = ["group_skip_top_owner"]


def _with_metadata(obj: KubeObject, key: str, extra: dict[str, str]) -> dict[str, Any]:
    """A deep copy of `obj` whose labels or annotations gain the `extra` keys it does not have yet."""
    result = copy.deepcopy(dict(obj))
    meta = result.setdefault("metadata", {})
    current = dict(meta.get(key) or {})
    meta[key] = {**extra, **current}
    return result


def _type_defaults(context: GroupingContext, skipped: KubeObject) -> dict[str, str]:
    """The wrapper kind's ConfigMap defaults, as labels (a priority class only if it exists)."""
    entry = context.type_defaults().for_type(GroupVersionKind.of(skipped))
    if entry is None:
        return {}
    result: dict[str, str] = {}
    if context.priority_class_exists(entry.priority_class_name):
        result[PRIORITY_CLASS_LABEL] = entry.priority_class_name
    if entry.preemptibility:
        result[PREEMPTIBILITY_LABEL] = entry.preemptibility
    return result


def group_skip_top_owner(
    context: GroupingContext, top_owner: KubeObject, pod: KubeObject, all_owners: Sequence[KubeObject]
) -> PodGroupMetadata | None:
    """Plugin `skiptopowner`."""
    if len(all_owners) <= 1:
        last_owner = as_pod(pod)  # a step pod owned directly by its Workflow is grouped on its own
    else:
        below = all_owners[-2]
        gvk = GroupVersionKind.of(below)
        last_owner = context.reader.get(gvk.api_version, gvk.kind, namespace(below), name(below))
    owners = list(all_owners[:-1])
    defaults = _type_defaults(context, top_owner)
    if defaults:
        last_owner = _with_metadata(last_owner, "labels", defaults)
        if len(all_owners) > 1:
            owners[-1] = _with_metadata(owners[-1], "labels", defaults)
    last_owner = _with_metadata(last_owner, "labels", labels_of(top_owner))
    last_owner = _with_metadata(last_owner, "annotations", annotations_of(top_owner))
    grouper = context.exact_grouper(GroupVersionKind.of(last_owner))
    return grouper(context, last_owner, pod, owners)
