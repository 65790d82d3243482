"""PodGroup metadata on the wire: the desired object, updates of an existing one, the pod patch (§1.6)."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import pytest
from kai_ray_operators import (
    GroupingConfig,
    OwnerReference,
    PodGroupMetadata,
    SubGroupMetadata,
    TopologyConstraint,
    build_pod_group,
    merge_pod_group,
    pod_patch,
)
from kai_ray_operators.wire import go_duration

pytestmark = pytest.mark.unit

CONFIG = GroupingConfig()
OWNER = OwnerReference("ray.io/v1", "RayCluster", "rc", "u1")


def _metadata(**changes: Any) -> PodGroupMetadata:
    base = PodGroupMetadata(
        name="pg-rc-u1",
        namespace="ml",
        owner=OWNER,
        queue="team-a",
        priority_class_name="train",
        min_available=3,
        labels={"kai.scheduler/queue": "team-a"},
        annotations={"note": "x"},
        subgroups=(SubGroupMetadata("headgroup", 1, pods=("rc-head",)), SubGroupMetadata("gpu", 2)),
    )
    return dataclasses.replace(base, **changes)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        *[(0, "0s"), (30, "30s"), (90, "1m30s"), (300, "5m0s"), (3600, "1h0m0s"), (5400.5, "1h30m0.5s")],
        *[(0.5, "500ms"), (0.0015, "1.5ms"), (2e-6, "2µs"), (3e-9, "3ns"), (-10, "-10s")],
    ],
)
def test_durations_are_written_as_go_prints_them(seconds: float, text: str) -> None:
    assert go_duration(seconds) == text


def test_build_writes_min_member_owner_and_subgroups() -> None:
    wire = build_pod_group(_metadata(preemption_delay=300.0, preemptibility="preemptible"))
    assert wire["apiVersion"] == "scheduling.run.ai/v2alpha2"
    assert wire["metadata"]["ownerReferences"] == [
        {"apiVersion": "ray.io/v1", "kind": "RayCluster", "name": "rc", "uid": "u1"}
    ]
    assert wire["spec"] == {
        "queue": "team-a",
        "priorityClassName": "train",
        "minMember": 3,
        "preemptibility": "preemptible",
        "preemptionDelay": "5m0s",
        "topologyConstraint": {},
        "subGroups": [{"name": "headgroup", "minMember": 1}, {"name": "gpu", "minMember": 2}],
    }


def test_min_subgroup_replaces_min_member_and_parents_get_no_min_member() -> None:
    leaf_topology = TopologyConstraint("rack-topo", required_level="rack")
    subgroups = (
        SubGroupMetadata("workers", min_subgroup=2),
        SubGroupMetadata("workers-replica-0", 4, parent="workers", topology=leaf_topology),
        SubGroupMetadata("grove-parent"),  # a Grove constraint group: every child required
        SubGroupMetadata("clique", 1, parent="grove-parent"),
    )
    spec = build_pod_group(_metadata(min_subgroup=1, min_available=0, subgroups=subgroups))["spec"]
    assert "minMember" not in spec and spec["minSubGroup"] == 1
    assert spec["subGroups"] == [
        {"name": "workers", "minSubGroup": 2},
        {
            "name": "workers-replica-0",
            "minMember": 4,
            "parent": "workers",
            "topologyConstraint": {"topology": "rack-topo", "requiredTopologyLevel": "rack"},
        },
        {"name": "grove-parent"},
        {"name": "clique", "minMember": 1, "parent": "grove-parent"},
    ]


def _existing(desired: dict[str, Any], **spec: Any) -> dict[str, Any]:
    existing = copy.deepcopy(desired)
    existing["metadata"]["resourceVersion"] = "7"
    existing["spec"].update(spec)
    return existing


def test_an_identical_podgroup_needs_no_update() -> None:
    desired = build_pod_group(_metadata())
    update = merge_pod_group(_existing(desired), desired, CONFIG)
    assert not update.changed


def test_fields_owned_by_others_and_the_queue_are_carried_over() -> None:
    desired = build_pod_group(_metadata(queue="new-queue"))
    existing = _existing(desired, queue="team-a", markUnschedulable=False, schedulingBackoff=1)
    update = merge_pod_group(existing, desired, CONFIG)
    assert not update.changed  # the queue is frozen at creation; the rest belongs to other components


def test_a_spec_change_updates_spec_and_keeps_the_resource_version() -> None:
    desired = build_pod_group(_metadata(min_available=5))
    existing = _existing(build_pod_group(_metadata()), markUnschedulable=False)
    update = merge_pod_group(existing, desired, CONFIG)
    assert update.changed
    assert update.pod_group["spec"]["minMember"] == 5
    assert update.pod_group["spec"]["markUnschedulable"] is False
    assert update.pod_group["metadata"]["resourceVersion"] == "7"


def test_labels_and_annotations_are_only_added() -> None:
    desired = build_pod_group(_metadata(labels={"team": "a"}))
    existing = _existing(build_pod_group(_metadata()))
    existing["metadata"]["labels"]["kept"] = "yes"
    update = merge_pod_group(existing, desired, CONFIG)
    assert update.changed
    assert update.pod_group["metadata"]["labels"] == {
        "kai.scheduler/queue": "team-a",
        "kept": "yes",
        "team": "a",
    }


def test_node_pool_and_queue_labels_stay_as_they_were() -> None:
    pool = CONFIG.node_pool_label_key
    desired = build_pod_group(_metadata(labels={pool: "new-pool", "kai.scheduler/queue": "other"}))
    existing = _existing(build_pod_group(_metadata()))
    update = merge_pod_group(existing, desired, CONFIG)
    assert not update.changed  # no node pool before: none added; the queue label keeps its value
    existing["metadata"]["labels"][pool] = "old-pool"
    assert merge_pod_group(existing, desired, CONFIG).pod_group["metadata"]["labels"][pool] == "old-pool"


def test_an_empty_root_topology_keeps_the_existing_one() -> None:
    desired = build_pod_group(_metadata())
    existing = _existing(desired, topologyConstraint={"topology": "t", "requiredTopologyLevel": "rack"})
    assert not merge_pod_group(existing, desired, CONFIG).changed
    replaced = build_pod_group(_metadata(topology=TopologyConstraint("t2", required_level="zone")))
    update = merge_pod_group(existing, replaced, CONFIG)
    assert update.pod_group["spec"]["topologyConstraint"] == {
        "topology": "t2",
        "requiredTopologyLevel": "zone",
    }


def test_pod_patch_sets_group_and_leaf_once() -> None:
    metadata = _metadata()
    pod = {"metadata": {"name": "rc-head", "labels": {}, "annotations": {}}}
    patch = pod_patch(pod, metadata)
    assert patch == {
        "metadata": {
            "annotations": {"pod-group-name": "pg-rc-u1"},
            "labels": {"kai.scheduler/subgroup-name": "headgroup"},
        }
    }
    pod["metadata"]["annotations"] |= patch["metadata"]["annotations"]
    pod["metadata"]["labels"] |= patch["metadata"]["labels"]
    assert pod_patch(pod, metadata) is None
    worker = {"metadata": {"name": "rc-worker-1"}}
    assert pod_patch(worker, metadata) == {"metadata": {"annotations": {"pod-group-name": "pg-rc-u1"}}}
