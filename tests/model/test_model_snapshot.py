"""Snapshot compilation: malformed objects are dropped with a named problem, the rest is scheduled.

ARCHITECTURE.md "Determinism and errors"; spec §1.1 (queue hierarchy), §1.2 (subgroups).
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from builders import ClusterBuilder, binds, cluster, pod_set, run_cycle, subgroup_set

from kai_ray.model.objects import ClusterState, NodeSpec, QueueSpec, TaskStatus
from kai_ray.model.resources import CPU, GPU, MEMORY, PODS
from kai_ray.model.snapshot import Problem, SnapshotCompiler, compile_snapshot

pytestmark = pytest.mark.unit


def healthy() -> ClusterBuilder:
    """A node, a valid leaf queue and a job that must keep being scheduled whatever else is broken."""
    return cluster().node("n1", gpus=4).queue("good").job("fine", queue="good", gpus=1)


def problem_for(state: ClusterState, kind: str, name: str) -> Problem:
    found = [p for p in compile_snapshot(state).problems if p.kind == kind and p.name == name]
    assert len(found) == 1, compile_snapshot(state).problems
    return found[0]


def assert_rest_is_scheduled(state: ClusterState) -> None:
    plan = run_cycle(state)
    assert binds(plan) == {"fine-0": "n1"}
    assert plan.problems == compile_snapshot(state).problems


def test_valid_cluster_has_no_problems_and_a_name_ordered_node_table() -> None:
    state = cluster().node("b", gpus=2, max_pods=7).node("a", cpu_millis=500, memory=1e9).queue("q").build()
    snapshot = compile_snapshot(state)
    assert snapshot.problems == []
    assert snapshot.nodes.names == ["a", "b"]
    assert snapshot.nodes.index == {"a": 0, "b": 1}
    assert snapshot.nodes.allocatable[0, CPU] == 500 and snapshot.nodes.allocatable[0, MEMORY] == 1e9
    assert snapshot.nodes.allocatable[1, GPU] == 2 and snapshot.nodes.allocatable[1, PODS] == 7


def test_job_in_a_missing_queue_is_dropped() -> None:
    state = healthy().job("lost", queue="nowhere", gpus=1).build()
    problem = problem_for(state, "PodGroup", "lost")
    assert problem.field == "spec.queue"
    assert "nowhere" in problem.message
    assert [j.name for j in compile_snapshot(state).jobs] == ["fine"]
    assert_rest_is_scheduled(state)


def test_job_in_a_non_leaf_queue_is_dropped() -> None:
    state = healthy().queue("dept").queue("team", parent="dept").job("misfiled", queue="dept", gpus=1).build()
    problem = problem_for(state, "PodGroup", "misfiled")
    assert problem.field == "spec.queue"
    assert "leaf" in problem.message
    assert_rest_is_scheduled(state)


def test_namespaced_job_is_named_with_its_namespace() -> None:
    state = healthy().job("lost", queue="nowhere", namespace="ml", gpus=1).build()
    assert problem_for(state, "PodGroup", "ml/lost").field == "spec.queue"


def test_parent_cycle_drops_every_queue_on_it_and_their_jobs() -> None:
    state = healthy().queue("x", parent="y").queue("y", parent="x").job("in-cycle", queue="x", gpus=1).build()
    for queue in ("x", "y"):
        problem = problem_for(state, "Queue", queue)
        assert problem.field == "spec.parentQueue"
        assert "cycle" in problem.message
    assert set(compile_snapshot(state).queues) == {"good"}
    assert problem_for(state, "PodGroup", "in-cycle").field == "spec.queue"
    assert_rest_is_scheduled(state)


def test_orphan_queue_is_dropped_with_all_its_descendants() -> None:
    state = (
        healthy()
        .queue("orphan", parent="gone")
        .queue("orphan-child", parent="orphan")
        .job("orphaned-job", queue="orphan-child", gpus=1)
        .build()
    )
    assert "gone" in problem_for(state, "Queue", "orphan").message
    assert problem_for(state, "Queue", "orphan-child").field == "spec.parentQueue"
    assert "orphan-child" not in compile_snapshot(state).queues
    assert problem_for(state, "PodGroup", "orphaned-job").field == "spec.queue"
    assert_rest_is_scheduled(state)


def test_duplicate_queue_keeps_the_first() -> None:
    state = healthy().build()
    state.queues.append(QueueSpec("good", priority=1))
    problem = problem_for(state, "Queue", "good")
    assert problem.field == "metadata.name"
    assert compile_snapshot(state).queues["good"].priority == 100
    assert_rest_is_scheduled(state)


def test_task_naming_a_missing_subgroup_is_reported() -> None:
    state = healthy().job("typo", queue="good", gpus=1, pods=0, min_member=1).task(subgroup="wroker").build()
    problem = problem_for(state, "Pod", "typo-0")
    assert problem.field == "metadata.labels[kai.scheduler/subgroup-name]"
    assert "wroker" in problem.message
    assert_rest_is_scheduled(state)


def test_only_the_pod_naming_a_missing_subgroup_is_excluded() -> None:
    state = (
        cluster()
        .node("n1", gpus=4)
        .queue("q")
        .job("partly", queue="q", gpus=1, pods=1, min_member=1)
        .task(subgroup="wroker")
        .build()
    )
    assert binds(run_cycle(state)) == {"partly-0": "n1"}


@pytest.mark.parametrize("request_field", ["cpu_millis", "memory", "gpu", "gpu_memory_mib"])
def test_negative_request_is_reported(request_field: str) -> None:
    state = healthy().job("neg", queue="good", gpus=1).build()
    setattr(state.jobs[-1].tasks[0], request_field, -1)
    problem = problem_for(state, "Pod", "neg-0")
    assert problem.field == "spec.containers[].resources.requests"
    assert "negative" in problem.message
    assert_rest_is_scheduled(state)


def test_fractional_gpu_above_one_is_reported() -> None:
    state = healthy().job("odd", queue="good", gpus=1.5).build()
    assert "1.5" in problem_for(state, "Pod", "odd-0").message
    assert_rest_is_scheduled(state)


def test_running_task_on_a_missing_node_is_reported_but_pending_with_node_is_fine() -> None:
    state = (
        healthy()
        .job("ghost", queue="good", gpus=1, status=TaskStatus.RUNNING, node="n9")
        .job("hinted", queue="good", status=TaskStatus.PENDING, node="n9")
        .build()
    )
    problems = compile_snapshot(state).problems
    assert [(p.kind, p.name, p.field) for p in problems] == [("Pod", "ghost-0", "spec.nodeName")]
    assert "n9" in problems[0].message


def test_bad_subgroup_tree_is_reported() -> None:
    too_demanding = subgroup_set("", pod_set("a", 1), min_subgroups=2)
    state = (
        healthy()
        .job("tree", queue="good", gpus=1, pods=0, subgroups=too_demanding)
        .task(subgroup="a")
        .build()
    )
    problem = problem_for(state, "PodGroup", "tree")
    assert problem.field == "spec.subGroups"
    assert_rest_is_scheduled(state)


def test_duplicate_and_negative_nodes_are_dropped() -> None:
    state = healthy().node("bad", gpus=-1).build()
    state.nodes.append(NodeSpec("n1", gpus=100))
    snapshot = compile_snapshot(state)
    assert {(p.kind, p.name, p.field) for p in snapshot.problems} == {
        ("Node", "bad", "status.allocatable"),
        ("Node", "n1", "metadata.name"),
    }
    assert snapshot.nodes.names == ["n1"]
    assert snapshot.nodes.allocatable[0, GPU] == 4
    assert_rest_is_scheduled(state)


def test_problem_renders_kind_name_and_field() -> None:
    assert str(Problem("Queue", "x", "spec.parentQueue", "cycle")) == "Queue/x: spec.parentQueue: cycle"


def test_a_kept_compiler_compiles_the_same_jobs_again_when_their_queues_or_nodes_change() -> None:
    """The very same job objects, with a queue gone and then a node gone: what the job compiled
    to before no longer holds, and the compiler must see it (jobs are remembered by identity)."""
    state = (
        cluster().node("n1", gpus=4).queue("good").queue("other").job("fine", queue="good", gpus=1).build()
    )
    compiler = SnapshotCompiler()
    assert [job.name for job in compiler.compile(state).jobs] == ["fine"]
    without_queue = replace(state, queues=[q for q in state.queues if q.name != "good"])
    assert compiler.compile(without_queue).jobs == []
    assert [job.name for job in compiler.compile(state).jobs] == ["fine"]
    running = replace(
        state.jobs[0], tasks=[replace(state.jobs[0].tasks[0], status=TaskStatus.RUNNING, node="n1")]
    )
    placed = replace(state, jobs=[running])
    assert compiler.compile(placed).jobs[0].tasks[0].node == "n1"
    without_node = replace(placed, nodes=[NodeSpec("n2", gpus=4)])
    compiled = compiler.compile(without_node)
    assert compiled.jobs[0].tasks == [] and [p.field for p in compiled.problems] == ["spec.nodeName"]
