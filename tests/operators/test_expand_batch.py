"""batch/v1 Job and CronJob expansion, grouped as on a cluster (spec/integrations.md §5.1, §5.2)."""

from __future__ import annotations

from typing import Any

import pytest
from expand_builders import batch_job, cron_job, expand, names, one, only_problem, plans
from grouping_builders import kube
from kai_ray_operators.identity import stable_uid

pytestmark = pytest.mark.unit

BJ_PODS = [f"bj-{i}" for i in range(6)]


def test_job_pods_carry_the_job_labels() -> None:
    expansion = expand(batch_job())
    assert names(expansion, "Pod") == BJ_PODS
    pod = one(expansion, "Pod", "bj-5")
    assert pod["metadata"]["labels"] == {
        "kai.scheduler/queue": "q",
        "batch.kubernetes.io/job-name": "bj",
        "job-name": "bj",
        "batch.kubernetes.io/controller-uid": "bj-uid",
        "controller-uid": "bj-uid",
    }
    assert pod["metadata"]["ownerReferences"][0]["uid"] == "bj-uid"


def test_job_groups_as_the_spec_example() -> None:
    job = batch_job()
    planned = plans(expand(job), job)
    assert sorted(planned) == BJ_PODS
    assert {(p.metadata.name, p.metadata.queue, p.metadata.min_available) for p in planned.values()} == {
        ("pg-bj-bj-uid", "q", 2)
    }


@pytest.mark.parametrize(
    ("spec", "pods"),
    [
        ({"parallelism": 4, "completions": 2}, 2),
        ({"parallelism": None, "completions": None}, 1),
        ({"completions": 0}, 0),
    ],
)
def test_parallelism_defaults_to_one_and_is_capped_by_completions(spec: dict[str, Any], pods: int) -> None:
    job = batch_job(**spec)
    for key in [key for key, value in job["spec"].items() if value is None]:
        del job["spec"][key]
    assert names(expand(job), "Pod") == [f"bj-{i}" for i in range(pods)]


def test_indexed_jobs_label_the_completion_index_and_suspended_jobs_create_nothing() -> None:
    expansion = expand(batch_job(completionMode="Indexed", parallelism=2))
    pod = one(expansion, "Pod", "bj-1")
    assert pod["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"] == "1"
    assert pod["metadata"]["annotations"] == {"batch.kubernetes.io/job-completion-index": "1"}
    assert expand(batch_job(suspend=True)).children == []


def test_cronjob_runs_once_and_groups_by_the_run() -> None:
    cron = cron_job()
    expansion = expand(cron)
    run = one(expansion, "Job", "nightly-0")
    assert run["metadata"]["labels"] == {"kai.scheduler/queue": "team-a"}
    assert run["metadata"]["ownerReferences"][0]["kind"] == "CronJob"
    assert names(expansion, "Pod") == ["nightly-0-0"]
    (plan,) = plans(expansion, cron).values()
    run_uid = stable_uid("batch/v1", "Job", "ml", "nightly-0")
    assert (plan.metadata.name, plan.metadata.owner.kind, plan.metadata.queue) == (
        f"pg-nightly-0-{run_uid}",
        "Job",
        "team-a",
    )
    assert plan.metadata.min_available == 1
    cron["spec"]["suspend"] = True
    assert expand(cron).children == []


def _cron_with(**job_spec: Any) -> dict[str, Any]:
    cron = cron_job()
    cron["metadata"]["name"] = "bad"
    cron["spec"]["jobTemplate"]["spec"].update(job_spec)
    return cron


@pytest.mark.parametrize(
    ("workload", "field", "message"),
    [
        (batch_job(parallelism=-1), "spec.parallelism", "at least 0, got -1"),
        (batch_job(completions="2"), "spec.completions", "expected an integer, got '2'"),
        (batch_job(template=None), "spec.template", "pod template is required"),
        (batch_job(template={"spec": {}}), "spec.template.spec.containers", "at least one container"),
        (batch_job(suspend="no"), "spec.suspend", "true or false"),
        (kube("batch/v1", "CronJob", "bad", spec={"schedule": "@daily"}), "spec.jobTemplate", "Job template"),
        (_cron_with(parallelism="x"), "spec.jobTemplate.spec.parallelism", "expected an integer"),
        (_cron_with(template=None), "spec.jobTemplate.spec.template", "pod template is required"),
    ],
)
def test_a_bad_job_is_one_problem_and_others_still_expand(
    workload: dict[str, Any], field: str, message: str
) -> None:
    good = batch_job()
    good["metadata"]["name"] = "good"
    expansion = expand(workload, good)
    problem = only_problem(expansion)
    assert (problem.kind, problem.field) == (workload["kind"], field)
    assert message in problem.message
    assert names(expansion, "Pod") == [f"good-{i}" for i in range(6)]
