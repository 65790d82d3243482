"""Splitting a cluster by node pool, as KAI's SchedulingShards see it (spec/kubernetes-api.md §6)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from builders import cluster

from kai_ray.api.constants import NODE_POOL_LABEL
from kai_ray.model.objects import ClusterState, HeldPod, JobSpec, QueueSpec, TaskStatus
from kai_ray.model.pools import OffPoolTask, off_pool_tasks, pool_names, split_by_pool
from kai_ray.model.snapshot import compile_snapshot

pytestmark = pytest.mark.unit

KEY = NODE_POOL_LABEL


def pooled(state: ClusterState, queues: dict[str, str], jobs: dict[str, str]) -> ClusterState:
    """The state with the named queues and jobs put in the given pools."""
    state.queues = [replace(q, node_pool=queues.get(q.name, "")) for q in state.queues]
    state.jobs = [replace(j, node_pool=jobs.get(j.name, "")) for j in state.jobs]
    return state


def names(items: list[QueueSpec] | list[JobSpec]) -> list[str]:
    return [item.name for item in items]


def three_pools() -> ClusterState:
    state = (
        cluster(now=5.0)
        .topology("racks", "rack")
        .node("b1", gpus=2, labels={KEY: "b"})
        .node("plain", gpus=2)
        .node("a1", gpus=2, labels={KEY: "a"})
        .node("a2", gpus=2, labels={KEY: "a", "rack": "r1"})
        .queue("qa")
        .queue("qb")
        .queue("qplain")
        .job("ja", queue="qa", gpus=1)
        .job("jb", queue="qb", gpus=1)
        .job("jplain", queue="qplain", gpus=1)
        .build()
    )
    return pooled(state, {"qa": "a", "qb": "b"}, {"ja": "a", "jb": "b"})


def test_pools_are_ordered_by_name_with_the_unlabelled_pool_first() -> None:
    split = split_by_pool(three_pools(), KEY)
    assert list(split) == ["", "a", "b"]


def test_nodes_queues_and_jobs_go_to_their_own_pool() -> None:
    split = split_by_pool(three_pools(), KEY)
    assert [n.name for n in split["a"].nodes] == ["a1", "a2"]
    assert [n.name for n in split[""].nodes] == ["plain"]
    assert names(split["a"].queues) == ["qa"] and names(split["a"].jobs) == ["ja"]
    assert names(split[""].queues) == ["qplain"] and names(split[""].jobs) == ["jplain"]
    assert names(split["b"].queues) == ["qb"] and names(split["b"].jobs) == ["jb"]


def test_every_pool_shares_the_clock_and_every_topology() -> None:
    state = three_pools()
    for part in split_by_pool(state, KEY).values():
        assert part.now == 5.0
        assert part.topologies == state.topologies


def test_the_label_key_is_the_callers() -> None:
    state = cluster().node("n1", labels={"example.com/pool": "x"}).node("n2", labels={KEY: "y"}).build()
    split = split_by_pool(state, "example.com/pool")
    assert {pool: [n.name for n in part.nodes] for pool, part in split.items()} == {"": ["n2"], "x": ["n1"]}


def test_split_jobs_and_nodes_are_the_callers_objects() -> None:
    """A scheduler that updates tasks in place (the simulator does) updates the caller's state."""
    state = three_pools()
    split = split_by_pool(state, KEY)
    assert split["a"].jobs[0] is state.jobs[0]
    assert split["a"].nodes[0] is state.nodes[2]


def test_a_pool_named_only_by_a_job_still_gets_its_shard() -> None:
    state = pooled(cluster().node("n1", gpus=1).queue("q").job("j", queue="q").build(), {}, {"j": "gpu"})
    split = split_by_pool(state, KEY)
    assert pool_names(state, KEY) == ["", "gpu"]
    assert split["gpu"].nodes == [] and names(split["gpu"].jobs) == ["j"]


def test_a_job_naming_another_pools_queue_finds_no_queue_in_its_shard() -> None:
    state = pooled(
        cluster().node("n1", gpus=1, labels={KEY: "a"}).queue("qb").job("j", queue="qb").build(),
        {"qb": "b"},
        {"j": "a"},
    )
    problems = compile_snapshot(split_by_pool(state, KEY)["a"]).problems
    assert [(p.kind, p.name, p.message) for p in problems] == [("PodGroup", "j", "queue 'qb' does not exist")]


