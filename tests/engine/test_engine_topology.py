"""Topology-aware placement (spec §18): which domain a constrained gang lands in, and why it waits."""

from __future__ import annotations

import numpy as np
import pytest
from builders import ClusterBuilder, binds, cluster, open_session, pod_set, run_cycle, subgroup_set

from kai_ray.engine.reasons import PendingCause
from kai_ray.engine.topology.tree import build_tree
from kai_ray.model.objects import TaskStatus, TopologyConstraintSpec, TopologySpec

pytestmark = pytest.mark.unit

ZONE = "zone"
RACK = "rack"


def racks(*nodes: tuple[str, str, str, int]) -> ClusterBuilder:
    """Nodes (name, zone, rack, GPUs) under a zone/rack topology named `topo`, and queue q."""
    builder = cluster().topology("topo", ZONE, RACK).queue("q")
    for name, zone, rack, gpus in nodes:
        builder.node(name, gpus=gpus, labels={ZONE: zone, RACK: rack})
    return builder


def constraint(
    required: str | None = None, preferred: str | None = None, name: str = "topo"
) -> TopologyConstraintSpec:
    return TopologyConstraintSpec(name, required, preferred)


def test_domain_ids_join_the_label_values_from_the_top_so_alike_racks_of_two_zones_differ() -> None:
    state = (
        racks(("a", "z1", "r1", 1), ("b", "z2", "r1", 1), ("c", "z2", "r1", 1)).node("bare", gpus=8).build()
    )
    session = open_session(state)
    tree = build_tree(TopologySpec("topo", (ZONE, RACK)), session.nodes.table)

    assert [d.id for d in tree.level_domains(2)] == ["z1.r1", "z2.r1"]
    assert tree.member.tolist() == [True, True, False, True]  # rows in name order: a, b, bare, c
    assert tree.lowest_common(np.array([1, 3]), None).id == "z2.r1"
    assert tree.lowest_common(np.array([1, 3]), 1).id == "z2"  # never below the preferred level
    assert tree.lowest_common(np.array([0, 1]), None) is tree.root


def test_a_required_rack_gang_takes_the_most_packed_rack_that_holds_it() -> None:
    state = (
        racks(("a1", "z", "ra", 4), ("a2", "z", "ra", 4), ("b1", "z", "rb", 4), ("b2", "z", "rb", 4))
        .job("busy", queue="q", gpus=1, pods=3, status=TaskStatus.RUNNING, node="b1")
        .job("gang", queue="q", gpus=1, pods=4, topology=constraint(required=RACK))
        .build()
    )
    placed = binds(run_cycle(state))

    assert {placed[f"gang-{i}"] for i in range(4)} <= {"b1", "b2"}


def test_nodes_without_every_level_label_are_never_chosen_for_a_constrained_gang() -> None:
    state = (
        racks(("small", "z", "r", 1))
        .node("big", gpus=8, labels={ZONE: "z"})
        .job("gang", queue="q", gpus=1, pods=2, topology=constraint(required=ZONE))
        .build()
    )
    plan = run_cycle(state)

    assert binds(plan) == {}
    assert plan.pending_reasons["gang"].cause is PendingCause.NO_TOPOLOGY_DOMAIN


def test_a_gang_no_rack_can_hold_waits_and_says_which_rack_came_closest() -> None:
    state = (
        racks(("a1", "z", "ra", 2), ("b1", "z", "rb", 3), ("c1", "z", "rc", 1))
        .job("gang", queue="q", gpus=1, pods=4, topology=constraint(required=RACK))
        .build()
    )
    plan = run_cycle(state)

    assert binds(plan) == {}
    reason = plan.pending_reasons["gang"]
    assert reason.cause is PendingCause.NO_TOPOLOGY_DOMAIN
    assert "closest: rack z.rb has 3 of 4 GPUs" in reason.message


def test_a_preferred_rack_that_no_rack_can_hold_falls_back_to_a_wider_domain() -> None:
    state = (
        racks(("a1", "z", "ra", 2), ("b1", "z", "rb", 2))
        .job("gang", queue="q", gpus=1, pods=4, topology=constraint(preferred=RACK))
        .build()
    )
    placed = binds(run_cycle(state))

    assert sorted(placed.values()) == ["a1", "a1", "b1", "b1"]


def test_with_a_preferred_rack_inside_a_required_zone_the_pods_stay_in_one_rack_of_the_zone() -> None:
    state = (
        racks(("a1", "z1", "ra", 1), ("a2", "z1", "ra", 1), ("b1", "z1", "rb", 1), ("c1", "z2", "rc", 4))
        .job("busy", queue="q", gpus=1, status=TaskStatus.RUNNING, node="c1")
        .job("gang", queue="q", gpus=1, pods=2, topology=constraint(required=ZONE, preferred=RACK))
        .build()
    )
    placed = binds(run_cycle(state))

    assert sorted(placed[f"gang-{i}"] for i in range(2)) == ["a1", "a2"]


def test_each_subgroup_keeps_to_its_own_rack_while_the_job_as_a_whole_does_not() -> None:
    tree = subgroup_set(
        "",
        pod_set("left", 2, constraint(required=RACK)),
        pod_set("right", 2, constraint(required=RACK)),
    )
    builder = racks(("a1", "z", "ra", 2), ("b1", "z", "rb", 1), ("b2", "z", "rb", 1)).job(
        "gang", queue="q", gpus=1, pods=0, subgroups=tree
    )
    for side in ("left", "right"):
        for i in range(2):
            builder.task(f"{side}-{i}", subgroup=side)
    placed = binds(run_cycle(builder.build()))

    assert [placed["left-0"], placed["left-1"]] == ["a1", "a1"]
    assert sorted([placed["right-0"], placed["right-1"]]) == ["b1", "b2"]


