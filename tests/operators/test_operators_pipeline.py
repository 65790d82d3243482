"""`plan_pod`: the reconcile rules around grouping (spec/integrations.md §1.1), and plugins the corpus
exercises only through their unit tests' shapes: batch, Deployment, MPI, LWS, JobSet legacy, Knative,
Grove, AML, RunaiJob, SPOTRequest and the defaults ConfigMap."""

from __future__ import annotations

import json
from typing import Any

import pytest
from grouping_builders import NAMESPACE, ForbiddingReader, expect, group, kube, pod, priority_class
from kai_ray_operators import ConfigMapRef, GroupingConfig, InMemoryReader, plan_pod

pytestmark = pytest.mark.unit

CONFIG = GroupingConfig()


def _plan(the_pod: dict[str, Any], *objects: dict[str, Any]) -> Any:
    return plan_pod(InMemoryReader([the_pod, *objects]), CONFIG, the_pod)


def test_opted_out_pods_and_owners_and_self_grouped_bare_pods_are_left_alone() -> None:
    assert _plan(pod("p", annotations={"kai.scheduler/skip-podgrouper": "true"})) is None
    assert _plan(pod("p", annotations={"pod-group-name": "mine"})) is None
    job = kube("batch/v1", "Job", "j", annotations={"kai.scheduler/skip-podgrouper": "true"})
    assert _plan(pod("j-0", owner=job), job) is None
    not_exactly_true = kube("batch/v1", "Job", "j", annotations={"kai.scheduler/skip-podgrouper": "True"})
    assert _plan(pod("j-0", owner=not_exactly_true), not_exactly_true) is not None


def test_the_podgroup_inherits_the_pods_node_pool_label() -> None:
    plan = _plan(pod("p", labels={"kai.scheduler/node-pool": "pool-a"}))
    assert plan.metadata.labels == {"kai.scheduler/node-pool": "pool-a"}
    assert plan.pod_patch == {"metadata": {"annotations": {"pod-group-name": "pg-p-p-uid"}}}


def test_batch_job_gang_and_cronjob_runs() -> None:
    job = kube(
        "batch/v1", "Job", "bj", annotations={"kai.scheduler/batch-min-member": "2"}, spec={"parallelism": 6}
    )
    expect(
        group(pod("bj-a", owner=job, labels={"kai.scheduler/queue": "q"}), job),
        name="pg-bj-bj-uid",
        min_available=2,
    )
    cron = kube("batch/v1", "CronJob", "nightly", labels={"kai.scheduler/queue": "ignored-here"})
    run = kube("batch/v1", "Job", "nightly-1", owner=cron, labels={"kai.scheduler/queue": "team-a"})
    run["metadata"]["annotations"] = {"kai.scheduler/batch-min-member": "3"}
    metadata = group(pod("nightly-1-x", owner=run), cron, run)
    expect(metadata, name="pg-nightly-1-nightly-1-uid", owner="Job", queue="team-a", min_available=1)


def test_job_reuses_a_legacy_per_pod_podgroup() -> None:
    job = kube("batch/v1", "Job", "bj")
    legacy = kube("scheduling.run.ai/v2alpha2", "PodGroup", "pg-bj-a-bj-uid", spec={})
    metadata = group(pod("bj-a", owner=job), job, legacy)
    assert metadata.name == "pg-bj-a-bj-uid"


def test_deployment_pods_get_their_own_inference_podgroup() -> None:
    deployment = kube("apps/v1", "Deployment", "llm", labels={"kai.scheduler/queue": "serving"})
    replica_set = kube("apps/v1", "ReplicaSet", "llm-5f", owner=deployment)
    metadata = group(pod("llm-5f-x", owner=replica_set), deployment, replica_set)
    expect(
        metadata,
        name="pg-llm-5f-x-llm-5f-x-uid",
        owner="Pod",
        priority_class_name="inference",
        queue="serving",
    )


def _mpi_job() -> dict[str, Any]:
    specs = {"Launcher": {"replicas": 1}, "Worker": {"replicas": 4}}
    spec = {"launcherCreationPolicy": "WaitForWorkersReady", "mpiReplicaSpecs": specs}
    return kube("kubeflow.org/v2beta1", "MPIJob", "mpi", spec=spec)