def test_a_queue_whose_parent_is_unlabelled_is_an_orphan_in_its_shard() -> None:
    """Queues are filtered by their own label only: the parent stays in the default shard."""
    state = pooled(
        cluster().node("n1", gpus=1, labels={KEY: "a"}).queue("dept").queue("team", parent="dept").build(),
        {"team": "a"},
        {},
    )
    split = split_by_pool(state, KEY)
    assert names(split["a"].queues) == ["team"] and names(split[""].queues) == ["dept"]
    problems = compile_snapshot(split["a"]).problems
    assert [(p.kind, p.name, p.message) for p in problems] == [
        ("Queue", "team", "ancestor queue 'dept' does not exist")
    ]


def test_held_pods_stay_with_their_node_and_pods_on_no_node_are_dropped() -> None:
    state = three_pools()
    on_a = replace(state.jobs[0].tasks[0], name="other-a", status=TaskStatus.RUNNING, node="a2")
    nowhere = replace(on_a, name="other-gone", node="gone")
    state.held = [HeldPod("ns", on_a, foreign=True), HeldPod("ns", nowhere, foreign=True)]
    split = split_by_pool(state, KEY)
    assert [h.task.name for h in split["a"].held] == ["other-a"]
    assert [h.task.name for part in split.values() for h in part.held] == ["other-a"]


def off_pool_cluster() -> ClusterState:
    """Job `ja` of pool a runs one pod on a1 and one on b1 (pool b); one more pod waits."""
    state = (
        cluster()
        .node("a1", gpus=2, labels={KEY: "a"})
        .node("b1", gpus=2, labels={KEY: "b"})
        .queue("qa")
        .job("ja", queue="qa", gpus=1, pods=2, min_member=1, status=TaskStatus.RUNNING, node="a1")
        .task(status=TaskStatus.PENDING)
        .build()
    )
    state.jobs[0].tasks[1].node = "b1"
    return pooled(state, {"qa": "a"}, {"ja": "a"})


def test_a_pod_on_another_pools_node_is_held_there_and_left_out_of_its_job() -> None:
    state = off_pool_cluster()
    split = split_by_pool(state, KEY)
    assert [t.name for t in split["a"].jobs[0].tasks] == ["ja-0", "ja-2"]
    assert [(h.task.name, h.task.node, h.foreign) for h in split["b"].held] == [("ja-1", "b1", False)]
    assert [t.name for t in state.jobs[0].tasks] == ["ja-0", "ja-1", "ja-2"]
    assert compile_snapshot(split["a"]).problems == []


def test_off_pool_pods_are_reported_one_by_one() -> None:
    found = off_pool_tasks(off_pool_cluster(), KEY)
    assert found == [OffPoolTask("ja", "ja-1", "b1", "a", "b")]
    assert "node pool 'b'" in found[0].describe() and "'ja'" in found[0].describe()


def test_off_pool_pods_are_named_with_their_namespace_as_the_snapshot_names_pods() -> None:
    state = off_pool_cluster()
    state.jobs[0] = replace(state.jobs[0], namespace="ml")
    assert off_pool_tasks(state, KEY) == [OffPoolTask("ml/ja", "ml/ja-1", "b1", "a", "b")]


def test_a_pod_on_a_node_that_exists_nowhere_stays_with_its_job() -> None:
    """Sharded or not, the snapshot then reports the missing node for it."""
    state = off_pool_cluster()
    state.jobs[0].tasks[1].node = "gone"
    split = split_by_pool(state, KEY)
    assert off_pool_tasks(state, KEY) == []
    assert [t.name for t in split["a"].jobs[0].tasks] == ["ja-0", "ja-1", "ja-2"]
    assert [p.field for p in compile_snapshot(split["a"]).problems] == ["spec.nodeName"]


def test_a_cluster_without_the_label_is_one_pool_holding_everything() -> None:
    state = cluster().node("n1", gpus=1).queue("q").job("j", queue="q").build()
    split = split_by_pool(state, KEY)
    assert list(split) == [""]
    assert (
        split[""].nodes == state.nodes and split[""].jobs == state.jobs and split[""].queues == state.queues
    )
