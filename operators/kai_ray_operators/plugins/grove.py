"""Grove PodCliqueSet / PodGangSet (and Dynamo through skip-top-owner): mirror the PodGang (§9).

Grove already computes the gang: a `scheduler.grove.io/v1alpha1 PodGang`,
named by the pod's `grove.io/podgang` label, lists its pod groups with their
minimum replicas and explicit pod references, and groups of them that share a
topology constraint. The PodGroup copies that: a leaf SubGroup per pod group,
a parent per constraint group, `minMember` the sum of the minimums. Labels and
annotations of the top owner (a PodCliqueSet) fill what the PodGang lacks, and
its priority, preemptibility and topology labels apply.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from kai_ray.api.constants import (
    PREEMPTIBILITY_LABEL,
    PRIORITY_CLASS_LABEL,
    TOPOLOGY_ANNOTATION,
    TOPOLOGY_PREFERRED_PLACEMENT_ANNOTATION,
    TOPOLOGY_REQUIRED_PLACEMENT_ANNOTATION,
)
from kai_ray_operators.context import GroupingContext
from kai_ray_operators.errors import InvalidWorkload
from kai_ray_operators.fields import (
    KubeObject,
    Step,
    annotations_of,
    describe,
    field_path,
    has_field,
    int_field,
    labels_of,
    list_field,
    namespace,
    str_field,
)
from kai_ray_operators.metadata import PodGroupMetadata, SubGroupMetadata, TopologyConstraint
from kai_ray_operators.plugins.default import default_metadata
from kai_ray_operators.priority import VALID_PREEMPTIBILITY

__all__ = ["group_grove"]

PODGANG_LABEL = "grove.io/podgang"
PODGANG_API_VERSION = "scheduler.grove.io/v1alpha1"
TOPOLOGY_NAME_ANNOTATION = "grove.io/topology-name"


def _pack_constraint(gang: KubeObject, path: tuple[Step, ...], topology: str) -> TopologyConstraint | None:
    """`<path>.topologyConstraint.packConstraint`: levels need the PodGang's topology name."""
    pack = (*path, "topologyConstraint", "packConstraint")
    if not has_field(gang, *pack, "required") and not has_field(gang, *pack, "preferred"):
        return None
    if not topology:
        raise InvalidWorkload(
            describe(gang), "a topology name is required with a pack constraint", field_path(pack)
        )
    required = str_field(gang, *pack, "required") or ""
    return TopologyConstraint(topology, required, str_field(gang, *pack, "preferred") or "")


def _required(gang: KubeObject, path: tuple[Step, ...], key: str, value: Any) -> Any:
    if value is None:
        raise InvalidWorkload(describe(gang), "is required", field_path((*path, key)))
    return value


def _parents(gang: KubeObject, topology: str) -> tuple[list[SubGroupMetadata], dict[str, str]]:
    """A parent per constraint group that names pod groups, and each pod group's parent."""
    parents: list[SubGroupMetadata] = []
    parent_of: dict[str, str] = {}
    for index in range(len(list_field(gang, "spec", "topologyConstraintGroupConfigs") or [])):
        path: tuple[Step, ...] = ("spec", "topologyConstraintGroupConfigs", index)
        group_name = _required(gang, path, "name", str_field(gang, *path, "name"))
        members = list_field(gang, *path, "podGroupNames") or []
        if not members:
            continue
        parent_of |= {str(member): group_name for member in members}
        parents.append(SubGroupMetadata(group_name, topology=_pack_constraint(gang, path, topology)))
    return parents, parent_of


