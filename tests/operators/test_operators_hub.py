"""Which plugin groups which workload type (spec/integrations.md §1.3), and skip-top-owner's dispatch."""

from __future__ import annotations

import pytest
from grouping_builders import expect, group, kube, pod
from kai_ray_operators import HUB_TABLE, PLUGINS, GroupingConfig, GroupVersionKind, InMemoryReader, plugin_id

pytestmark = pytest.mark.unit

NO_OBJECTS = InMemoryReader([])


def _karta(group_: str, version: str, kind: str, name: str = "k") -> dict[str, object]:
    labels = {"run.ai/karta-group": group_, "run.ai/karta-version": version, "run.ai/karta-kind": kind}
    return {"apiVersion": "run.ai/v1alpha1", "kind": "Karta", "metadata": {"name": name, "labels": labels}}


@pytest.mark.parametrize(
    ("gvk", "plugin"),
    [
        (("", "v1", "Pod"), "podjob"),
        (("apps", "v1", "Deployment"), "deployment"),
        (("apps", "v1", "StatefulSet"), "default"),
        (("batch", "v1", "CronJob"), "cronjob"),
        (("ray.io", "v1alpha1", "RayService"), "ray-service"),
        (("kubeflow.org", "v2beta1", "MPIJob"), "mpi"),
        (("trainer.kubeflow.org", "v1alpha1", "TrainJob"), "skiptopowner"),
        (("argoproj.io", "v1alpha1", "Workflow"), "skiptopowner"),
        (("run.ai", "v2", "InferenceWorkload"), "skiptopowner"),  # registered for every version
        (("nvidia.com", "v1beta1", "DynamoGraphDeployment"), "skiptopowner"),
        (("jobset.x-k8s.io", "v1", "JobSet"), "default"),  # a version KAI does not know yet
        (("trainer.kubeflow.org", "v1", "TrainJob"), "default"),
        (("apps", "v1", "DaemonSet"), "default"),
    ],
)
def test_plugin_by_top_owner_type(gvk: tuple[str, str, str], plugin: str) -> None:
    assert plugin_id(GroupVersionKind(*gvk), NO_OBJECTS, GroupingConfig()) == plugin


def test_every_table_entry_names_a_plugin_and_every_plugin_is_reachable() -> None:
    assert set(HUB_TABLE.values()) <= set(PLUGINS)
    assert set(PLUGINS) - set(HUB_TABLE.values()) == {"karta", "spark"}  # by Karta, and by podjob


def test_karta_only_for_unknown_types_and_only_when_enabled() -> None:
    custom = GroupVersionKind("example.com", "v1", "Trainer")
    reader = InMemoryReader([_karta("example.com", "v1", "Trainer"), _karta("apps", "v1", "StatefulSet")])
    assert plugin_id(custom, reader, GroupingConfig()) == "karta"
    assert plugin_id(custom, reader, GroupingConfig(karta_fallback=False)) == "default"
    assert plugin_id(GroupVersionKind("apps", "v1", "StatefulSet"), reader, GroupingConfig()) == "default"


def test_two_kartas_for_one_type_are_ambiguous() -> None:
    custom = GroupVersionKind("example.com", "v1", "Trainer")
    reader = InMemoryReader([_karta(*("example.com", "v1", "Trainer"), name=name) for name in ("a", "b")])
    assert plugin_id(custom, reader, GroupingConfig()) == "default"


def test_argo_step_is_grouped_alone_with_the_workflow_metadata() -> None:
    workflow = kube("argoproj.io/v1alpha1", "Workflow", "wf", labels={"kai.scheduler/queue": "team-a"})
    step = pod("wf-abc-123", owner=workflow)
    expect(
        group(step, workflow),
        name="pg-wf-abc-123-wf-abc-123-uid",
        owner="Pod",
        queue="team-a",
        min_available=1,
    )


def test_trainjob_is_grouped_by_its_jobset_with_trainjob_labels() -> None:
    train_job = kube(
        "trainer.kubeflow.org/v1alpha1",
        "TrainJob",
        "tj",
        labels={"kai.scheduler/queue": "team-a"},
        annotations={"kai.scheduler/batch-min-member": "1"},
    )
    jobs = [{"name": "node", "replicas": 2, "template": {"spec": {"parallelism": 1}}}]
    jobset = kube("jobset.x-k8s.io/v1alpha2", "JobSet", "tj", owner=train_job, spec={"replicatedJobs": jobs})
    job = kube("batch/v1", "Job", "tj-node-0", owner=jobset)
    node = pod(
        "tj-node-0-0",
        owner=job,
        labels={"jobset.sigs.k8s.io/replicatedjob-name": "node", "jobset.sigs.k8s.io/job-index": "0"},
    )
    metadata = group(node, train_job, jobset, job)
    expect(metadata, name="pg-tj-tj-uid", owner="JobSet", queue="team-a")
    assert metadata.min_subgroup == 1  # the TrainJob's batch-min-member, overlaid on the JobSet
    assert metadata.subgroup_of("tj-node-0-0") == "node-replica-0"


def test_skip_top_owner_dispatches_by_exact_type_only() -> None:
    wrapper = kube("argoproj.io/v1alpha1", "Workflow", "wf")
    workload = kube("run.ai/v9", "TrainingWorkload", "tw", owner=wrapper)  # wildcard in the hub, not here
    worker = pod("tw-0", owner=workload)
    metadata = group(worker, wrapper, workload)
    assert metadata.owner.kind == "TrainingWorkload"  # the default grouper, not skip-top-owner again
