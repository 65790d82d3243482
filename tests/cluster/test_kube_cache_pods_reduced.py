"""The cache keeps of the scheduler's pods their metadata and what the pod models declare; the
rest (images, commands, environment values, the API server's defaults, most of the status) no
one reads, and a burst of pods held it three times over (issue 35)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from manifest_builders import node, pod, podgroup, queue

from kai_ray.api.manifests import ManifestCollector, validate_object
from kai_ray.cluster.kube.cache import ClusterCache
from kai_ray.cluster.kube.snapshot import CacheReader, snapshot
from kai_ray.convert import cluster_from_manifest_set

pytestmark = pytest.mark.unit


def as_the_api_server_sends(obj: dict[str, Any], version: str) -> dict[str, Any]:
    """`obj` with what the API server adds to a pod and nothing reads."""
    served = json.loads(json.dumps(obj))
    served["metadata"] |= {"resourceVersion": version, "uid": f"uid-{version}", "generation": 1}
    served["metadata"]["managedFields"] = [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}]
    spec = served["spec"]
    spec |= {"restartPolicy": "Always", "dnsPolicy": "ClusterFirst", "securityContext": {}, "priority": 0}
    for container in spec["containers"]:
        container |= {
            "image": "registry.example/trainer:1.0",
            "command": ["python", "train.py"],
            "args": ["--epochs", "90"],
            "env": [
                {"name": "CONFIG", "value": "x" * 10_000},
                {"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "mode"}}},
            ],
            "volumeMounts": [{"name": "data", "mountPath": "/data"}],
            "terminationMessagePath": "/dev/termination-log",
        }
    spec["volumes"] = [{"name": "data", "emptyDir": {}}]
    served["status"] = {"phase": "Pending", "qosClass": "Burstable", "conditions": [{"type": "PodScheduled"}]}
    return served


def stored(cache: ClusterCache, name: str) -> dict[str, Any]:
    found = cache.get("Pod", "team-a", name)
    assert found is not None
    return found


def test_a_pod_keeps_its_metadata_and_the_fields_the_models_declare() -> None:
    cache = ClusterCache(None)
    served = as_the_api_server_sends(pod("trainer", gpus=2, group="pg", nodeSelector={"zone": "a"}), "7")
    cache.apply_event("ADDED", "Pod", served)
    kept = stored(cache, "trainer")
    assert kept["metadata"] == {k: v for k, v in served["metadata"].items() if k != "managedFields"}
    assert kept["spec"] == {
        "schedulerName": "kai-scheduler",
        "containers": [
            {
                "name": "main",
                "resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"nvidia.com/gpu": "2"}},
                "env": [
                    {"name": "CONFIG"},
                    {"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "settings"}}},
                ],
            }
        ],
        "nodeSelector": {"zone": "a"},
        "volumes": [{"name": "data"}],
    }
    assert kept["status"] == {"phase": "Pending"}
    assert len(json.dumps(kept)) < len(json.dumps(served)) / 10


def test_new_conditions_on_a_pod_are_no_change_its_phase_is() -> None:
    cache = ClusterCache(None)
    served = as_the_api_server_sends(pod("trainer", gpus=1), "7")
    cache.apply_event("ADDED", "Pod", served)
    generation = cache.generation
    marked = {**served, "metadata": {**served["metadata"], "resourceVersion": "8"}}
    marked["status"] = {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False"}]}
    assert not cache.apply_event("MODIFIED", "Pod", marked)  # the scheduler's own mark
    assert cache.generation == generation
    assert stored(cache, "trainer")["metadata"]["resourceVersion"] == "8"  # the binder binds this one
    running = {
        **marked,
        "metadata": {**marked["metadata"], "resourceVersion": "9"},
        "status": {"phase": "Running"},
    }
    assert cache.apply_event("MODIFIED", "Pod", running)
    assert cache.generation > generation


def test_a_reduced_pod_converts_as_the_whole_pod_does() -> None:
    """What the scheduler makes of the cache is what it makes of the same objects as manifests."""
    cache = ClusterCache(None)
    objects = [
        queue("team-a", gpu=8),
        node("n1", gpus=8),
        podgroup("pg", minMember=2),
        *(as_the_api_server_sends(pod(f"w{i}", gpus=1, group="pg"), str(10 + i)) for i in range(2)),
    ]
    for obj in objects:  # stamped, so that neither side orders them by where they were read
        obj["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z"
    for index, obj in enumerate(objects):
        served = (
            obj
            if obj["kind"] == "Pod"
            else {**obj, "metadata": {**obj["metadata"], "resourceVersion": str(index)}}
        )
        cache.apply_event("ADDED", obj["kind"], served)
    from_cache, problems = snapshot(cache, now=0.0)
    collector = ManifestCollector()
    for obj in objects:
        model, _ = validate_object(obj, "test.yaml")
        assert model is not None
        collector.add(model, "test.yaml")
    from_manifests, _ = cluster_from_manifest_set(collector.result, now=0.0)
    assert problems == []
    assert from_cache.jobs == from_manifests.jobs and from_cache.nodes == from_manifests.nodes


def test_a_podgroup_whose_status_alone_changed_is_neither_validated_nor_converted_again() -> None:
    cache = ClusterCache(None)
    group = podgroup("pg", minMember=1)
    for index, obj in enumerate(
        [queue("team-a", gpu=8), node("n1", gpus=8), group, pod("w", gpus=1, group="pg")]
    ):
        cache.apply_event(
            "ADDED", obj["kind"], {**obj, "metadata": {**obj["metadata"], "resourceVersion": str(index)}}
        )
    reader = CacheReader("kai-scheduler")
    first, _ = reader.read(cache, now=0.0)
    explained = {**group, "metadata": {**group["metadata"], "resourceVersion": "10"}}
    explained["status"] = {
        "schedulingConditions": [{"type": "UnschedulableOnNodePool", "message": "no room"}]
    }
    assert cache.apply_event("MODIFIED", "PodGroup", explained)  # the writers read the stored status
    second, _ = reader.read(cache, now=0.0)
    assert second.jobs[0] is first.jobs[0]
    resized = {**explained, "metadata": {**group["metadata"], "resourceVersion": "11"}}
    resized["spec"] = {**group["spec"], "minMember": 2}
    cache.apply_event("MODIFIED", "PodGroup", resized)
    third, _ = reader.read(cache, now=0.0)
    assert third.jobs[0] is not first.jobs[0]


def test_a_queue_whose_status_alone_changed_converts_no_podgroup_again() -> None:
    """The status writer puts a queue's allocation in its status after a cycle that moved it;
    every PodGroup's job would be converted again if that were a change of the queue tree."""
    cache = ClusterCache(None)
    team = queue("team-a", gpu=8)
    for index, obj in enumerate(
        [team, node("n1", gpus=8), podgroup("pg", minMember=1), pod("w", gpus=1, group="pg")]
    ):
        cache.apply_event(
            "ADDED", obj["kind"], {**obj, "metadata": {**obj["metadata"], "resourceVersion": str(index)}}
        )
    reader = CacheReader("kai-scheduler")
    first, _ = reader.read(cache, now=0.0)
    counted = {**team, "metadata": {**team["metadata"], "resourceVersion": "10"}}
    counted["status"] = {"allocated": {"nvidia.com/gpu": "1"}}
    assert cache.apply_event("MODIFIED", "Queue", counted)
    second, _ = reader.read(cache, now=0.0)
    assert second.jobs[0] is first.jobs[0]
    assert second.queues == first.queues
    smaller = {**counted, "metadata": {**team["metadata"], "resourceVersion": "11"}}
    smaller["spec"] = {**team["spec"], "priority": 7}
    cache.apply_event("MODIFIED", "Queue", smaller)
    third, _ = reader.read(cache, now=0.0)
    assert third.jobs[0] is not first.jobs[0]