def _leaves(gang: KubeObject, topology: str, parent_of: Mapping[str, str]) -> list[SubGroupMetadata]:
    leaves: list[SubGroupMetadata] = []
    for index in range(len(list_field(gang, "spec", "podgroups") or [])):
        path: tuple[Step, ...] = ("spec", "podgroups", index)
        group_name = _required(gang, path, "name", str_field(gang, *path, "name"))
        minimum = _required(gang, path, "minReplicas", int_field(gang, *path, "minReplicas"))
        if minimum <= 0:
            raise InvalidWorkload(
                describe(gang), "must be greater than 0", field_path((*path, "minReplicas"))
            )
        references = _required(gang, path, "podReferences", list_field(gang, *path, "podReferences"))
        pods = []
        for ref_index in range(len(references)):
            ref_path = (*path, "podReferences", ref_index)
            pod_namespace = _required(gang, ref_path, "namespace", str_field(gang, *ref_path, "namespace"))
            if pod_namespace != namespace(gang):
                raise InvalidWorkload(
                    describe(gang), "pods of another namespace cannot join", field_path(ref_path)
                )
            pods.append(_required(gang, ref_path, "name", str_field(gang, *ref_path, "name")))
        leaves.append(
            SubGroupMetadata(
                group_name,
                min_available=minimum,
                parent=parent_of.get(group_name),
                pods=tuple(pods),
                topology=_pack_constraint(gang, path, topology),
            )
        )
    return leaves


def _with_owner_metadata(metadata: PodGroupMetadata, top_owner: KubeObject) -> PodGroupMetadata:
    """The top owner's labels and annotations where the PodGang has none, and what they say."""
    merged_labels = {**labels_of(top_owner), **metadata.labels}
    merged_annotations = {**annotations_of(top_owner), **metadata.annotations}
    priority = merged_labels.get(PRIORITY_CLASS_LABEL, metadata.priority_class_name)
    preemptibility = merged_labels.get(PREEMPTIBILITY_LABEL, metadata.preemptibility)
    if PREEMPTIBILITY_LABEL in merged_labels and preemptibility not in VALID_PREEMPTIBILITY:
        raise InvalidWorkload(
            describe(top_owner),
            f"invalid preemptibility {preemptibility!r}",
            f"metadata.labels[{PREEMPTIBILITY_LABEL}]",
        )
    current = metadata.topology
    topology = TopologyConstraint(
        current.topology or merged_annotations.get(TOPOLOGY_ANNOTATION, ""),
        current.required_level or merged_annotations.get(TOPOLOGY_REQUIRED_PLACEMENT_ANNOTATION, ""),
        current.preferred_level or merged_annotations.get(TOPOLOGY_PREFERRED_PLACEMENT_ANNOTATION, ""),
    )
    return dataclasses.replace(
        metadata,
        labels=merged_labels,
        annotations=merged_annotations,
        priority_class_name=priority,
        preemptibility=preemptibility,
        topology=topology,
    )


def group_grove(
    context: GroupingContext, top_owner: KubeObject, pod: KubeObject, all_owners: Sequence[KubeObject]
) -> PodGroupMetadata:
    """Plugin `grove`."""
    gang_name = labels_of(pod).get(PODGANG_LABEL)
    if gang_name is None:
        raise InvalidWorkload(describe(pod), "label is required to find the pod's PodGang", PODGANG_LABEL)
    gang = context.reader.get(PODGANG_API_VERSION, "PodGang", namespace(pod), gang_name)
    metadata = default_metadata(context, gang, pod)
    gang_annotations = annotations_of(gang)
    topology = gang_annotations.get(TOPOLOGY_NAME_ANNOTATION, gang_annotations.get(TOPOLOGY_ANNOTATION, ""))
    root = _pack_constraint(gang, ("spec",), topology)
    if root is not None:
        metadata = dataclasses.replace(metadata, topology=root)
    if has_field(gang, "spec", "priorityClassName"):
        metadata = dataclasses.replace(
            metadata, priority_class_name=str_field(gang, "spec", "priorityClassName") or ""
        )
    metadata = _with_owner_metadata(metadata, top_owner)
    parents, parent_of = _parents(gang, topology)
    leaves = _leaves(gang, topology, parent_of)
    return dataclasses.replace(
        metadata, subgroups=(*parents, *leaves), min_available=sum(leaf.min_available for leaf in leaves)
    )
