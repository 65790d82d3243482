"""The deal's own rules: which gangs are divided, how, and what any plan must take from running pods."""

from __future__ import annotations

import numpy as np
import pytest
from builders import NO_LIMIT, cluster, pod_set, subgroup_set
from random_clusters import RACK

from kai_ray.model.objects import TaskStatus, TopologyConstraintSpec
from kai_ray.model.snapshot import Snapshot, compile_snapshot
from kai_ray.split.deal import cluster_load, deal, divide, divisible, must_free

pytestmark = pytest.mark.unit


def test_pods_are_divided_in_proportion_by_largest_remainder_ties_to_the_lower_part() -> None:
    assert divide(500, [4000.0, 4000.0]) == [250, 250]
    assert divide(5, [8.0, 8.0]) == [3, 2]
    assert divide(7, [8.0, 16.0, 8.0]) == [2, 3, 2]
    assert divide(3, [0.0, 8.0]) == [0, 3]
    assert sum(divide(11, [3.0, 5.0, 7.0])) == 11


def full_cluster(*jobs: str) -> Snapshot:
    """Four 8-GPU nodes full of running one-GPU pods, and the pending jobs named."""
    builder = cluster(now=100.0).topology("racks", RACK)
    for index in range(4):
        builder.node(f"n{index}", gpus=8, labels={RACK: f"r{index // 2}"})
    builder.queue("v", gpu_quota=0.0, gpu_weight=0.0).queue("r", gpu_quota=NO_LIMIT, created=1)
    for index in range(4):
        builder.job(f"run-{index}", queue="v", pods=8, gpus=1, status=TaskStatus.RUNNING, node=f"n{index}")
    if "plain" in jobs:
        builder.job("plain", queue="r", pods=4, gpus=8, created=10.0)
    if "two-sets" in jobs:
        sets = subgroup_set("", pod_set("a", 1), pod_set("b", 2))
        builder.job("two-sets", queue="r", pods=0, gpus=8, subgroups=sets, created=11.0)
        builder.task(subgroup="a").task(subgroup="b").task(subgroup="b")
    if "nested" in jobs:
        inner = subgroup_set("inner", pod_set("c", 1))
        builder.job("nested", queue="r", pods=0, gpus=8, subgroups=subgroup_set("", inner), created=13.0)
        builder.task(subgroup="c").task(subgroup="c")
    if "in-a-rack" in jobs:
        rack = TopologyConstraintSpec("racks", required_level=RACK)
        builder.job("in-a-rack", queue="r", pods=2, gpus=8, topology=rack, created=12.0)
    return compile_snapshot(builder.build())


def test_only_a_plain_gang_no_part_has_room_for_is_divided() -> None:
    snapshot = full_cluster("plain", "two-sets", "in-a-rack", "nested")
    by_name = {job.name: job for job in snapshot.jobs}
    assert divisible(by_name["plain"]) and divisible(by_name["two-sets"])
    assert not divisible(by_name["nested"]), "a nested set: how its members combine is the tree's"
    assert not divisible(by_name["in-a-rack"]), "a topology constraint binds its pods together"
    assert not divisible(by_name["run-0"]), "its pods run"
    dealt = deal(snapshot, [np.array([0, 1]), np.array([2, 3])], cluster_load(snapshot))
    shares = [part.shares for part in dealt.parts]
    assert [len(share["plain"]) for share in shares] == [2, 2]
    assert set().union(*(share["plain"] for share in shares)) == {f"plain-{i}" for i in range(4)}
    assert [sorted(share["two-sets"]) for share in shares] == [["two-sets-0", "two-sets-1"], ["two-sets-2"]]
    for part in dealt.parts:
        for name in ("plain", "two-sets"):
            (share,) = [job for job in part.jobs if job.name == name]
            for kept_set in share.subgroups.pod_sets:
                members = [task for task in share.tasks if task.subgroup == kept_set.name]
                assert kept_set.min_available == len(members) > 0, "each pod set's share a gang"
        assert all(name not in part.shares for name in ("in-a-rack", "nested"))
    assert sorted(job.name for part in dealt.parts for job in part.jobs if job.queue == "r") == [
        "in-a-rack",
        "nested",
        "plain",
        "plain",
        "two-sets",
        "two-sets",
    ]
    assert not dealt.kept


def test_gpus_to_free_are_what_pending_pods_ask_beyond_free_and_releasing() -> None:
    builder = cluster(now=100.0).node("n0", gpus=8).node("n1", gpus=8)
    builder.queue("q", gpu_quota=NO_LIMIT)
    builder.job("runs", queue="q", pods=6, gpus=1, status=TaskStatus.RUNNING, node="n0")
    builder.job("leaves", queue="q", pods=2, gpus=1, status=TaskStatus.RELEASING, node="n1")
    builder.job("runs-too", queue="q", pods=4, gpus=1, status=TaskStatus.RUNNING, node="n1")
    builder.job("wants", queue="q", pods=7, gpus=1, created=10.0)
    snapshot = compile_snapshot(builder.build())
    # 2 GPUs free on n0, 2 on n1, 2 more releasing on n1: 7 asked, so 1 must be taken.
    assert must_free(snapshot, cluster_load(snapshot)) == 1.0
