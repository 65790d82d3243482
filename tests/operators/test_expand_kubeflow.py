"""Kubeflow training-operator and mpi-operator expansion, grouped as on a cluster (integrations §3)."""

from __future__ import annotations

from typing import Any

import pytest
from expand_builders import (
    created,
    expand,
    jax_job,
    mpi_job,
    names,
    one,
    only_problem,
    plans,
    pytorch_job,
    subgroups,
    template,
    tf_job,
    xgboost_job,
)
from grouping_builders import kube
from kai_ray_operators.fields import labels_of

pytestmark = pytest.mark.unit

ROLE = "training.kubeflow.org/job-role"


def _roles(expansion: Any) -> dict[str, str | None]:
    return {pod["metadata"]["name"]: labels_of(pod).get(ROLE) for pod in created(expansion, "Pod")}


def test_pytorchjob_pods_and_labels() -> None:
    expansion = expand(pytorch_job())
    assert names(expansion, "Pod") == ["pt-master-0", "pt-worker-0", "pt-worker-1"]
    worker = one(expansion, "Pod", "pt-worker-1")
    assert worker["metadata"]["labels"] == {
        "training.kubeflow.org/job-name": "pt",
        "training.kubeflow.org/replica-type": "worker",
        "training.kubeflow.org/replica-index": "1",
    }
    assert worker["metadata"]["ownerReferences"][0]["kind"] == "PyTorchJob"
    assert worker["spec"]["schedulerName"] == "kai-scheduler"
    assert _roles(expansion) == {"pt-master-0": "master", "pt-worker-0": None, "pt-worker-1": None}


def test_pytorchjob_groups_as_the_spec_example() -> None:
    job = pytorch_job()
    planned = plans(expand(job), job)
    assert sorted(planned) == ["pt-master-0", "pt-worker-0", "pt-worker-1"]
    for pod_name, plan in planned.items():
        assert (plan.metadata.name, plan.metadata.min_available) == ("pg-pt-pt-uid", 3)
        assert subgroups(plan) == [("master", 1, None, None), ("worker", 2, None, None)]
        assert plan.metadata.subgroup_of(pod_name) == pod_name.split("-")[1]


def test_tfjob_roles_and_gang() -> None:
    job = tf_job()
    expansion = expand(job)
    assert names(expansion, "Pod") == [
        "tf-chief-0",
        "tf-ps-0",
        "tf-ps-1",
        *(f"tf-worker-{i}" for i in range(4)),
    ]
    assert [pod for pod, role in _roles(expansion).items() if role] == ["tf-chief-0"]
    planned = plans(expansion, job)
    assert {(p.metadata.name, p.metadata.min_available, p.metadata.subgroups) for p in planned.values()} == {
        ("pg-tf-tf-uid", 7, ())
    }
    del job["spec"]["tfReplicaSpecs"]["Chief"]
    assert [pod for pod, role in _roles(expand(job)).items() if role] == ["tf-worker-0"]


def test_xgboost_and_jax_master_roles() -> None:
    xgb = expand(xgboost_job())
    assert _roles(xgb) == {"xgb-master-0": "master", "xgb-worker-0": None, "xgb-worker-1": None}
    jax = expand(jax_job())
    assert _roles(jax) == {"jax-worker-0": "master", "jax-worker-1": None, "jax-worker-2": None}
    assert {p.metadata.min_available for p in plans(jax, jax_job()).values()} == {3}


def test_replicas_default_to_one_and_a_suspended_job_creates_nothing() -> None:
    job = pytorch_job()
    del job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"]
    assert names(expand(job), "Pod") == ["pt-master-0", "pt-worker-0"]
    job["spec"]["runPolicy"] = {"suspend": True}
    assert expand(job).children == []


def test_mpijob_v1_launcher_is_a_pod_of_the_job() -> None:
    job = mpi_job("v1")
    expansion = expand(job)
    assert names(expansion, "Job") == []
    assert names(expansion, "Pod") == ["mpi-launcher-0", *(f"mpi-worker-{i}" for i in range(4))]
    assert _roles(expansion)["mpi-launcher-0"] == "launcher"
    assert {p.metadata.min_available for p in plans(expansion, job).values()} == {5}


