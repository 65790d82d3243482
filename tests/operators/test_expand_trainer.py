"""TrainJob expansion: the runtime's JobSet, its Jobs and pods, grouped as on a cluster (§3.6)."""

from __future__ import annotations

import pytest
from expand_builders import expand, names, one, only_problem, plans, subgroups, train_job, training_runtime
from kai_ray_operators.identity import stable_uid

pytestmark = pytest.mark.unit

TRAINER_PODS = ["tj-node-0-0", "tj-node-0-1", "tj-node-0-2"]


def test_trainjob_expands_the_runtime_jobset_with_its_overrides() -> None:
    runtime, job = training_runtime(), train_job()
    expansion = expand(runtime, job)
    assert expansion.problems == []
    jobset = one(expansion, "JobSet", "tj")
    assert jobset["metadata"]["ownerReferences"][0]["kind"] == "TrainJob"
    assert jobset["metadata"]["labels"] == {"runtime": "torch"}
    assert jobset["spec"]["replicatedJobs"][0]["replicas"] == 1
    trainer = jobset["spec"]["replicatedJobs"][1]
    assert (trainer["replicas"], trainer["template"]["spec"]["parallelism"]) == (1, 3)
    assert trainer["template"]["spec"]["completions"] == 3
    assert "replicatedJobs" in runtime["spec"]["template"]["spec"], "the runtime is not modified"
    assert (
        runtime["spec"]["template"]["spec"]["replicatedJobs"][1]["template"]["spec"].get("parallelism")
        is None
    )
    assert names(expansion, "Job") == ["tj-dataset-initializer-0", "tj-node-0"]
    assert names(expansion, "Pod") == ["tj-dataset-initializer-0-0", *TRAINER_PODS]
    node = one(expansion, "Pod", "tj-node-0-2")
    assert node["spec"]["containers"][0]["resources"] == {"limits": {"nvidia.com/gpu": "2"}}
    assert one(expansion, "Pod", "tj-dataset-initializer-0-0")["spec"]["containers"][0]["name"] == "main"
    assert expansion.consumed == {
        ("trainer.kubeflow.org", "ClusterTrainingRuntime", "", "torch"),
        ("trainer.kubeflow.org", "TrainJob", "ml", "tj"),
    }


def test_trainjob_groups_by_its_jobset_with_the_trainjob_labels() -> None:
    runtime, job = training_runtime(), train_job()
    planned = plans(expand(runtime, job), runtime, job)
    assert sorted(planned) == ["tj-dataset-initializer-0-0", *TRAINER_PODS]
    jobset_uid = stable_uid("jobset.x-k8s.io/v1alpha2", "JobSet", "ml", "tj")
    for pod_name, plan in planned.items():
        assert (plan.metadata.name, plan.metadata.owner.kind) == (f"pg-tj-{jobset_uid}", "JobSet")
        assert plan.metadata.queue == "team-a"
        assert plan.metadata.min_subgroup == 2
        assert subgroups(plan) == [
            ("dataset-initializer", 0, 1, None),
            ("dataset-initializer-replica-0", 1, None, "dataset-initializer"),
            ("node", 0, 1, None),
            ("node-replica-0", 3, None, "node"),
        ]
        leaf = "node-replica-0" if pod_name in TRAINER_PODS else "dataset-initializer-replica-0"
        assert plan.metadata.subgroup_of(pod_name) == leaf


def test_node_count_falls_back_to_the_runtime_and_legacy_runtimes_name_the_trainer_node() -> None:
    runtime = training_runtime(mlPolicy={"numNodes": 2})
    for replicated in runtime["spec"]["template"]["spec"]["replicatedJobs"]:
        del replicated["template"]["metadata"]
    job = train_job()
    del job["spec"]["trainer"]["numNodes"]
    expansion = expand(runtime, job)
    assert names(expansion, "Pod") == [
        "tj-dataset-initializer-0-0",
        "tj-dataset-initializer-1-0",  # without the ancestor label, the runtime's replicas stand
        "tj-node-0-0",
        "tj-node-0-1",
    ]


def test_a_namespaced_runtime_is_found_in_the_trainjob_namespace() -> None:
    expansion = expand(training_runtime("TrainingRuntime"), train_job("TrainingRuntime"))
    assert names(expansion, "JobSet") == ["tj"]
    elsewhere = training_runtime("TrainingRuntime")
    elsewhere["metadata"]["namespace"] = "other"
    problem = only_problem(expand(elsewhere, train_job("TrainingRuntime")))
    assert (problem.kind, problem.field) == ("TrainJob", "spec.runtimeRef.name")


def test_a_suspended_trainjob_creates_nothing() -> None:
    job = train_job()
    job["spec"]["suspend"] = True
    assert expand(training_runtime(), job).children == []


def test_a_missing_runtime_is_a_problem_of_the_trainjob() -> None:
    expansion = expand(train_job(), training_runtime() | {"metadata": {"name": "other", "uid": "o"}})
    problem = only_problem(expansion)
    assert str(problem) == (
        "TrainJob ml/tj: spec.runtimeRef.name: runtime ClusterTrainingRuntime torch is not in the manifests"
    )
    assert expansion.children == []


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [
        (
            ("replicatedJobs", 0, "template", "spec", "parallelism"),
            "x",
            "spec.template.spec.replicatedJobs[0].template.spec.parallelism",
        ),
        (
            ("replicatedJobs", 0, "template", "spec", "template"),
            None,
            "spec.template.spec.replicatedJobs[0].template.spec.template",
        ),
        (("replicatedJobs",), [], "spec.template.spec.replicatedJobs"),
    ],
)
def test_a_bad_runtime_is_a_problem_of_the_runtime_and_others_still_expand(
    path: tuple[str | int, ...], value: object, field: str
) -> None:
    runtime = training_runtime()
    node = runtime["spec"]["template"]["spec"]
    for step in path[:-1]:
        node = node[step]
    node[path[-1]] = value
    good_runtime = training_runtime() | {"metadata": {"name": "good", "uid": "good-uid"}}
    good_job = train_job() | {"metadata": {"name": "good-job", "namespace": "ml", "uid": "g"}}
    good_job["spec"] = {**good_job["spec"], "runtimeRef": {"name": "good"}}
    expansion = expand(runtime, train_job(), good_runtime, good_job)
    problem = only_problem(expansion)
    assert (problem.kind, problem.name, problem.field) == ("ClusterTrainingRuntime", "torch", field)
    assert problem.message.endswith("(read for TrainJob ml/tj, which creates nothing)")
    assert names(expansion, "JobSet") == ["good-job"]


@pytest.mark.parametrize(
    ("trainer", "field"),
    [
        ({"numNodes": 0}, "spec.trainer.numNodes"),
        ({"resourcesPerNode": "big"}, "spec.trainer.resourcesPerNode"),
    ],
)
def test_bad_trainer_overrides_are_problems_of_the_trainjob(trainer: dict[str, object], field: str) -> None:
    problem = only_problem(expand(training_runtime(), train_job(**trainer)))
    assert (problem.kind, problem.field) == ("TrainJob", field)
