"""PodGroup metadata on the wire: the object to create, the update of an existing one, the pod patch.

Pure functions over plain dicts (spec/integrations.md §1.6), so a controller
only reads, calls these, and writes:

- `build_pod_group`: the desired PodGroup. `minSubGroup` replaces `minMember`
  where set (the webhook rejects both); a SubGroup that is some other's
  parent never gets `minMember`; durations are written in Go's form (`5m0s`).
- `merge_pod_group`: what to write over an existing PodGroup. Fields other
  components own are kept (`markUnschedulable`, `schedulingBackoff`), the
  queue is frozen at creation, the node-pool and queue labels stay as they
  are, and an empty root topology keeps the old one. Labels and annotations
  are only ever added. Nothing to write when spec and owners are equal and
  every desired label and annotation is already there.
- `pod_patch`: the merge patch that links a pod to its PodGroup and leaf.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kai_ray.api.constants import POD_GROUP_NAME_ANNOTATION, PODGROUP_API_VERSION, SUBGROUP_LABEL
from kai_ray_operators.config import GroupingConfig
from kai_ray_operators.fields import KubeObject, annotations_of, labels_of, name
from kai_ray_operators.metadata import PodGroupMetadata, SubGroupMetadata, TopologyConstraint

__all__ = ["PodGroupUpdate", "build_pod_group", "go_duration", "merge_pod_group", "pod_patch"]

_NS_PER_SECOND = 1_000_000_000


def _fraction(value: int, unit: int) -> str:
    """`value / unit` in decimal, without trailing zeros (Go's `fmtFrac`)."""
    whole, rest = divmod(value, unit)
    digits = str(rest).rjust(len(str(unit)) - 1, "0").rstrip("0")
    return f"{whole}.{digits}" if digits else str(whole)


def go_duration(seconds: float) -> str:
    """Go's `time.Duration.String()`: `0s`, `1.5s`, `5m0s`, `1h2m3s`, `500ms`, `-10s`."""
    nanos = round(seconds * _NS_PER_SECOND)
    sign, nanos = ("-" if nanos < 0 else ""), abs(nanos)
    if nanos == 0:
        return "0s"
    if nanos < _NS_PER_SECOND:
        for unit, suffix in ((1_000_000, "ms"), (1_000, "µs"), (1, "ns")):
            if nanos >= unit:
                return f"{sign}{_fraction(nanos, unit)}{suffix}"
    hours, rest = divmod(nanos, 3600 * _NS_PER_SECOND)
    minutes, rest = divmod(rest, 60 * _NS_PER_SECOND)
    text = f"{_fraction(rest, _NS_PER_SECOND)}s"
    if hours or minutes:
        text = f"{minutes}m{text}"
    if hours:
        text = f"{hours}h{text}"
    return sign + text


def _constraint(topology: TopologyConstraint) -> dict[str, str]:
    wire = {
        "topology": topology.topology,
        "requiredTopologyLevel": topology.required_level,
        "preferredTopologyLevel": topology.preferred_level,
    }
    return {key: value for key, value in wire.items() if value}


def _subgroup(subgroup: SubGroupMetadata, parents: set[str]) -> dict[str, Any]:
    wire: dict[str, Any] = {"name": subgroup.name}
    if subgroup.min_subgroup is not None:
        wire["minSubGroup"] = subgroup.min_subgroup
    elif subgroup.name not in parents:
        wire["minMember"] = subgroup.min_available
    if subgroup.parent is not None:
        wire["parent"] = subgroup.parent
    if subgroup.topology is not None:
        wire["topologyConstraint"] = _constraint(subgroup.topology)
    return wire


def build_pod_group(metadata: PodGroupMetadata) -> dict[str, Any]:
    """The PodGroup the API server should hold for this metadata."""
    spec: dict[str, Any] = {"queue": metadata.queue, "priorityClassName": metadata.priority_class_name}
    if metadata.min_subgroup is not None:
        spec["minSubGroup"] = metadata.min_subgroup
    else:
        spec["minMember"] = metadata.min_available
    if metadata.preemptibility:
        spec["preemptibility"] = metadata.preemptibility
    if metadata.preemption_delay is not None:
        spec["preemptionDelay"] = go_duration(metadata.preemption_delay)
    if metadata.staleness_grace_period is not None:
        spec["stalenessGracePeriod"] = go_duration(metadata.staleness_grace_period)
    spec["topologyConstraint"] = _constraint(metadata.topology)
    if metadata.subgroups:
        parents = {group.parent for group in metadata.subgroups if group.parent is not None}
        spec["subGroups"] = [_subgroup(group, parents) for group in metadata.subgroups]
    owner = metadata.owner
    return {
        "apiVersion": PODGROUP_API_VERSION,
        "kind": "PodGroup",
        "metadata": {
            "name": metadata.name,
            "namespace": metadata.namespace,
            "labels": dict(metadata.labels),
            "annotations": dict(metadata.annotations),
            "ownerReferences": [
                {"apiVersion": owner.api_version, "kind": owner.kind, "name": owner.name, "uid": owner.uid}
            ],
        },
        "spec": spec,
    }


@dataclass(frozen=True)
class PodGroupUpdate:
    changed: bool
    """False: the existing PodGroup already says everything; write nothing."""
    pod_group: dict[str, Any]
    """The existing PodGroup with the update applied (resourceVersion kept, for an optimistic update)."""


def _pruned(value: Any) -> Any:
    """`value` without null, empty strings, maps and lists: the API server's and Go's "unset"."""
    if isinstance(value, Mapping):
        items = {key: _pruned(item) for key, item in value.items()}
        return {key: item for key, item in items.items() if item not in (None, "", {}, [])}
    if isinstance(value, list):
        return [_pruned(item) for item in value]
    return value


def _carry_over(existing: KubeObject, desired: dict[str, Any], config: GroupingConfig) -> dict[str, Any]:
    """`desired` with what the podgrouper must not change on an existing PodGroup."""
    result = copy.deepcopy(desired)
    old_spec, spec = existing.get("spec") or {}, result["spec"]
    for key in ("markUnschedulable", "schedulingBackoff", "queue"):
        spec.pop(key, None)
        if key in old_spec:
            spec[key] = old_spec[key]
    if not spec.get("topologyConstraint", {}).get("topology"):
        spec.pop("topologyConstraint", None)
        if "topologyConstraint" in old_spec:
            spec["topologyConstraint"] = old_spec["topologyConstraint"]
    old_labels, new_labels = labels_of(existing), result["metadata"]["labels"]
    new_labels.pop(config.node_pool_label_key, None)
    for key in (config.node_pool_label_key, config.queue_label_key):
        if key in old_labels:
            new_labels[key] = old_labels[key]
    return result


def _contains(container: Mapping[str, str], wanted: Mapping[str, str]) -> bool:
    return all(container.get(key) == value for key, value in wanted.items())


def merge_pod_group(existing: KubeObject, desired: KubeObject, config: GroupingConfig) -> PodGroupUpdate:
    """The update of `existing` towards `desired` (`build_pod_group`'s output)."""
    wanted = _carry_over(existing, dict(desired), config)
    meta = wanted["metadata"]
    unchanged = (
        _pruned(existing.get("spec") or {}) == _pruned(wanted["spec"])
        and _pruned((existing.get("metadata") or {}).get("ownerReferences") or [])
        == _pruned(meta["ownerReferences"])
        and _contains(labels_of(existing), meta["labels"])
        and _contains(annotations_of(existing), meta["annotations"])
    )
    updated = copy.deepcopy(dict(existing))
    if not unchanged:
        updated_meta = updated.setdefault("metadata", {})
        updated_meta["labels"] = {**labels_of(existing), **meta["labels"]}
        updated_meta["annotations"] = {**annotations_of(existing), **meta["annotations"]}
        updated_meta["ownerReferences"] = meta["ownerReferences"]
        updated["spec"] = wanted["spec"]
    return PodGroupUpdate(changed=not unchanged, pod_group=updated)


def pod_patch(pod: KubeObject, metadata: PodGroupMetadata) -> dict[str, Any] | None:
    """Merge patch setting `pod-group-name` and the leaf label; None when the pod already has both.

    The subgroup label is only ever set, never removed (spec/integrations.md §1.1 step 9).
    """
    patch: dict[str, Any] = {}
    if annotations_of(pod).get(POD_GROUP_NAME_ANNOTATION) != metadata.name:
        patch["annotations"] = {POD_GROUP_NAME_ANNOTATION: metadata.name}
    leaf = metadata.subgroup_of(name(pod))
    if leaf is not None and labels_of(pod).get(SUBGROUP_LABEL) != leaf:
        patch["labels"] = {SUBGROUP_LABEL: leaf}
    return {"metadata": patch} if patch else None
