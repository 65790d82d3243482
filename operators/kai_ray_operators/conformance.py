"""Run one case of the shared grouping corpus (conformance/grouping/FORMAT.md), for `kai-ray group`.

A case lists the objects the grouper may read, the pod, and either a direct
plugin `call` (how KAI's unit tests exercise plugins), a hub `lookup`, or
nothing, which runs the whole pipeline from the pod's owner references. The
result is the JSON FORMAT.md specifies: the metadata, `null`, or
`{"plugin": id}`; a `GroupingError` propagates for the caller to report.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from kai_ray_operators.config import GroupingConfig, GroupingConfigError
from kai_ray_operators.context import Grouper
from kai_ray_operators.fields import GroupVersionKind
from kai_ray_operators.hub import HUB_TABLE, PLUGINS, grouping_context, plugin_id
from kai_ray_operators.metadata import PodGroupMetadata, SubGroupMetadata, TopologyConstraint
from kai_ray_operators.pipeline import group_pod
from kai_ray_operators.plugins.kubeflow import distributed_grouper
from kai_ray_operators.reader import InMemoryReader

__all__ = ["CaseError", "load_case", "metadata_json", "run_case"]


class CaseError(ValueError):
    """A case file that does not follow FORMAT.md."""


def load_case(path: Path) -> dict[str, Any]:
    try:
        case = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as error:
        raise CaseError(f"{path}: {error}") from None
    if not isinstance(case, dict):
        raise CaseError(f"{path}: a case is a YAML mapping")
    return case


def _topology_json(topology: TopologyConstraint) -> dict[str, str]:
    return {
        "topology": topology.topology,
        "requiredTopologyLevel": topology.required_level,
        "preferredTopologyLevel": topology.preferred_level,
    }


def _subgroup_json(subgroup: SubGroupMetadata) -> dict[str, Any]:
    return {
        "name": subgroup.name,
        "minAvailable": subgroup.min_available,
        "minSubGroup": subgroup.min_subgroup,
        "parent": subgroup.parent,
        "pods": list(subgroup.pods),
        "topology": None if subgroup.topology is None else _topology_json(subgroup.topology),
    }


def metadata_json(metadata: PodGroupMetadata) -> dict[str, Any]:
    owner = metadata.owner
    return {
        "name": metadata.name,
        "namespace": metadata.namespace,
        "queue": metadata.queue,
        "priorityClassName": metadata.priority_class_name,
        "preemptibility": metadata.preemptibility,
        "preemptionDelay": metadata.preemption_delay,
        "stalenessGracePeriod": metadata.staleness_grace_period,
        "minAvailable": metadata.min_available,
        "minSubGroup": metadata.min_subgroup,
        "owner": {"apiVersion": owner.api_version, "kind": owner.kind, "name": owner.name, "uid": owner.uid},
        "labels": dict(metadata.labels),
        "annotations": dict(metadata.annotations),
        "topology": _topology_json(metadata.topology),
        "subGroups": [_subgroup_json(subgroup) for subgroup in metadata.subgroups],
    }


def _mapping(case: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = case.get(key) or {}
    if not isinstance(value, Mapping):
        raise CaseError(f"{key}: expected a mapping, got {value!r}")
    return value


def _skip_table(args: Mapping[str, Any]) -> Mapping[GroupVersionKind, str]:
    """The GVK→plugin table a skip-top-owner test built for itself, else the hub's."""
    if "plugins" not in args:
        return HUB_TABLE
    table = {}
    for entry in args["plugins"] or []:
        gvk = GroupVersionKind(str(entry.get("group", "")), str(entry["version"]), str(entry["kind"]))
        table[gvk] = str(entry["plugin"])
    return table


def _grouper(plugin: str, args: Mapping[str, Any]) -> Grouper:
    if plugin == "kubeflow-distributed":
        return distributed_grouper(
            str(args["replicaSpecName"]), [str(n) for n in args.get("mandatorySpecNames") or []]
        )
    if plugin not in PLUGINS:
        raise CaseError(f"call.plugin: unknown plugin {plugin!r}")
    return PLUGINS[plugin]


def _call(case: Mapping[str, Any], reader: InMemoryReader, config: GroupingConfig) -> PodGroupMetadata | None:
    call = _mapping(case, "call")
    args = _mapping(call, "args")
    try:
        grouper = _grouper(str(call.get("plugin")), args)
        context = grouping_context(reader, config, _skip_table(args))
    except (KeyError, AttributeError) as error:
        raise CaseError(f"call.args: missing or malformed {error}") from None
    owners = call.get("allOwners") or []
    if not isinstance(owners, list) or not all(isinstance(owner, Mapping) for owner in owners):
        raise CaseError("call.allOwners: expected a list of objects")
    return grouper(context, _mapping(call, "topOwner"), _mapping(case, "pod"), owners)


def run_case(case: Mapping[str, Any]) -> Any:
    """The JSON value FORMAT.md asks `kai-ray group CASE --output json` to print."""
    try:
        config = GroupingConfig.from_mapping(_mapping(case, "config"))
    except GroupingConfigError as error:
        raise CaseError(f"config: {error}") from None
    objects = case.get("objects") or []
    if not isinstance(objects, list):
        raise CaseError("objects: expected a list")
    reader = InMemoryReader(objects)
    if "lookup" in case:
        lookup = _mapping(case, "lookup")
        gvk = GroupVersionKind(
            str(lookup.get("group", "")), str(lookup.get("version", "")), str(lookup.get("kind", ""))
        )
        return {"plugin": plugin_id(gvk, reader, config)}
    if "call" in case:
        metadata = _call(case, reader, config)
    else:
        metadata = group_pod(reader, config, _mapping(case, "pod"))
    return None if metadata is None else metadata_json(metadata)