def test_with_pods_already_running_a_required_level_keeps_new_pods_in_their_domain() -> None:
    state = (
        racks(("a1", "z", "ra", 4), ("b1", "z", "rb", 1))
        .job("grow", queue="q", gpus=1, pods=1, min_member=1, topology=constraint(required=RACK))
        .task(status=TaskStatus.RUNNING, node="a1")
        .build()
    )
    placed = binds(run_cycle(state))

    assert placed == {"grow-0": "a1"}


@pytest.mark.parametrize(
    ("asked", "words"),
    [
        (constraint(required=RACK, name="nowhere"), "topology nowhere, which does not exist"),
        (constraint(required="row"), "required level row is not a level of topology topo"),
    ],
)
def test_an_unknown_topology_or_level_is_a_misconfiguration_the_job_waits_on(
    asked: TopologyConstraintSpec, words: str
) -> None:
    state = racks(("a1", "z", "ra", 4)).job("gang", queue="q", gpus=1, pods=2, topology=asked).build()
    plan = run_cycle(state)

    assert binds(plan) == {}
    assert plan.pending_reasons["gang"].cause is PendingCause.TOPOLOGY_MISCONFIGURED
    assert words in plan.pending_reasons["gang"].message


def test_a_level_may_be_named_by_its_alias() -> None:
    state = (
        cluster()
        .topology("topo", ZONE, RACK, aliases={"r": RACK})
        .queue("q")
        .node("a1", gpus=1, labels={ZONE: "z", RACK: "ra"})
        .node("b1", gpus=2, labels={ZONE: "z", RACK: "rb"})
        .job("gang", queue="q", gpus=1, pods=2, topology=constraint(required="r"))
        .build()
    )
    assert binds(run_cycle(state)) == {"gang-0": "b1", "gang-1": "b1"}


def test_a_rack_whose_gpus_add_up_but_sit_on_too_small_nodes_is_said_to_lack_room_for_pods() -> None:
    state = (
        racks(("a1", "z", "ra", 1), ("a2", "z", "ra", 1))
        .job("wide", queue="q", gpus=2, pods=1, topology=constraint(required=RACK))
        .build()
    )
    plan = run_cycle(state)

    assert "closest: rack z.ra has room for 0 of 1 pods" in plan.pending_reasons["wide"].message


def test_spread_over_a_required_zone_the_pods_fill_the_roomiest_preferred_rack_first() -> None:
    state = (
        racks(("a1", "z", "ra", 2), ("b1", "z", "rb", 3))
        .job("gang", queue="q", gpus=1, pods=4, topology=constraint(required=ZONE, preferred=RACK))
        .build()
    )
    placed = binds(run_cycle(state))

    assert sorted(placed.values()) == ["a1", "b1", "b1", "b1"]


def test_as_in_kai_a_required_zone_above_the_one_rack_all_nodes_share_counts_as_having_no_room() -> None:
    """KAI works out free room only inside the lowest domain common to the nodes (§18.3)."""
    state = (
        racks(("a1", "z", "ra", 4), ("a2", "z", "ra", 4))
        .job("gang", queue="q", gpus=1, pods=2, topology=constraint(required=ZONE))
        .build()
    )
    plan = run_cycle(state)

    assert binds(plan) == {}
    assert plan.pending_reasons["gang"].cause is PendingCause.NO_TOPOLOGY_DOMAIN


def test_a_gang_the_whole_topology_cannot_hold_even_with_a_preferred_level_only_waits() -> None:
    state = (
        racks(("a1", "z1", "ra", 1), ("b1", "z2", "rb", 2))
        .job("gang", queue="q", gpus=1, pods=4, topology=constraint(preferred=RACK))
        .build()
    )
    plan = run_cycle(state)

    assert binds(plan) == {}
    assert plan.pending_reasons["gang"].message == (
        "no domain of topology topo can hold the job's 4 pods (closest: its nodes together have 3 of 4 GPUs)"
    )


def test_when_the_gang_does_not_fit_the_first_candidate_rack_it_is_rolled_back_and_placed_on_the_next() -> (
    None
):
    state = (
        cluster()
        .topology("topo", ZONE, RACK)
        .queue("q")
        .node("a1", gpus=2, labels={ZONE: "z", RACK: "ra"})
        .node("a2", gpus=1, labels={ZONE: "z", RACK: "ra", "pool": "x"})
        .node("b1", gpus=4, labels={ZONE: "z", RACK: "rb", "pool": "x"})
        .job(
            "gang", queue="q", gpus=1, pods=2, node_selector={"pool": "x"}, topology=constraint(required=RACK)
        )
        .build()
    )
    assert binds(run_cycle(state)) == {"gang-0": "b1", "gang-1": "b1"}


def test_a_subgroup_naming_a_level_its_topology_lacks_keeps_the_job_pending() -> None:
    tree = subgroup_set("", pod_set("workers", 2, constraint(required="row")))
    builder = racks(("a1", "z", "ra", 4)).job("gang", queue="q", gpus=1, pods=0, subgroups=tree)
    builder.task("w-0", subgroup="workers").task("w-1", subgroup="workers")
    plan = run_cycle(builder.build())

    assert binds(plan) == {}
    assert plan.pending_reasons["gang"].message == (
        "subgroup workers: topology constraint required level row is not a level of topology topo"
    )
