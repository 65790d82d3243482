"""Node partitions for sharded executors: whole topology domains and node pools, balanced, stable."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kai_ray.api.constants import NODE_POOL_LABEL
from kai_ray.distributed.partitions import partition_rows, partitions_for
from kai_ray.model.objects import NodeSpec, TopologySpec

pytestmark = pytest.mark.unit

ZONE = "topology.kubernetes.io/zone"
RACK = "cloud.provider.com/rack"
LEVELS = (ZONE, RACK)


def node(index: int, **labels: str) -> NodeSpec:
    return NodeSpec(f"node-{index:03d}", labels=dict(labels))


def racked(*racks: str) -> list[NodeSpec]:
    """One node per entry, in one zone, on the named rack ("" = no rack label)."""
    return [node(i, **{ZONE: "z", **({RACK: rack} if rack else {})}) for i, rack in enumerate(racks)]


def zoned(zones: list[str], racks: list[str]) -> list[NodeSpec]:
    """Node i in zones[i], on racks[i]."""
    return [
        node(i, **{ZONE: zone, RACK: rack}) for i, (zone, rack) in enumerate(zip(zones, racks, strict=True))
    ]


def as_lists(parts: list[np.ndarray]) -> list[list[int]]:
    return [part.tolist() for part in parts]


# --- examples --------------------------------------------------------------------------------


@pytest.mark.parametrize(("nodes", "shards"), [(10, 3), (7, 7), (3, 5), (0, 2), (100, 1)])
def test_without_layout_the_split_is_array_splits(nodes: int, shards: int) -> None:
    specs = [node(i) for i in range(nodes)]
    expected = as_lists(np.array_split(np.arange(nodes), shards))
    assert as_lists(partition_rows(specs, shards)) == expected
    assert as_lists(partition_rows(specs, shards, LEVELS)) == expected, "no node carries the labels"
    assert as_lists(partitions_for(specs, shards, [])) == expected


def test_racks_go_whole_largest_first_into_the_emptiest_shard() -> None:
    specs = racked("a", "b", "a", "c", "b", "a", "b", "a")
    # a: 4 nodes, b: 3, c: 1; fair size 4 -> a alone, then b and c together.
    assert as_lists(partition_rows(specs, 2, LEVELS)) == [[0, 2, 5, 7], [1, 3, 4, 6]]


def test_equal_racks_are_taken_by_name() -> None:
    specs = racked("y", "x", "y", "x")
    assert as_lists(partition_rows(specs, 2, LEVELS)) == [[1, 3], [0, 2]]


def test_the_coarsest_level_that_fits_is_used() -> None:
    zones = ["z1", "z1", "z2", "z2", "z1", "z2"]
    racks = ["r1", "r2", "r1", "r2", "r2", "r1"]
    specs = zoned(zones, racks)
    assert as_lists(partition_rows(specs, 2, LEVELS)) == [[0, 1, 4], [2, 3, 5]]


def test_a_zone_too_big_falls_back_to_racks() -> None:
    zones = ["big"] * 5 + ["small"]
    racks = ["r1", "r1", "r1", "r2", "r2", "r9"]
    specs = zoned(zones, racks)
    # fair size 3: zone "big" (5) is too big, its racks (3 and 2) are not.
    assert as_lists(partition_rows(specs, 2, LEVELS)) == [[0, 1, 2], [3, 4, 5]]


def test_a_zone_that_fits_stays_whole_beside_one_handed_out_by_rack() -> None:
    zones = ["big"] * 4 + ["small"] * 2
    racks = ["r1", "r1", "r2", "r2", "s1", "s2"]
    specs = zoned(zones, racks)
    # fair size 3: "big" goes by rack (2 + 2), "small" (2) whole, into the first of two equal shards.
    assert as_lists(partition_rows(specs, 2, LEVELS)) == [[0, 1, 4, 5], [2, 3]]


def test_same_rack_names_in_two_zones_are_two_domains() -> None:
    zones = ["z1"] * 4 + ["z2"] * 4
    specs = [node(i, **{ZONE: zone, RACK: "rs"[i % 2]}) for i, zone in enumerate(zones)]
    assert as_lists(partition_rows(specs, 4, LEVELS)) == [[0, 2], [1, 3], [4, 6], [5, 7]]


def test_a_rack_bigger_than_a_shard_is_cut_into_contiguous_pieces() -> None:
    specs = racked(*["big"] * 6, "s", "s")
    # fair size 4: "big" (6 nodes) becomes [0, 1, 2] and [3, 4, 5]; "s" tops up the first.
    assert as_lists(partition_rows(specs, 2, LEVELS)) == [[0, 1, 2, 6, 7], [3, 4, 5]]


def test_nodes_without_the_labels_top_up_the_emptiest_shards_in_row_order() -> None:
    specs = racked("a", "", "a", "a", "", "", "")
    assert as_lists(partition_rows(specs, 3, LEVELS)) == [[0, 2, 3], [1, 4], [5, 6]]


def test_no_shard_is_left_idle_while_there_are_nodes_for_it() -> None:
    specs = racked(*["a"] * 3, *["b"] * 3, *["c"] * 3)
    parts = partition_rows(specs, 4, LEVELS)
    assert all(len(part) for part in parts), as_lists(parts)
    # the largest rack, by name "a", is halved
    assert as_lists(parts) == [[3, 4, 5], [6, 7, 8], [0, 1], [2]]


def test_short_of_pieces_a_zone_is_split_by_racks_before_a_rack_is_halved() -> None:
    specs = zoned(["A", "A", "A", "B", "B"], ["r", "r", "r", "s1", "s2"])
    # fair size 2: rack A.r (3) is cut in [0, 1] and [2]; B (2) fits, but 3 pieces for 4 shards
    # are too few, and B's racks give the fourth where halving A.r again would split a rack more.
    assert as_lists(partition_rows(specs, 4, LEVELS)) == [[0, 1], [2], [3], [4]]


def test_pools_get_shards_of_their_own_in_proportion_to_size() -> None:
    pools = ["gpu"] * 6 + ["cpu"] * 2 + [""] * 2
    specs = [node(i, **({NODE_POOL_LABEL: pool} if pool else {})) for i, pool in enumerate(pools)]
    parts = as_lists(partition_rows(specs, 4, pool_label=NODE_POOL_LABEL))
    # pools in name order: "" (no label), cpu, gpu; gpu, the largest, gets the spare shard.
    assert parts == [[8, 9], [6, 7], [0, 1, 2], [3, 4, 5]]


def test_pools_are_packed_whole_when_shards_are_fewer() -> None:
    pools = ["a", "b", "c", "a", "b", "c", "c"]
    specs = [node(i, **{NODE_POOL_LABEL: pool}) for i, pool in enumerate(pools)]
    assert as_lists(partition_rows(specs, 2, pool_label=NODE_POOL_LABEL)) == [[2, 5, 6], [0, 1, 3, 4]]


def test_more_shards_than_nodes_leaves_the_rest_empty() -> None:
    specs = [node(i, **{NODE_POOL_LABEL: pool}) for i, pool in enumerate(["a", "b", "b"])]
    assert as_lists(partition_rows(specs, 5, pool_label=NODE_POOL_LABEL)) == [[0], [1], [2], [], []]


def test_partitions_for_follows_the_topology_most_nodes_carry() -> None:
    specs = racked("a", "b", "a", "b")
    specs[0] = NodeSpec(specs[0].name, labels={**specs[0].labels, "partial": "p"})
    unused = TopologySpec("a-unused", ("nobody/has-this",))
    partial = TopologySpec("b-partial", ("partial",))
    wide = TopologySpec("c-wide", LEVELS)
    assert as_lists(partitions_for(specs, 2, [unused, partial, wide])) == [[0, 2], [1, 3]]
    assert as_lists(partitions_for(specs, 2, [unused])) == [[0, 1], [2, 3]]


def test_partitions_for_breaks_ties_between_topologies_by_name() -> None:
    specs = [
        node(0, **{ZONE: "x", "rack-b": "a"}),
        node(1, **{ZONE: "x", "rack-b": "b"}),
        node(2, **{ZONE: "y", "rack-b": "a"}),
        node(3, **{ZONE: "y", "rack-b": "b"}),
    ]
    by_zone = TopologySpec("a-zones", (ZONE,))
    by_rack = TopologySpec("b-racks", ("rack-b",))
    assert as_lists(partitions_for(specs, 2, [by_rack, by_zone])) == [[0, 1], [2, 3]]


@pytest.mark.parametrize("shards", [0, -3])
def test_shards_below_one_is_refused_by_name(shards: int) -> None:
    with pytest.raises(ValueError, match=f"shards must be at least 1, got {shards}"):
        partition_rows([node(0)], shards)


def test_an_empty_label_key_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="domain_labels"):
        partition_rows([node(0)], 1, (ZONE, ""))
    with pytest.raises(ValueError, match="pool_label"):
        partition_rows([node(0)], 1, pool_label="")


# --- properties ------------------------------------------------------------------------------

LABEL_VALUES = st.sampled_from(["a", "b", "c", "d", None])


@st.composite
def clusters(draw: st.DrawFn) -> list[NodeSpec]:
    """Nodes on a few zones and racks (some labels missing), racks of very different sizes."""
    count = draw(st.integers(0, 40))
    specs = []
    for index in range(count):
        zone, rack, pool = draw(LABEL_VALUES), draw(LABEL_VALUES), draw(LABEL_VALUES)
        labels = {key: value for key, value in ((ZONE, zone), (RACK, rack), (NODE_POOL_LABEL, pool)) if value}
        specs.append(node(index, **labels))
    return specs


def domains(specs: list[NodeSpec], labels: tuple[str, ...]) -> dict[tuple[str, ...], list[int]]:
    """The rows of each domain at the level of the last label (nodes carrying all of them)."""
    found: dict[tuple[str, ...], list[int]] = {}
    for row, spec in enumerate(specs):
        if all(label in spec.labels for label in labels):
            found.setdefault(tuple(spec.labels[label] for label in labels), []).append(row)
    return found


def shard_of(parts: list[np.ndarray]) -> dict[int, int]:
    return {row: index for index, part in enumerate(parts) for row in part.tolist()}


def check_cover(specs: list[NodeSpec], shards: int, parts: list[np.ndarray]) -> None:
    assert len(parts) == shards
    assert sorted(row for part in parts for row in part.tolist()) == list(range(len(specs)))
    assert all(np.all(np.diff(part) > 0) for part in parts), "rows ascending"
    assert all(part.dtype == np.int64 for part in parts)
    if shards <= len(specs):
        assert all(len(part) for part in parts), "no idle shard while there are nodes"


@settings(max_examples=300, deadline=None)
@given(clusters(), st.integers(1, 9))
def test_every_row_is_in_exactly_one_partition(specs: list[NodeSpec], shards: int) -> None:
    for labels, pool in [((), None), (LEVELS, None), ((), NODE_POOL_LABEL), (LEVELS, NODE_POOL_LABEL)]:
        check_cover(specs, shards, partition_rows(specs, shards, labels, pool))


@settings(max_examples=300, deadline=None)
@given(clusters(), st.integers(1, 9))
def test_racks_stay_whole_unless_bigger_than_a_shard(specs: list[NodeSpec], shards: int) -> None:
    parts = partition_rows(specs, shards, LEVELS)
    where = shard_of(parts)
    fair = math.ceil(len(specs) / shards) if specs else 0
    racks = domains(specs, LEVELS)
    unlabelled = len(specs) - sum(len(rows) for rows in racks.values())
    if len(racks) + unlabelled < min(shards, len(specs)):
        return  # too few racks to give every shard one: the largest are halved (tested above)
    for rack, rows in racks.items():
        held = {where[row] for row in rows}
        if len(rows) <= fair:
            assert len(held) == 1, f"rack {rack} of {len(rows)} <= {fair} split over shards {held}"
        for index in held:
            mine = [row for row in rows if where[row] == index]
            start = rows.index(mine[0])
            assert rows[start : start + len(mine)] == mine, f"piece of rack {rack} is not contiguous"


@settings(max_examples=300, deadline=None)
@given(clusters(), st.integers(1, 9))
def test_shards_balance_within_the_largest_domain(specs: list[NodeSpec], shards: int) -> None:
    parts = partition_rows(specs, shards, LEVELS)
    sizes = [len(part) for part in parts]
    fair = math.ceil(len(specs) / shards) if specs else 0
    largest = max((len(rows) for rows in domains(specs, LEVELS[:1]).values()), default=0)
    assert max(sizes) - min(sizes) <= max(1, min(fair, largest)), sizes


@settings(max_examples=200, deadline=None)
@given(clusters(), st.integers(1, 9))
def test_the_result_depends_on_the_nodes_only(specs: list[NodeSpec], shards: int) -> None:
    """Same nodes with their labels in another dict order: the same partitions, call after call."""
    shuffled = [NodeSpec(spec.name, labels=dict(reversed(spec.labels.items()))) for spec in specs]
    for labels, pool in [(LEVELS, None), (LEVELS, NODE_POOL_LABEL)]:
        first = as_lists(partition_rows(specs, shards, labels, pool))
        assert as_lists(partition_rows(shuffled, shards, labels, pool)) == first
        assert as_lists(partition_rows(specs, shards, labels, pool)) == first


@settings(max_examples=300, deadline=None)
@given(clusters(), st.integers(1, 9))
def test_pools_never_share_a_shard_when_there_are_enough(specs: list[NodeSpec], shards: int) -> None:
    parts = partition_rows(specs, shards, LEVELS, NODE_POOL_LABEL)
    pools = {spec.labels.get(NODE_POOL_LABEL, "") for spec in specs}
    held = [{specs[row].labels.get(NODE_POOL_LABEL, "") for row in part.tolist()} for part in parts]
    if shards >= len(pools):
        assert all(len(found) <= 1 for found in held), held
    else:
        where = shard_of(parts)
        fair = math.ceil(len(specs) / shards)
        for pool in pools:
            rows = [row for row, spec in enumerate(specs) if spec.labels.get(NODE_POOL_LABEL, "") == pool]
            if len(rows) <= fair:
                assert len({where[row] for row in rows}) == 1, f"pool {pool!r} split"
