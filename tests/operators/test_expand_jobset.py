"""JobSet expansion: a Job per replica of each replicated job, their pods, grouped as on a cluster (§7)."""

from __future__ import annotations

from typing import Any

import pytest
from expand_builders import expand, jobset, names, one, only_problem, plans, subgroups, template
from kai_ray_operators.fields import labels_of

pytestmark = pytest.mark.unit

JOBS = ["js-driver-0", "js-workers-0", "js-workers-1"]
PODS = ["js-driver-0-0", *(f"js-workers-{k}-{i}" for k in range(2) for i in range(4))]


def test_jobs_and_pods_carry_the_jobset_labels() -> None:
    expansion = expand(jobset())
    assert names(expansion, "Job") == JOBS
    assert names(expansion, "Pod") == PODS
    job = one(expansion, "Job", "js-workers-1")
    assert job["metadata"]["ownerReferences"][0]["kind"] == "JobSet"
    labels = {
        "jobset.sigs.k8s.io/jobset-name": "js",
        "jobset.sigs.k8s.io/replicatedjob-name": "workers",
        "jobset.sigs.k8s.io/job-index": "1",
    }
    assert job["metadata"]["labels"] == labels
    pod = one(expansion, "Pod", "js-workers-1-3")
    assert labels.items() <= labels_of(pod).items()
    assert pod["metadata"]["ownerReferences"][0]["name"] == "js-workers-1"


def test_jobset_groups_as_the_spec_example() -> None:
    workload = jobset()
    planned = plans(expand(workload), workload)
    assert sorted(planned) == sorted(PODS)
    for pod_name, plan in planned.items():
        assert (plan.metadata.name, plan.metadata.min_subgroup) == ("pg-js-js-uid", 2)
        assert subgroups(plan) == [
            ("driver", 0, 1, None),
            ("driver-replica-0", 1, None, "driver"),
            ("workers", 0, 2, None),
            ("workers-replica-0", 4, None, "workers"),
            ("workers-replica-1", 4, None, "workers"),
        ]
        job = pod_name.rsplit("-", 1)[0]
        assert plan.metadata.subgroup_of(pod_name) == f"{job.split('-')[1]}-replica-{job.split('-')[2]}"


def test_a_suspended_jobset_creates_nothing_and_replicas_default_to_one() -> None:
    assert expand(jobset(suspend=True)).children == []
    workload = jobset()
    del workload["spec"]["replicatedJobs"][1]["replicas"]
    assert names(expand(workload), "Job") == ["js-driver-0", "js-workers-0"]


def _jobset_with(index: int, **replicated: Any) -> dict[str, Any]:
    workload = jobset()
    workload["metadata"]["name"] = "bad"
    workload["spec"]["replicatedJobs"][index].update(replicated)
    return workload


@pytest.mark.parametrize(
    ("workload", "field", "message"),
    [
        (jobset(replicatedJobs=[]), "spec.replicatedJobs", "at least one replicated job"),
        (_jobset_with(0, name=None), "spec.replicatedJobs[0].name", "name is required"),
        (_jobset_with(1, name="driver"), "spec.replicatedJobs[1].name", "'driver' is used twice"),
        (_jobset_with(1, replicas=-1), "spec.replicatedJobs[1].replicas", "at least 0"),
        (_jobset_with(0, template=None), "spec.replicatedJobs[0].template", "Job template is required"),
        (
            _jobset_with(1, template={"spec": {"parallelism": "x", "template": template()}}),
            "spec.replicatedJobs[1].template.spec.parallelism",
            "expected an integer, got 'x'",
        ),
        (
            _jobset_with(0, template={"spec": {"parallelism": 1}}),
            "spec.replicatedJobs[0].template.spec.template",
            "pod template is required",
        ),
    ],
)
def test_a_bad_jobset_is_one_problem_and_others_still_expand(
    workload: dict[str, Any], field: str, message: str
) -> None:
    expansion = expand(workload, jobset())
    problem = only_problem(expansion)
    assert (problem.kind, problem.field) == ("JobSet", field)
    assert message in problem.message
    assert names(expansion, "Pod") == PODS
