"""The expansion contract across kinds: what is consumed, what is not created twice, and never raising."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest
from expand_builders import (
    batch_job,
    every_workload,
    expand,
    names,
    only_problem,
    stateful_set,
    template,
    train_job,
    training_runtime,
)
from grouping_builders import kube, pod
from kai_ray_operators.expand import EXPANDERS, ExpansionProblem, engine, expand_workloads
from kai_ray_operators.fields import GroupVersionKind, name, uid

pytestmark = pytest.mark.unit


def test_every_kind_of_the_brief_is_modelled() -> None:
    assert {str(gvk) for gvk in EXPANDERS} >= {
        "ray.io/v1 RayCluster",
        "ray.io/v1 RayJob",
        "ray.io/v1 RayService",
        "kubeflow.org/v1 PyTorchJob",
        "kubeflow.org/v1 TFJob",
        "kubeflow.org/v1 XGBoostJob",
        "kubeflow.org/v1 JAXJob",
        "kubeflow.org/v1 MPIJob",
        "kubeflow.org/v2beta1 MPIJob",
        "trainer.kubeflow.org/v1alpha1 TrainJob",
        "batch/v1 Job",
        "batch/v1 CronJob",
        "apps/v1 Deployment",
        "apps/v1 ReplicaSet",
        "apps/v1 StatefulSet",
        "leaderworkerset.x-k8s.io/v1 LeaderWorkerSet",
        "jobset.x-k8s.io/v1alpha2 JobSet",
        "argoproj.io/v1alpha1 Workflow",
    }


def test_every_workload_expands_and_is_consumed_and_nothing_else_is() -> None:
    workloads = every_workload()
    queue = kube("scheduling.run.ai/v2", "Queue", "team-a", spec={})
    bare = pod("bare")
    expansion = expand(*workloads, queue, bare)
    assert expansion.problems == []
    consumed = {
        (GroupVersionKind.of(w).group, w["kind"], w["metadata"].get("namespace", ""), name(w))
        for w in workloads
    }
    assert expansion.consumed == consumed
    owners = {ref["uid"] for child in expansion.children for ref in child["metadata"]["ownerReferences"]}
    assert {uid(w) for w in workloads if w["kind"] != "ClusterTrainingRuntime"} <= owners


def test_expansion_is_deterministic_and_leaves_its_inputs_alone() -> None:
    workloads = every_workload()
    before = copy.deepcopy(workloads)
    first, second = expand_workloads(workloads), expand_workloads(copy.deepcopy(workloads))
    assert workloads == before
    assert first == second
    keys = [(child["kind"], child["metadata"]["namespace"], name(child)) for child in first.children]
    assert len(keys) == len(set(keys))


def test_an_unmodelled_version_or_a_nameless_workload_is_a_problem() -> None:
    future = kube("jobset.x-k8s.io/v1", "JobSet", "future", spec={})
    expansion = expand(future)
    assert str(only_problem(expansion)) == (
        "JobSet ml/future: apiVersion: jobset.x-k8s.io/v1 is not modelled; "
        "supported: jobset.x-k8s.io/v1alpha2"
    )
    assert expansion.consumed == {("jobset.x-k8s.io", "JobSet", "ml", "future")}
    nameless = batch_job()
    del nameless["metadata"]["name"]
    nameless["metadata"]["generateName"] = "bj-"
    problem = only_problem(expand(nameless))
    assert (problem.field, problem.name) == ("metadata.name", "")


def test_objects_the_manifests_hold_are_not_created_again() -> None:
    job = batch_job(parallelism=3, completions=3)
    by_name = pod("bj-1")
    assert names(expand(job, by_name), "Pod") == ["bj-0", "bj-2"]
    exported = [pod(f"bj-{suffix}", owner=job) for suffix in ("x1a2b", "q9w8e")]
    assert names(expand(job, *exported), "Pod") == []


def test_two_workloads_creating_the_same_object_the_later_one_is_a_problem() -> None:
    job = kube("batch/v1", "Job", "db", spec={"template": template()})
    expansion = expand(stateful_set(), job)
    problem = only_problem(expansion)
    assert (problem.kind, problem.name) == ("Job", "db")
    assert problem.message == "Pod ml/db-0 would also be created by StatefulSet ml/db"
    assert names(expansion, "Pod") == ["db-0", "db-1", "db-2"]


def test_problem_lines() -> None:
    assert str(ExpansionProblem("RayCluster", "ml", "rc", "spec.x", "bad")) == "RayCluster ml/rc: spec.x: bad"
    assert (
        str(ExpansionProblem("ClusterTrainingRuntime", "", "t", "", "bad")) == "ClusterTrainingRuntime t: bad"
    )


_ODD_VALUES: tuple[Any, ...] = ("x", -1, None, [], {}, True, 2.5)


def _paths(value: Any, path: tuple[str | int, ...] = ()) -> Iterator[tuple[str | int, ...]]:
    if isinstance(value, dict):
        items: list[tuple[str | int, Any]] = list(value.items())
    elif isinstance(value, list):
        items = list(enumerate(value))
    else:
        return
    for key, item in items:
        yield (*path, key)
        yield from _paths(item, (*path, key))


def _replaced(obj: dict[str, Any], path: tuple[str | int, ...], value: Any) -> dict[str, Any]:
    result = copy.deepcopy(obj)
    node: Any = result
    for step in path[:-1]:
        node = node[step]
    node[path[-1]] = value
    return result


def _mutations() -> Iterator[tuple[int, tuple[str | int, ...], Any]]:
    for index, workload in enumerate(every_workload()):
        for path in _paths(workload.get("spec"), ("spec",)):
            for value in _ODD_VALUES:
                yield index, path, value


def _companions(workload: dict[str, Any]) -> list[dict[str, Any]]:
    """What a workload needs to expand at all: a TrainJob its runtime, a runtime a TrainJob reading it."""
    return {"TrainJob": [training_runtime()], "ClusterTrainingRuntime": [train_job()]}.get(
        workload["kind"], []
    )


def test_odd_values_anywhere_in_a_spec_never_raise_and_stay_with_their_workload() -> None:
    """Every field of every kind's spec, replaced by values of the wrong shape: at most one problem, about the
    changed object, and the workload with the problem (the TrainJob, for its runtime) creates nothing."""
    workloads = every_workload()
    for index, path, value in _mutations():
        changed = _replaced(workloads[index], path, value)
        companions = _companions(changed)
        expansion = expand_workloads([changed, *companions])
        assert len(expansion.problems) <= 1, (changed["kind"], path, value, expansion.problems)
        for problem in expansion.problems:
            assert (problem.kind, problem.name) == (changed["kind"], name(changed))
            failed = companions[0] if problem.kind == "ClusterTrainingRuntime" else changed
            assert uid(failed) not in {
                ref["uid"] for child in expansion.children for ref in child["metadata"]["ownerReferences"]
            }


def test_the_runtime_is_read_not_expanded() -> None:
    expansion = expand(training_runtime())
    assert (expansion.children, expansion.problems) == ([], [])


def test_a_count_typo_is_a_problem_not_millions_of_pods(monkeypatch: pytest.MonkeyPatch) -> None:
    problem = only_problem(expand(batch_job(parallelism=10**9, completions=None)))
    assert (problem.field, problem.message) == (
        "spec.parallelism",
        "1000000000 is more than the 100000 objects simulated",
    )
    monkeypatch.setattr(engine, "MAX_OBJECTS", 50)
    replicated = {
        "name": "w",
        "replicas": 10,
        "template": {"spec": {"parallelism": 10, "template": template()}},
    }
    wide = kube("jobset.x-k8s.io/v1alpha2", "JobSet", "wide", spec={"replicatedJobs": [replicated]})
    problem = only_problem(expand(wide))
    assert (problem.kind, problem.field) == ("JobSet", "")
    assert problem.message == "creates more than the 50 objects simulated"
