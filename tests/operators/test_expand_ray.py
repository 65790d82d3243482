"""KubeRay expansion: RayCluster pods, the clusters and submitters of RayJobs and RayServices (§2)."""

from __future__ import annotations

import pytest
from expand_builders import (
    created,
    expand,
    names,
    one,
    only_problem,
    plans,
    ray_cluster,
    ray_job,
    ray_service,
    subgroups,
    template,
)
from grouping_builders import kube
from kai_ray_operators.identity import stable_uid

pytestmark = pytest.mark.unit

RC_PODS = [
    "rc-head",
    *(f"rc-gpu-worker-{i}" for i in range(4)),
    *(f"rc-cpu-worker-{i}" for i in range(3)),
]


def test_raycluster_pods_carry_kuberay_labels_owner_and_the_integration() -> None:
    expansion = expand(ray_cluster())
    assert expansion.problems == []
    assert names(expansion, "Pod") == RC_PODS
    head, worker = one(expansion, "Pod", "rc-head"), one(expansion, "Pod", "rc-gpu-worker-3")
    assert head["metadata"]["labels"] == {
        "ray.io/cluster": "rc",
        "ray.io/group": "headgroup",
        "ray.io/node-type": "head",
        "kai.scheduler/queue": "team-a",
    }
    assert worker["metadata"]["labels"]["ray.io/group"] == "gpu"
    assert worker["metadata"]["labels"]["ray.io/node-type"] == "worker"
    assert worker["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "1"}
    assert worker["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "ray.io/v1",
            "kind": "RayCluster",
            "name": "rc",
            "uid": "rc-uid",
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    assert worker["metadata"]["uid"] == stable_uid("v1", "Pod", "ml", "rc-gpu-worker-3")
    assert {pod["spec"]["schedulerName"] for pod in created(expansion, "Pod")} == {"kai-scheduler"}


def test_raycluster_groups_as_the_spec_example() -> None:
    cluster = ray_cluster()
    planned = plans(expand(cluster), cluster)
    assert sorted(planned) == sorted(RC_PODS)
    for pod_name, plan in planned.items():
        assert plan.metadata.name == "pg-rc-rc-uid"
        assert plan.metadata.min_available == 6
        assert subgroups(plan) == [
            ("headgroup", 1, None, None),
            ("gpu", 2, None, None),
            ("cpu", 3, None, None),
        ]
        group = "headgroup" if pod_name == "rc-head" else pod_name.split("-")[1]
        assert plan.metadata.subgroup_of(pod_name) == group


def test_without_queue_label_or_our_scheduler_kuberay_pods_are_not_ours() -> None:
    cluster = ray_cluster(labels={"team": "a"})
    for path in (cluster["spec"]["headGroupSpec"], *cluster["spec"]["workerGroupSpecs"]):
        del path["template"]["spec"]["schedulerName"]
    pods = created(expand(cluster), "Pod")
    assert len(pods) == 8
    assert all("schedulerName" not in pod["spec"] for pod in pods)
    assert all("kai.scheduler/queue" not in pod["metadata"]["labels"] for pod in pods)


def test_one_template_naming_our_scheduler_puts_every_pod_on_it() -> None:
    cluster = ray_cluster(labels={})
    cluster["spec"]["workerGroupSpecs"][1]["template"] = template(scheduler=None)
    cluster["spec"]["headGroupSpec"]["template"] = template(scheduler="default-scheduler")
    pods = created(expand(cluster, scheduler_name="kai-scheduler"), "Pod")
    assert {pod["spec"]["schedulerName"] for pod in pods} == {"kai-scheduler"}
    assert all("kai.scheduler/queue" not in pod["metadata"]["labels"] for pod in pods)
    elsewhere = created(expand(cluster, scheduler_name="kai-b"), "Pod")
    schedulers = [pod["spec"].get("schedulerName") for pod in elsewhere[:2]]
    assert schedulers == ["default-scheduler", "kai-scheduler"], "another scheduler: the integration is off"


def test_hosts_suspended_groups_suspended_clusters_and_the_autoscaler() -> None:
    cluster = ray_cluster()
    gpu, cpu = cluster["spec"]["workerGroupSpecs"]
    gpu["numOfHosts"] = 2
    cpu["suspend"] = True
    cluster["spec"]["enableInTreeAutoscaling"] = True
    expansion = expand(cluster)
    assert names(expansion, "Pod") == ["rc-head", *(f"rc-gpu-worker-{i}" for i in range(8))]
    head = one(expansion, "Pod", "rc-head")
    assert [c["name"] for c in head["spec"]["containers"]] == ["main", "autoscaler"]
    assert head["spec"]["containers"][1]["resources"]["requests"] == {"cpu": "500m", "memory": "512Mi"}
    cluster["spec"]["suspend"] = True
    assert expand(cluster).children == []


def test_rayjob_creates_its_cluster_sets_its_status_and_groups_as_the_spec_example() -> None:
    job = ray_job("HTTPMode")
    expansion = expand(job)
    assert expansion.problems == []
    cluster = one(expansion, "RayCluster", "rj-raycluster")
    assert cluster["metadata"]["labels"] == {"kai.scheduler/queue": "team-a"}
    assert cluster["metadata"]["ownerReferences"][0]["kind"] == "RayJob"
    assert cluster["spec"] == job["spec"]["rayClusterSpec"]
    assert [obj["status"] for obj in expansion.updated] == [{"rayClusterName": "rj-raycluster"}]
    assert "status" not in job, "the input is not modified"
    assert names(expansion, "Job") == []
    planned = plans(expansion, job)
    assert sorted(planned) == [
        "rj-raycluster-gpu-workers-worker-0",
        "rj-raycluster-gpu-workers-worker-1",
        "rj-raycluster-head",
    ]
    for plan in planned.values():
        assert (plan.metadata.name, plan.metadata.owner.kind, plan.metadata.queue) == (
            "pg-rj-rj-uid",
            "RayJob",
            "team-a",
        )
        assert plan.metadata.min_available == 2
        assert subgroups(plan) == [("headgroup", 1, None, None), ("gpu-workers", 1, None, None)]


def test_k8s_job_mode_adds_the_submitter_job_on_the_default_scheduler() -> None:
    expansion = expand(ray_job("K8sJobMode"))
    submitter = one(expansion, "Job", "rj")
    assert submitter["metadata"]["ownerReferences"][0]["name"] == "rj"
    assert submitter["spec"]["backoffLimit"] == 2
    pod = one(expansion, "Pod", "rj-0")
    assert "schedulerName" not in pod["spec"]
    assert pod["spec"]["containers"] == [
        {
            "name": "ray-job-submitter",
            "image": "busybox",
            "resources": {
                "limits": {"cpu": "1", "memory": "1Gi"},
                "requests": {"cpu": "500m", "memory": "200Mi"},
            },
        }
    ]
    custom = ray_job("K8sJobMode", submitterPodTemplate=template(), submitterConfig={"backoffLimit": 5})
    custom_expansion = expand(custom)
    assert one(custom_expansion, "Job", "rj")["spec"]["backoffLimit"] == 5
    assert one(custom_expansion, "Pod", "rj-0")["spec"]["schedulerName"] == "kai-scheduler"


def test_sidecar_mode_puts_the_submitter_in_the_head_and_interactive_mode_adds_nothing() -> None:
    sidecar = expand(ray_job("SidecarMode"))
    head = one(sidecar, "Pod", "rj-raycluster-head")
    assert [c["name"] for c in head["spec"]["containers"]] == ["main", "ray-job-submitter"]
    assert names(sidecar, "Job") == []
    interactive = expand(ray_job("InteractiveMode"))
    assert [c["name"] for c in one(interactive, "Pod", "rj-raycluster-head")["spec"]["containers"]] == [
        "main"
    ]
    assert names(interactive, "Job") == []


def test_rayjob_reuses_the_cluster_its_status_or_the_manifests_name() -> None:
    job = ray_job()
    job["status"] = {"rayClusterName": "mine"}
    written = kube("ray.io/v1", "RayCluster", "mine", owner=job, spec=job["spec"]["rayClusterSpec"])
    expansion = expand(job, written)
    assert names(expansion, "RayCluster") == []
    assert expansion.updated == []
    assert names(expansion, "Pod") == ["mine-head", "mine-gpu-workers-worker-0", "mine-gpu-workers-worker-1"]
    unnamed = ray_job()
    exported = kube(
        "ray.io/v1", "RayCluster", "rj-x7k2p", owner=unnamed, spec=unnamed["spec"]["rayClusterSpec"]
    )
    expansion = expand(unnamed, exported)
    assert [obj["status"]["rayClusterName"] for obj in expansion.updated] == ["rj-x7k2p"]
    assert names(expansion, "RayCluster") == []


def test_rayjob_with_a_cluster_selector_creates_no_cluster() -> None:
    job = ray_job("HTTPMode", clusterSelector={"ray.io/cluster": "shared"})
    del job["spec"]["rayClusterSpec"]
    expansion = expand(job)
    assert expansion.children == []
    assert [obj["status"]["rayClusterName"] for obj in expansion.updated] == ["shared"]


def test_suspended_rayjob_creates_nothing() -> None:
    expansion = expand(ray_job(suspend=True))
    assert (expansion.children, expansion.updated, expansion.problems) == ([], [], [])


def test_rayservice_creates_its_active_cluster() -> None:
    service = ray_service()
    expansion = expand(service)
    assert names(expansion, "RayCluster") == ["svc-raycluster"]
    assert [obj["status"] for obj in expansion.updated] == [
        {"activeServiceStatus": {"rayClusterName": "svc-raycluster"}}
    ]
    planned = plans(expansion, service)
    assert len(planned) == 8
    plan = planned["svc-raycluster-head"]
    assert (plan.metadata.name, plan.metadata.queue, plan.metadata.min_available) == (
        "pg-svc-svc-uid",
        "serving",
        6,
    )


def _cluster_with(**group: object) -> dict[str, object]:
    cluster = ray_cluster(name="bad")
    cluster["spec"]["workerGroupSpecs"][0].update(group)
    return cluster


@pytest.mark.parametrize(
    ("workload", "kind", "field", "message"),
    [
        (
            _cluster_with(replicas="x"),
            "RayCluster",
            "spec.workerGroupSpecs[0].replicas",
            "expected an integer, got 'x'",
        ),
        (
            _cluster_with(minReplicas=5),
            "RayCluster",
            "spec.workerGroupSpecs[0].minReplicas",
            "more than replicas 4",
        ),
        (_cluster_with(replicas=-1), "RayCluster", "spec.workerGroupSpecs[0].replicas", "at least 0"),
        (_cluster_with(numOfHosts=0), "RayCluster", "spec.workerGroupSpecs[0].numOfHosts", "at least 1"),
        (_cluster_with(groupName=""), "RayCluster", "spec.workerGroupSpecs[0].groupName", "name is required"),
        (_cluster_with(groupName="cpu"), "RayCluster", "spec.workerGroupSpecs[1].groupName", "defined twice"),
        (
            _cluster_with(template=None),
            "RayCluster",
            "spec.workerGroupSpecs[0].template",
            "pod template is required",
        ),
        (_cluster_with(suspend="yes"), "RayCluster", "spec.workerGroupSpecs[0].suspend", "true or false"),
        (
            ray_job("HTTPMode", rayClusterSpec={"workerGroupSpecs": []}),
            "RayJob",
            "spec.rayClusterSpec.headGroupSpec.template",
            "pod template is required",
        ),
        (ray_job("Batch"), "RayJob", "spec.submissionMode", "unknown mode 'Batch'"),
        (
            ray_job("HTTPMode", rayClusterSpec=None),
            "RayJob",
            "spec.rayClusterSpec",
            "RayCluster spec is required",
        ),
        (
            ray_job("K8sJobMode", submitterPodTemplate={"spec": {"containers": []}}),
            "RayJob",
            "spec.submitterPodTemplate.spec.containers",
            "at least one container",
        ),
        (
            ray_job("SidecarMode", clusterSelector={"ray.io/cluster": "shared"}),
            "RayJob",
            "spec.clusterSelector",
            "SidecarMode",
        ),
    ],
)
def test_a_bad_ray_workload_is_one_problem_and_others_still_expand(
    workload: dict[str, object], kind: str, field: str, message: str
) -> None:
    good = ray_cluster()
    expansion = expand(workload, good)
    problem = only_problem(expansion)
    assert (problem.kind, problem.namespace, problem.field) == (kind, "ml", field)
    assert message in problem.message
    assert names(expansion, "Pod") == RC_PODS
    assert expansion.updated == []