def test_mpi_waits_for_the_launcher_only_until_it_exists() -> None:
    job = _mpi_job()
    worker = pod("mpi-worker-0", owner=job)
    assert group(worker, job).min_available == 4
    launcher_labels = {"training.kubeflow.org/job-name": "mpi", "training.kubeflow.org/job-role": "launcher"}
    launcher = pod("mpi-launcher", labels=launcher_labels)
    assert group(worker, job, launcher).min_available == 5
    launcher["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert group(worker, job, launcher).min_available == 4


def _lws(**spec: Any) -> dict[str, Any]:
    template = {"size": 4, "workerTemplate": {}}
    return kube(
        "leaderworkerset.x-k8s.io/v1",
        "LeaderWorkerSet",
        "vllm",
        spec={"leaderWorkerTemplate": template, **spec},
    )


def test_lws_group_per_replica_with_leader_and_workers() -> None:
    lws = _lws()
    leader_set = kube("apps/v1", "StatefulSet", "vllm", owner=lws)
    labels = {"leaderworkerset.sigs.k8s.io/group-index": "1", "leaderworkerset.sigs.k8s.io/worker-index": "0"}
    metadata = group(pod("vllm-1", owner=leader_set, labels=labels), lws, leader_set)
    assert (metadata.name, metadata.min_available) == ("pg-vllm-vllm-uid-group-1", 4)
    assert [(sub.name, sub.min_available, sub.pods) for sub in metadata.subgroups] == [
        ("leader", 1, ("vllm-1",)),
        ("workers", 3, ()),
    ]


def test_lws_leader_ready_gangs_the_leader_alone_until_it_is_scheduled() -> None:
    lws = _lws(startupPolicy="LeaderReady")
    labels = {"leaderworkerset.sigs.k8s.io/worker-index": "0"}
    leader = pod("vllm-0", owner=lws, labels=labels)
    metadata = group(leader, lws)
    assert metadata.min_available == 1
    assert [sub.name for sub in metadata.subgroups] == ["leader"]
    leader["spec"]["nodeName"] = "node-1"
    assert group(leader, lws).min_available == 4


def test_jobset_in_order_legacy_podgroups_stay_per_replicated_job() -> None:
    jobs = [{"name": "driver", "replicas": 1}, {"name": "workers", "replicas": 2}]
    jobset = kube(
        "jobset.x-k8s.io/v1alpha2",
        "JobSet",
        "js",
        spec={"replicatedJobs": jobs, "startupPolicy": {"startupPolicyOrder": "InOrder"}},
    )
    legacy = kube("scheduling.run.ai/v2alpha2", "PodGroup", "pg-js-js-uid-driver", spec={"minMember": 1})
    labels = {"jobset.sigs.k8s.io/replicatedjob-name": "workers", "jobset.sigs.k8s.io/job-index": "1"}
    metadata = group(pod("js-workers-1-0", owner=jobset, labels=labels), jobset, legacy)
    assert (metadata.name, metadata.min_available, metadata.subgroups) == ("pg-js-js-uid-workers", 1, ())


def _knative(min_scale: str | None) -> tuple[dict[str, Any], dict[str, Any]]:
    service = kube("serving.knative.dev/v1", "Service", "svc", labels={"kai.scheduler/queue": "serving"})
    annotations = {"autoscaling.knative.dev/min-scale": min_scale} if min_scale else None
    revision = kube(
        "serving.knative.dev/v1",
        "Revision",
        "svc-001",
        labels={"kai.scheduler/queue": "rev-q"},
        annotations=annotations,
    )
    return service, revision


def test_knative_gangs_a_revision_by_min_scale() -> None:
    service, revision = _knative("3")
    the_pod = pod("svc-001-x", owner=service, labels={"serving.knative.dev/revision": "svc-001"})
    metadata = group(the_pod, service, revision)
    expect(metadata, name="pg-svc-001-svc-001-uid", owner="Revision", min_available=3, queue="rev-q")
    per_pod = group(the_pod, service, revision, config=GroupingConfig(gang_schedule_knative=False))
    expect(
        per_pod,
        name="pg-svc-001-x-svc-001-x-uid",
        owner="Pod",
        min_available=1,
        priority_class_name="inference",
    )


def test_knative_revision_already_grouped_per_pod_keeps_that() -> None:
    service, revision = _knative("bad")
    revision_label = {"serving.knative.dev/revision": "svc-001"}
    others = [
        pod(name, labels=revision_label, annotations={"pod-group-name": f"pg-{name}"})
        for name in ("old-a", "old-b")
    ]
    the_pod = pod("svc-001-x", owner=service, labels=revision_label)
    assert group(the_pod, service, revision, *others).owner.kind == "Pod"
    assert group(the_pod, service, revision).min_available == 1


def test_grove_mirrors_the_podgang() -> None:
    clique_set = kube("grove.io/v1alpha1", "PodCliqueSet", "pcs", labels={"team": "a"})
    references = [
        {"namespace": NAMESPACE, "name": "pcs-0-prefill-0"},
        {"namespace": NAMESPACE, "name": "pcs-0-prefill-1"},
    ]
    gang_spec = {
        "priorityClassName": "inference",
        "topologyConstraint": {"packConstraint": {"required": "zone"}},
        "topologyConstraintGroupConfigs": [
            {
                "name": "tier",
                "podGroupNames": ["prefill"],
                "topologyConstraint": {"packConstraint": {"preferred": "rack"}},
            }
        ],
        "podgroups": [
            {"name": "prefill", "minReplicas": 2, "podReferences": references},
            {"name": "decode", "minReplicas": 1, "podReferences": []},
        ],
    }
    gang = kube(
        "scheduler.grove.io/v1alpha1",
        "PodGang",
        "pcs-0",
        annotations={"grove.io/topology-name": "topo"},
        spec=gang_spec,
    )
    clique = kube("grove.io/v1alpha1", "PodClique", "pcs-0-prefill", owner=clique_set)
    metadata = group(
        pod(
            "pcs-0-prefill-0",
            owner=clique,
            labels={"grove.io/podgang": "pcs-0", "kai.scheduler/queue": "team-a"},
        ),
        clique_set,
        clique,
        gang,
    )
    expect(metadata, name="pg-pcs-0-pcs-0-uid", owner="PodGang", min_available=3)
    assert metadata.labels["team"] == "a"  # the PodCliqueSet's labels fill what the PodGang lacks
    assert (metadata.priority_class_name, metadata.queue, metadata.topology.required_level) == (
        "inference",
        "team-a",
        "zone",
    )
    tier, prefill, decode = metadata.subgroups
    assert (tier.name, tier.min_available, tier.topology and tier.topology.preferred_level) == (
        "tier",
        0,
        "rack",
    )
    assert (prefill.parent, prefill.min_available, prefill.pods) == (
        "tier",
        2,
        ("pcs-0-prefill-0", "pcs-0-prefill-1"),
    )
    assert (decode.parent, decode.min_available) == (None, 1)


def test_aml_runaijob_and_spotrequest() -> None:
    aml = kube(
        "amlarc.azureml.com/v1alpha1",
        "AmlJob",
        "aml",
        spec={"job": {"options": {"envs": {"AZUREML_NODE_COUNT": 3}}}},
    )
    assert group(pod("aml-0", owner=aml), aml).min_available == 3
    runai = kube("run.ai/v1", "RunaiJob", "train")
    assert group(pod("train-abc12", owner=runai), runai).name == "pg-train-train-uid"
    spot = kube("egx.nvidia.io/v1", "SPOTRequest", "spot")
    assert group(pod("spot-0", owner=spot), spot).priority_class_name == "inference"


def test_defaults_configmap_gives_priority_and_preemptibility_per_kind() -> None:
    types = [
        {
            "typeName": "Workflow",
            "group": "argoproj.io",
            "priorityName": "build",
            "preemptibility": "preemptible",
        }
    ]
    config_map = kube("v1", "ConfigMap", "defaults", namespace="kai", data={"types": json.dumps(types)})
    workflow = kube("argoproj.io/v1alpha1", "Workflow", "wf", labels={"priorityClassName": "train"})
    config = GroupingConfig(defaults_config_map=ConfigMapRef("defaults", "kai"))
    metadata = group(
        pod("wf-1", owner=workflow),
        workflow,
        config_map,
        priority_class("build"),
        priority_class("train"),
        config=config,
    )
    # The Workflow's kind default is applied before its own labels are overlaid, so it wins (§1.7).
    assert (metadata.priority_class_name, metadata.preemptibility) == ("build", "preemptible")


def test_an_unreadable_owner_is_said_and_the_pod_is_grouped_by_the_owner_below_it() -> None:
    """KAI groups by the last owner it could read; the user hears which owner it could not."""
    deployment = kube("apps/v1", "Deployment", "web")
    replica_set = kube("apps/v1", "ReplicaSet", "web-7d9", owner=deployment)
    the_pod = pod("web-7d9-x", owner=replica_set)
    reader = ForbiddingReader([deployment, replica_set, the_pod], "Deployment")
    plan = plan_pod(reader, CONFIG, the_pod)
    assert plan.metadata.owner.kind == "ReplicaSet"
    assert plan.notices == (
        f"may not read its owner Deployment web (403): grouped by ReplicaSet {NAMESPACE}/web-7d9 instead",
    )
    assert _plan(the_pod, deployment, replica_set).notices == ()


def test_a_pod_queue_label_the_top_owner_overrides_is_said() -> None:
    job = kube("batch/v1", "Job", "j", labels={"kai.scheduler/queue": "team-a"})
    overridden = _plan(pod("j-0", owner=job, labels={"kai.scheduler/queue": "team-b"}), job)
    assert overridden.metadata.queue == "team-a"  # KAI's rule: the top owner's label wins
    assert overridden.notices == (
        f"its kai.scheduler/queue label 'team-b' differs from 'team-a' on Job {NAMESPACE}/j,"
        " which is the one used",
    )
    agreeing = _plan(pod("j-0", owner=job, labels={"kai.scheduler/queue": "team-a"}), job)
    assert agreeing.notices == ()
    assert _plan(pod("alone", labels={"kai.scheduler/queue": "team-b"})).notices == ()
