"""A cycle writes the status of at most so many jobs, the rest in the cycles after it, and a job
already explained as the plan explains it costs no call at all (issue 35: a burst of jobs turned
pending held up the binds of the cycles after it for minutes)."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from kai_ray.cluster.kube.events import EventWriter
from kai_ray.cluster.kube.status import PodGroupRef, StatusWriter
from kai_ray.engine.plan import Plan, TaskState
from kai_ray.engine.reasons import PendingCause, PendingReason
from kai_ray.model.objects import TaskStatus

pytestmark = pytest.mark.kube

GROUP, VERSION = "scheduling.run.ai", "v2alpha2"
JOBS = 5


def podgroup_body(name: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "PodGroup",
        "metadata": {"name": name},
        "spec": {"queue": "default-queue", "minMember": 1},
    }


def pod_body(name: str, group: str) -> dict[str, Any]:
    container = {"name": "main", "image": "busybox", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": {"pod-group-name": group}},
        "spec": {"schedulerName": "kai-scheduler", "containers": [container]},
    }


def refs(custom: client.CustomObjectsApi, namespace: str) -> dict[str, PodGroupRef]:
    """Every PodGroup of the namespace as the scheduler's cache would hand it to the writer."""
    listing = custom.list_namespaced_custom_object(GROUP, VERSION, namespace, "podgroups")["items"]
    return {f"{namespace}/{pg['metadata']['name']}": PodGroupRef.from_object(pg) for pg in listing}


def test_a_cycle_writes_at_most_max_jobs_and_skips_the_jobs_already_explained(
    kube_api: Any, namespace: str
) -> None:
    core, custom = client.CoreV1Api(kube_api), client.CustomObjectsApi(kube_api)
    pending = TaskState(TaskStatus.PENDING, None, (), 0.0)
    reason = PendingReason(PendingCause.NO_ROOM, "gang needs 1 more pods, only 0 fit")
    for index in range(JOBS):
        custom.create_namespaced_custom_object(
            GROUP, VERSION, namespace, "podgroups", podgroup_body(f"pg-{index}")
        )
        core.create_namespaced_pod(namespace, pod_body(f"p-{index}", f"pg-{index}"))
    keys = [f"{namespace}/pg-{index}" for index in range(JOBS)]
    plan = Plan(
        pending_reasons=dict.fromkeys(keys, reason),
        tasks={(key, f"p-{index}"): pending for index, key in enumerate(keys)},
    )
    events = EventWriter(kube_api)
    writer = StatusWriter(kube_api, recorder=events)
    written: list[list[str]] = []
    left: list[int] = []
    for _ in range(4):
        result = writer.write_podgroup_status(plan, refs(custom, namespace), max_jobs=2)
        assert result.ok, result.errors
        written.append(sorted(result.conditions_set))  # written concurrently
        left.append(result.left)
    assert written == [keys[:2], keys[2:4], keys[4:], []]  # in key order, each job once
    assert left == [3, 1, 0, 0]
    last = writer.write_podgroup_status(plan, refs(custom, namespace), max_jobs=2)
    assert (last.conditions_set, last.events, last.pods_marked, last.left) == ([], 0, 0, 0)


def test_a_job_whose_write_keeps_failing_does_not_hold_up_the_others(kube_api: Any, namespace: str) -> None:
    """The calls take turns from where the last one left off: a PodGroup the API server refuses
    (here, one the cache still shows but that is gone) is tried again only after the others."""
    core, custom = client.CoreV1Api(kube_api), client.CustomObjectsApi(kube_api)
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "podgroups", podgroup_body("b-real"))
    core.create_namespaced_pod(namespace, pod_body("p", "b-real"))
    known = refs(custom, namespace)
    gone = f"{namespace}/a-gone"
    known[gone] = PodGroupRef(namespace, "a-gone")
    reason = PendingReason(PendingCause.NO_ROOM, "gang needs 1 more pods, only 0 fit")
    pending = TaskState(TaskStatus.PENDING, None, (), 0.0)
    real = f"{namespace}/b-real"
    plan = Plan(pending_reasons={gone: reason, real: reason}, tasks={(real, "p"): pending})
    writer = StatusWriter(kube_api, recorder=EventWriter(kube_api))
    first = writer.write_podgroup_status(plan, known, max_jobs=1)
    assert first.conditions_set == [] and len(first.errors) == 1 and first.left == 1  # a-gone first
    second = writer.write_podgroup_status(plan, known, max_jobs=1)
    assert second.conditions_set == [real] and second.left == 1
