"""KubeRay through the whole pipeline: the examples of spec/integrations.md §2.2, pods to wire objects."""

from __future__ import annotations

from typing import Any

import pytest
from grouping_builders import expect, group, kube, pod, priority_class
from kai_ray_operators import GroupingConfig, InMemoryReader, InvalidWorkload, build_pod_group, plan_pod

pytestmark = pytest.mark.unit

IMAGE = "rayproject/ray:2.54.0"


def _template(annotations: dict[str, str] | None = None) -> dict[str, Any]:
    template: dict[str, Any] = {
        "spec": {"schedulerName": "kai-scheduler", "containers": [{"name": "w", "image": IMAGE}]}
    }
    if annotations:
        template["metadata"] = {"annotations": annotations}
    return template


def _ray_cluster(**extra: Any) -> dict[str, Any]:
    """The §2.2 RayCluster: a head, `gpu` (4 replicas, at least 2) and `cpu` (3 replicas)."""
    spec = {
        "headGroupSpec": {"template": _template()},
        "workerGroupSpecs": [
            {
                "groupName": "gpu",
                "replicas": 4,
                "minReplicas": 2,
                "template": _template({"gpu-fraction": "0.5"}),
            },
            {"groupName": "cpu", "replicas": 3, "template": _template()},
        ],
    }
    return kube(
        "ray.io/v1",
        "RayCluster",
        "rc",
        labels={"kai.scheduler/queue": "team-a", "priorityClassName": "inference"},
        spec=spec,
        **extra,
    )


def _ray_pod(name: str, group_name: str, owner: dict[str, Any]) -> dict[str, Any]:
    return pod(name, owner=owner, labels={"ray.io/group": group_name, "ray.io/cluster": "rc"})


def test_raycluster_example_becomes_the_spec_podgroup() -> None:
    cluster = _ray_cluster()
    head = _ray_pod("rc-head-x", "headgroup", cluster)
    metadata = group(head, cluster, priority_class("inference", 125))
    wire = build_pod_group(metadata)
    assert wire["metadata"] == {
        "name": "pg-rc-rc-uid",
        "namespace": "ml",
        "labels": {"kai.scheduler/queue": "team-a", "priorityClassName": "inference"},
        "annotations": {
            "kai.scheduler/top-owner-metadata": (
                "name: rc\nuid: rc-uid\ngroup: ray.io\nversion: v1\nkind: RayCluster\n"
            )
        },
        "ownerReferences": [{"apiVersion": "ray.io/v1", "kind": "RayCluster", "name": "rc", "uid": "rc-uid"}],
    }
    assert wire["spec"] == {
        "queue": "team-a",
        "priorityClassName": "inference",
        "minMember": 6,
        "topologyConstraint": {},
        "subGroups": [
            {"name": "headgroup", "minMember": 1},
            {"name": "gpu", "minMember": 2},
            {"name": "cpu", "minMember": 3},
        ],
    }


def test_each_pod_is_labelled_with_its_node_group() -> None:
    cluster = _ray_cluster()
    reader = InMemoryReader([cluster, priority_class("inference")])
    for name, group_name in (("rc-head-x", "headgroup"), ("rc-gpu-1", "gpu"), ("rc-cpu-2", "cpu")):
        plan = plan_pod(reader, GroupingConfig(), _ray_pod(name, group_name, cluster))
        assert plan is not None and plan.pod_patch is not None
        assert plan.pod_patch["metadata"]["labels"] == {"kai.scheduler/subgroup-name": group_name}
        assert plan.pod_patch["metadata"]["annotations"] == {"pod-group-name": "pg-rc-rc-uid"}


def test_rayjob_podgroup_belongs_to_the_rayjob_and_has_the_live_cluster_shape() -> None:
    job = kube(
        "ray.io/v1",
        "RayJob",
        "rj",
        labels={"kai.scheduler/queue": "team-a"},
        status={"rayClusterName": "rj-x"},
    )
    workers = [{"groupName": "gpu-workers", "replicas": 2, "minReplicas": 1, "template": _template()}]
    cluster = kube(
        "ray.io/v1",
        "RayCluster",
        "rj-x",
        owner=job,
        spec={"headGroupSpec": {"template": _template()}, "workerGroupSpecs": workers},
    )
    metadata = group(_ray_pod("rj-x-gpu-0", "gpu-workers", cluster), job, cluster)
    expect(metadata, name="pg-rj-rj-uid", owner="RayJob", queue="team-a", min_available=2)
    assert [(sub.name, sub.min_available) for sub in metadata.subgroups] == [
        ("headgroup", 1),
        ("gpu-workers", 1),
    ]


def test_rayjob_without_cluster_name_waits_for_the_operator() -> None:
    job = kube("ray.io/v1", "RayJob", "rj")
    with pytest.raises(InvalidWorkload, match="make sure that the ray-operator is up"):
        group(pod("rj-submitter", owner=job), job)


def test_hosts_multiply_and_suspended_or_empty_groups_are_left_out() -> None:
    workers = [
        {"groupName": "tpu", "replicas": 2, "numOfHosts": 4},
        {"groupName": "paused", "replicas": 3, "suspend": True},
        {"groupName": "old-paused", "replicas": 3, "suspended": True},
        {"replicas": 0},
    ]
    cluster = kube("ray.io/v1", "RayCluster", "rc", spec={"headGroupSpec": {}, "workerGroupSpecs": workers})
    metadata = group(_ray_pod("rc-head", "headgroup", cluster), cluster)
    assert [(sub.name, sub.min_available) for sub in metadata.subgroups] == [("headgroup", 1), ("tpu", 8)]
    assert metadata.min_available == 9


def test_ray_priority_label_wins_unchecked() -> None:
    cluster = _ray_cluster(annotations={"x": "y"})
    cluster["metadata"]["labels"]["ray.io/priority-class-name"] = "not-a-class"
    metadata = group(_ray_pod("rc-head", "headgroup", cluster), cluster)
    assert metadata.priority_class_name == "not-a-class"


def test_group_topology_from_the_template_needs_a_topology_name() -> None:
    cluster = _ray_cluster()
    annotations = {"kai.scheduler/topology-required-placement": "rack"}
    cluster["spec"]["workerGroupSpecs"][1]["template"]["metadata"] = {"annotations": annotations}
    with pytest.raises(
        InvalidWorkload, match=r"spec\.workerGroupSpecs\[1\]\.template\.metadata\.annotations"
    ):
        group(_ray_pod("rc-head", "headgroup", cluster), cluster)
    annotations["kai.scheduler/topology"] = "cluster-topology"
    metadata = group(_ray_pod("rc-head", "headgroup", cluster), cluster)
    assert metadata.subgroups[2].topology is not None
    assert metadata.subgroups[2].topology.required_level == "rack"
