"""Topology objects and constraints read from Kubernetes objects mean what the scenario format says."""

from __future__ import annotations

from typing import Any

import pytest
from manifest_builders import convert, node, pod, podgroup, queue, topology

from kai_ray.model.objects import ClusterState, TopologyConstraintSpec, TopologySpec

pytestmark = pytest.mark.unit


def converted(*objects: dict[str, Any]) -> ClusterState:
    state, problems = convert(queue("team-a", gpu=8), node(), *objects, group_pods=False)
    assert problems == []
    return state


def test_topology_objects_become_levels_top_down_with_their_aliases_in_name_order() -> None:
    state = converted(
        topology("zz", "example.com/zone"),
        topology("aa", "example.com/zone", "example.com/rack", aliases={"example.com/rack": "rack"}),
    )

    assert state.topologies == [
        TopologySpec("aa", ("example.com/zone", "example.com/rack"), (("rack", "example.com/rack"),)),
        TopologySpec("zz", ("example.com/zone",)),
    ]


def test_a_podgroup_constraint_and_its_subgroups_constraints_land_on_root_and_members() -> None:
    rack = {"topology": "t", "requiredTopologyLevel": "rack"}
    groups = [
        {
            "name": "workers",
            "minSubGroup": 1,
            "topologyConstraint": {"topology": "t", "preferredTopologyLevel": "host"},
        },
        {"name": "w0", "parent": "workers", "minMember": 1, "topologyConstraint": rack},
        {"name": "plain", "minMember": 1},
    ]
    state = converted(
        podgroup(
            "pg", topologyConstraint={"topology": "t", "requiredTopologyLevel": "zone"}, subGroups=groups
        )
    )

    root = state.jobs[0].subgroups
    assert root.topology == TopologyConstraintSpec("t", "zone", None)
    assert root.subgroup_sets[0].topology == TopologyConstraintSpec("t", None, "host")
    assert root.subgroup_sets[0].pod_sets[0].topology == TopologyConstraintSpec("t", "rack", None)
    assert root.pod_sets[0].topology is None


def test_a_constraint_without_a_topology_name_is_no_constraint() -> None:
    state = converted(podgroup("pg", minMember=1, topologyConstraint={"requiredTopologyLevel": "rack"}))

    assert state.jobs[0].subgroups.topology is None


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({}, TopologyConstraintSpec("from-notes", "rack", "host")),
        (
            {"topologyConstraint": {"topology": "t", "requiredTopologyLevel": "zone"}},
            TopologyConstraintSpec("t", "zone", None),
        ),
    ],
)
def test_the_workload_annotations_stand_for_the_field_only_when_it_names_no_topology(
    spec: dict[str, Any], expected: TopologyConstraintSpec
) -> None:
    group = podgroup("pg", minMember=1, **spec)
    group["metadata"]["annotations"] = {
        "kai.scheduler/topology": "from-notes",
        "kai.scheduler/topology-required-placement": "rack",
        "kai.scheduler/topology-preferred-placement": "host",
    }
    state = converted(group)

    assert state.jobs[0].subgroups.topology == expected


def test_a_workload_with_topology_annotations_is_grouped_into_a_constrained_job() -> None:
    notes = {"kai.scheduler/topology": "t", "kai.scheduler/topology-required-placement": "rack"}
    state, problems = convert(
        queue("team-a", gpu=8), node(), topology("t", "rack"), pod("p", gpus=1, annotations=notes)
    )

    assert problems == []
    assert state.jobs[0].subgroups.topology == TopologyConstraintSpec("t", "rack", None)
