"""Topology objects and topology constraints → the engine's `TopologySpec` / `TopologyConstraintSpec`.

A PodGroup's job-level constraint is its `spec.topologyConstraint` (KAI reads only
that field, and only when it names a topology); a PodGroup written without the
field but carrying the `kai.scheduler/topology*` annotations of a workload (what
the podgrouper would have copied there) means the same constraint. A SubGroup's
constraint is its own `topologyConstraint`. Levels stay as written: a level
alias is resolved by the engine against the named topology, which may arrive
later than the PodGroup.
"""

from __future__ import annotations

from collections.abc import Mapping

from kai_ray.api import Manifest, PodGroup, Topology, TopologyConstraint
from kai_ray.api.constants import (
    TOPOLOGY_ANNOTATION,
    TOPOLOGY_PREFERRED_PLACEMENT_ANNOTATION,
    TOPOLOGY_REQUIRED_PLACEMENT_ANNOTATION,
)
from kai_ray.model.objects import TopologyConstraintSpec, TopologySpec


def topology_spec(manifest: Manifest[Topology]) -> TopologySpec:
    levels = manifest.obj.spec.levels
    return TopologySpec(
        name=manifest.obj.metadata.name,
        levels=tuple(level.node_label for level in levels),
        aliases=tuple((level.alias, level.node_label) for level in levels if level.alias),
    )


def convert_topologies(manifests: list[Manifest[Topology]]) -> list[TopologySpec]:
    """In name order, so every backend hands the engine the same list for the same objects."""
    return sorted((topology_spec(m) for m in manifests), key=lambda t: t.name)


def constraint_spec(constraint: TopologyConstraint | None) -> TopologyConstraintSpec | None:
    """None without a topology name: KAI ignores such a constraint."""
    if constraint is None or not constraint.topology:
        return None
    return TopologyConstraintSpec(
        topology=constraint.topology,
        required_level=constraint.required_topology_level or None,
        preferred_level=constraint.preferred_topology_level or None,
    )


def job_constraint(group: PodGroup) -> TopologyConstraintSpec | None:
    """The job-level constraint: the spec field, else the workload annotations on the PodGroup."""
    written = constraint_spec(group.spec.topology_constraint)
    if written is not None:
        return written
    return _annotated(group.metadata.annotations)


def _annotated(annotations: Mapping[str, str]) -> TopologyConstraintSpec | None:
    name = annotations.get(TOPOLOGY_ANNOTATION, "")
    if not name:
        return None
    return TopologyConstraintSpec(
        topology=name,
        required_level=annotations.get(TOPOLOGY_REQUIRED_PLACEMENT_ANNOTATION) or None,
        preferred_level=annotations.get(TOPOLOGY_PREFERRED_PLACEMENT_ANNOTATION) or None,
    )