def test_mpijob_v2_launcher_job_and_workers_group_as_the_spec_example() -> None:
    job = mpi_job("v2beta1", launcherCreationPolicy="WaitForWorkersReady")
    expansion = expand(job)
    assert expansion.problems == []
    launcher_job = one(expansion, "Job", "mpi-launcher")
    assert launcher_job["metadata"]["ownerReferences"][0]["kind"] == "MPIJob"
    launcher = one(expansion, "Pod", "mpi-launcher-0")
    assert launcher["metadata"]["ownerReferences"][0]["name"] == "mpi-launcher"
    assert labels_of(launcher)[ROLE] == "launcher"
    assert labels_of(launcher)["training.kubeflow.org/job-name"] == "mpi"
    workers = [f"mpi-worker-{i}" for i in range(4)]
    assert names(expansion, "Pod") == ["mpi-launcher-0", *workers]
    assert {labels_of(one(expansion, "Pod", w))[ROLE] for w in workers} == {"worker"}
    planned = plans(expansion, job)
    assert sorted(planned) == ["mpi-launcher-0", *workers]
    # the launcher exists from the start, so WaitForWorkersReady no longer takes it out of the gang
    assert {(p.metadata.name, p.metadata.min_available) for p in planned.values()} == {("pg-mpi-mpi-uid", 5)}


def test_mpijob_v2_workers_default_to_none() -> None:
    job = mpi_job("v2beta1")
    del job["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"]
    assert names(expand(job), "Pod") == ["mpi-launcher-0"]


def _replicas(kind: str, specs: str, replicas: dict[str, Any]) -> dict[str, Any]:
    return kube("kubeflow.org/v1", kind, "bad", spec={specs: replicas})


@pytest.mark.parametrize(
    ("workload", "field", "message"),
    [
        (
            kube("kubeflow.org/v1", "PyTorchJob", "bad", spec={}),
            "spec.pytorchReplicaSpecs",
            "replica spec map is required",
        ),
        (_replicas("TFJob", "tfReplicaSpecs", {}), "spec.tfReplicaSpecs", "at least one replica type"),
        (
            _replicas(
                "PyTorchJob", "pytorchReplicaSpecs", {"Master": {"replicas": 2, "template": template()}}
            ),
            "spec.pytorchReplicaSpecs.Master.replicas",
            "Master allows one replica, got 2",
        ),
        (
            _replicas("TFJob", "tfReplicaSpecs", {"Worker": {"replicas": -1, "template": template()}}),
            "spec.tfReplicaSpecs.Worker.replicas",
            "at least 0",
        ),
        (
            _replicas("JAXJob", "jaxReplicaSpecs", {"Worker": {"replicas": 2}}),
            "spec.jaxReplicaSpecs.Worker.template",
            "pod template is required",
        ),
        (
            _replicas("XGBoostJob", "xgbReplicaSpecs", {"Worker": {"replicas": 2, "template": template()}}),
            "spec.xgbReplicaSpecs.Master",
            "Master replica spec is required",
        ),
        (
            _replicas("TFJob", "tfReplicaSpecs", {"Worker": "four"}),
            "spec.tfReplicaSpecs.Worker",
            "expected an object, got 'four'",
        ),
    ],
)
def test_a_bad_kubeflow_job_is_one_problem_and_others_still_expand(
    workload: dict[str, Any], field: str, message: str
) -> None:
    expansion = expand(workload, pytorch_job())
    problem = only_problem(expansion)
    assert (problem.kind, problem.name, problem.field) == (workload["kind"], "bad", field)
    assert message in problem.message
    assert names(expansion, "Pod") == ["pt-master-0", "pt-worker-0", "pt-worker-1"]


def test_a_bad_mpi_launcher_template_names_the_mpijob_field() -> None:
    job = mpi_job("v2beta1")
    job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"] = {"spec": {"containers": "none"}}
    problem = only_problem(expand(job))
    assert (problem.kind, problem.field) == (
        "MPIJob",
        "spec.mpiReplicaSpecs.Launcher.template.spec.containers",
    )
