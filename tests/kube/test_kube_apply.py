"""Applying a plan to a real kube-apiserver: BindRequests, evictions, Events, PodGroup and Queue status.

Every test works in its own namespace on the session dev cluster (two kwok-managed 8-GPU
nodes).  Waiting is always "poll the API until the condition holds, fail at a deadline":
kwok and the API server are asynchronous, sleeps would make the tests flaky or slow.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kube_support import gone, node_of, running_on, wait_for
from kubernetes import client

from kai_ray.api import BindRequest
from kai_ray.api.config import SchedulerConfig
from kai_ray.cluster.kube.apply import apply_plan
from kai_ray.cluster.kube.bind_requests import bind_request_body, received_gpu
from kai_ray.cluster.kube.binder import Binder
from kai_ray.cluster.kube.events import EventWriter
from kai_ray.cluster.kube.queue_usage import queue_usage_from_book
from kai_ray.cluster.kube.status import (
    PodGroupRef,
    StatusWriter,
    desired_conditions,
    write_podgroup_status,
    write_queue_status,
)
from kai_ray.devcluster import DevCluster
from kai_ray.engine.cycle import open_session, run_actions
from kai_ray.engine.plan import Bind, Eviction, Plan, TaskState
from kai_ray.engine.reasons import EvictionCause, EvictionReason, PendingCause, PendingReason
from kai_ray.model.objects import (
    ClusterState,
    JobSpec,
    NodeSpec,
    PodSetSpec,
    QueueSpec,
    SubGroupSetSpec,
    TaskSpec,
    TaskStatus,
)
from kai_ray.model.snapshot import compile_snapshot

pytestmark = pytest.mark.kube

TIMEOUT = 60.0  # generous: 2 shared cores run etcd, the API server, kwok and pytest
GROUP = "scheduling.run.ai"
NODE_A, NODE_B = "gpu-node-0", "gpu-node-1"


def make_pod(
    name: str,
    *,
    gpus: int = 0,
    annotations: dict[str, str] | None = None,
    node: str | None = None,
    podgroup: str | None = None,
) -> client.V1Pod:
    limits = {"nvidia.com/gpu": str(gpus)} if gpus else None
    pod_annotations = dict(annotations or {})
    if podgroup:
        pod_annotations["pod-group-name"] = podgroup
    return client.V1Pod(
        metadata=client.V1ObjectMeta(
            name=name, labels={"kai.scheduler/queue": "default-queue"}, annotations=pod_annotations or None
        ),
        spec=client.V1PodSpec(
            scheduler_name="kai-scheduler",
            node_name=node,
            containers=[
                client.V1Container(
                    name="main",
                    image="busybox",
                    resources=client.V1ResourceRequirements(requests={"cpu": "100m"}, limits=limits),
                )
            ],
        ),
    )


@pytest.fixture
def core(kube_api: Any) -> client.CoreV1Api:
    return client.CoreV1Api(kube_api)


@pytest.fixture
def custom(kube_api: Any) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(kube_api)


@pytest.fixture
def tidy(custom: client.CustomObjectsApi, namespace: str) -> Iterator[None]:
    """Remove the test's BindRequests and PodGroups: no garbage collector runs in the dev cluster."""
    yield
    for version, plural in (("v1alpha2", "bindrequests"), ("v2alpha2", "podgroups")):
        custom.delete_collection_namespaced_custom_object(GROUP, version, namespace, plural)


def create_podgroup(custom: client.CustomObjectsApi, namespace: str, name: str, min_member: int = 1) -> str:
    body = {
        "apiVersion": f"{GROUP}/v2alpha2",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"queue": "default-queue", "minMember": min_member, "priorityClassName": "train"},
    }
    created = custom.create_namespaced_custom_object(GROUP, "v2alpha2", namespace, "podgroups", body)
    return str(created["metadata"]["uid"])  # type: ignore[index]


def get_podgroup(custom: client.CustomObjectsApi, namespace: str, name: str) -> dict[str, Any]:
    return custom.get_namespaced_custom_object(GROUP, "v2alpha2", namespace, "podgroups", name)  # type: ignore[return-value]


def bind_requests(custom: client.CustomObjectsApi, namespace: str) -> list[dict[str, Any]]:
    listing: Any = custom.list_namespaced_custom_object(GROUP, "v1alpha2", namespace, "bindrequests")
    return list(listing["items"])


def events_for(core: client.CoreV1Api, namespace: str, kind: str, name: str) -> list[client.CoreV1Event]:
    selector = f"involvedObject.kind={kind},involvedObject.name={name}"
    return list(core.list_namespaced_event(namespace, field_selector=selector).items)


# --------------------------------------------------------------------------------------------
# Binds


def test_bind_creates_kai_shaped_bind_requests(
    core: client.CoreV1Api, custom: client.CustomObjectsApi, namespace: str, tidy: None
) -> None:
    core.create_namespaced_pod(namespace, make_pod("whole", gpus=2))
    core.create_namespaced_pod(namespace, make_pod("half", annotations={"gpu-fraction": "0.5"}))
    core.create_namespaced_pod(namespace, make_pod("cpu"))
    job = f"{namespace}/pg"
    plan = Plan(
        binds=[
            Bind(job, "whole", NODE_A, (), 2.0),
            Bind(job, "half", NODE_B, ("gpu-node-1-gpu-1",), 0.5),
            Bind(job, "cpu", NODE_A, (), 0.0),
        ]
    )

    result = apply_plan(core.api_client, plan)

    assert result.ok, result.errors
    assert sorted(result.bind_requests) == sorted(f"{namespace}/{p}" for p in ("whole", "half", "cpu"))
    by_name = {br["metadata"]["name"]: br for br in bind_requests(custom, namespace)}
    whole = by_name["whole"]
    uid = core.read_namespaced_pod("whole", namespace).metadata.uid  # type: ignore[union-attr]
    assert whole["spec"] == {
        "podName": "whole",
        "selectedNode": NODE_A,
        "receivedResourceType": "Regular",
        "receivedGPU": {"count": 2, "portion": "1.00"},
    }
    assert whole["metadata"]["labels"] == {"selected-node": NODE_A, "pod-name": "whole"}
    assert whole["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Pod", "name": "whole", "uid": uid}
    ]
    assert by_name["half"]["spec"] == {
        "podName": "half",
        "selectedNode": NODE_B,
        "receivedResourceType": "Fraction",
        "receivedGPU": {"count": 1, "portion": "0.50"},
        "selectedGPUGroups": ["gpu-node-1-gpu-1"],
    }
    assert by_name["cpu"]["spec"]["receivedResourceType"] == ""
    assert by_name["cpu"]["spec"]["receivedGPU"] == {"count": 0, "portion": "0.00"}
    # What we wrote is a valid object of our own API model (the contract other tools read).
    for obj in by_name.values():
        BindRequest.model_validate(obj)
    scheduled = events_for(core, namespace, "Pod", "whole")
    assert [(e.reason, e.type) for e in scheduled] == [("Scheduled", "Normal")]
    assert (
        scheduled[0].message
        == f"Successfully assigned pod {namespace}/whole to node {NODE_A} at node-pool default"
    )
    assert scheduled[0].involved_object.uid == uid


def test_same_plan_twice_and_a_restart_never_bind_twice(
    core: client.CoreV1Api, custom: client.CustomObjectsApi, namespace: str, tidy: None
) -> None:
    core.create_namespaced_pod(namespace, make_pod("p", gpus=1))
    plan = Plan(binds=[Bind(f"{namespace}/pg", "p", NODE_A, (), 1.0)])

    first = apply_plan(core.api_client, plan)
    # Before the binder acts: the BindRequest named after the pod makes a repeat a no-op (409).
    second = apply_plan(core.api_client, plan)
    assert first.bind_requests == [f"{namespace}/p"] and first.ok
    assert second.bind_requests == [] and second.ok
    assert second.skipped[0][0] == f"{namespace}/p" and "already exists" in second.skipped[0][1]

    outcome = Binder(core.api_client, namespace=namespace).bind_pending(timeout=TIMEOUT)
    assert outcome.succeeded == [f"{namespace}/p"]
    wait_for("pod p Running on gpu-node-0", lambda: running_on(core, namespace, "p", NODE_A))

    # A "restarted scheduler" (fresh apply, no memory) with a stale plan for the same node, and
    # one that now wants the pod elsewhere: both are refused, the pod stays where it is.
    again = apply_plan(core.api_client, plan)
    elsewhere = apply_plan(core.api_client, Plan(binds=[Bind(f"{namespace}/pg", "p", NODE_B, (), 1.0)]))
    assert again.bind_requests == [] and elsewhere.bind_requests == []
    assert "already bound to gpu-node-0" in again.skipped[0][1]
    assert "refusing to bind it to gpu-node-1" in elsewhere.skipped[0][1]
    assert len(bind_requests(custom, namespace)) == 1
    # A restarted binder finds nothing to do either.
    assert Binder(core.api_client, namespace=namespace).bind_pending(timeout=TIMEOUT).outcomes == []
    assert node_of(core, namespace, "p") == NODE_A


def test_pods_not_ours_or_gone_are_skipped(core: client.CoreV1Api, namespace: str, tidy: None) -> None:
    other = make_pod("other")
    other.spec.scheduler_name = "default-scheduler"  # type: ignore[union-attr]
    core.create_namespaced_pod(namespace, other)
    plan = Plan(
        binds=[
            Bind(f"{namespace}/pg", "other", NODE_A, (), 0.0),
            Bind(f"{namespace}/pg", "ghost", NODE_A, (), 0.0),
        ]
    )

    result = apply_plan(core.api_client, plan)

    assert result.ok and result.bind_requests == []
    assert dict(result.skipped) == {
        f"{namespace}/other": "pod belongs to scheduler 'default-scheduler', not 'kai-scheduler'",
        f"{namespace}/ghost": "pod no longer exists",
    }


def test_engine_plan_applied_and_bound_end_to_end(
    core: client.CoreV1Api, custom: client.CustomObjectsApi, namespace: str, tidy: None
) -> None:
    """A plan made by the real engine, from a ClusterState mirroring the objects created here."""
    create_podgroup(custom, namespace, "gang", min_member=2)
    create_podgroup(custom, namespace, "frac")
    for name in ("gang-0", "gang-1"):
        core.create_namespaced_pod(namespace, make_pod(name, gpus=8, podgroup="gang"))
    core.create_namespaced_pod(
        namespace, make_pod("frac-0", annotations={"gpu-fraction": "0.5"}, podgroup="frac")
    )
    nodes = [
        NodeSpec(n, cpu_millis=128_000, memory=2**40, gpus=8, gpu_memory_mib=81920) for n in (NODE_A, NODE_B)
    ]
    queues = [QueueSpec("default-parent-queue"), QueueSpec("default-queue", parent="default-parent-queue")]
    gang_of_two = SubGroupSetSpec(pod_sets=(PodSetSpec("default", 2),))
    jobs = [
        JobSpec(
            "gang",
            "default-queue",
            namespace=namespace,
            created=1.0,
            subgroups=gang_of_two,
            tasks=[TaskSpec("gang-0", cpu_millis=100, gpu=8), TaskSpec("gang-1", cpu_millis=100, gpu=8)],
        ),
        JobSpec(
            "frac",
            "default-queue",
            namespace=namespace,
            created=2.0,
            tasks=[TaskSpec("frac-0", cpu_millis=100, gpu=0.5)],
        ),
    ]
    session = open_session(compile_snapshot(ClusterState(nodes, queues, jobs)), SchedulerConfig())
    plan = run_actions(session)
    # The gang takes both nodes whole; the fraction does not fit anywhere and must wait.
    assert sorted(b.task for b in plan.binds) == ["gang-0", "gang-1"]
    assert f"{namespace}/frac" in plan.pending_reasons

    applied = apply_plan(core.api_client, plan)
    bound = Binder(core.api_client, namespace=namespace).bind_pending(timeout=TIMEOUT)
    status = StatusWriter(core.api_client).write_podgroup_status(plan)

    assert applied.ok and status.ok, (applied.errors, status.errors)
    assert sorted(bound.succeeded) == [f"{namespace}/gang-0", f"{namespace}/gang-1"]
    placed = {b.task: b.node for b in plan.binds}
    for pod, node in placed.items():
        wait_for(f"{pod} Running on {node}", functools.partial(running_on, core, namespace, pod, node))
    assert sorted(placed.values()) == [NODE_A, NODE_B]
    conditions = get_podgroup(custom, namespace, "frac")["status"]["schedulingConditions"]
    assert conditions[-1]["message"] == plan.pending_reasons[f"{namespace}/frac"].message
    assert status.conditions_set == [f"{namespace}/frac"]
    # Queue status from the session's own accounting.
    usage = queue_usage_from_book(session.queues)
    assert usage["default-queue"]["allocated"]["nvidia.com/gpu"] == "16"
    assert usage["default-queue"]["requested"]["nvidia.com/gpu"] == "16.5"


# --------------------------------------------------------------------------------------------
# Evictions and pipelining


def test_eviction_removes_the_pod_and_explains_on_the_podgroup(
    core: client.CoreV1Api, custom: client.CustomObjectsApi, namespace: str, tidy: None
) -> None:
    uid = create_podgroup(custom, namespace, "victims")
    core.create_namespaced_pod(namespace, make_pod("v-0", gpus=1, node=NODE_A, podgroup="victims"))
    wait_for("victim Running", lambda: running_on(core, namespace, "v-0", NODE_A))
    reason = "reclaimed for queue team-b, job team-b/train"
    cause = EvictionReason(EvictionCause.RECLAIM, reason, "team-b/train")
    plan = Plan(evictions=[Eviction(f"{namespace}/victims", "v-0", NODE_A, cause)])

    result = apply_plan(core.api_client, plan)

    assert result.ok, result.errors
    assert result.evicted == [f"{namespace}/v-0"] and result.blocked == []
    wait_for("evicted pod gone", lambda: gone(core, namespace, "v-0"))
    events = events_for(core, namespace, "PodGroup", "victims")
    assert [(e.reason, e.type) for e in events] == [("Evict", "Normal")]
    assert events[0].message == f"Pod {namespace}/v-0 was evicted: {reason}"
    assert events[0].involved_object.uid == uid
    assert events[0].involved_object.api_version == "scheduling.run.ai/v2alpha2"
    assert events[0].metadata.annotations == {"num-evicted-pods": "1", "evictor-action-type": "reclaim"}
    annotations = get_podgroup(custom, namespace, "victims")["metadata"]["annotations"]
    assert "kai.scheduler/last-eviction-timestamp" in annotations

    # Evicting it again (a stale plan) is not an error: the pod is already gone.
    again = apply_plan(core.api_client, plan)
    assert again.ok and again.already_gone == [f"{namespace}/v-0"]


PREEMPTED_BY_X = EvictionReason(EvictionCause.PREEMPT, "preempted by x", "ns/x")


def test_a_disruption_budget_blocks_the_eviction_and_nothing_forces_it(
    core: client.CoreV1Api, custom: client.CustomObjectsApi, namespace: str, tidy: None
) -> None:
    """A PodDisruptionBudget allowing no disruption makes the Eviction API answer 429: the victim stays."""
    create_podgroup(custom, namespace, "guarded")
    pod = make_pod("g-0", node=NODE_B, podgroup="guarded")
    pod.metadata.labels["app"] = "guarded"  # type: ignore[index,union-attr]
    core.create_namespaced_pod(namespace, pod)
    wait_for("guarded pod Running", lambda: running_on(core, namespace, "g-0", NODE_B))
    pdb = client.V1PodDisruptionBudget(
        metadata=client.V1ObjectMeta(name="guard"),
        spec=client.V1PodDisruptionBudgetSpec(
            max_unavailable=0, selector=client.V1LabelSelector(match_labels={"app": "guarded"})
        ),
    )
    client.PolicyV1Api(core.api_client).create_namespaced_pod_disruption_budget(namespace, pdb)
    # The disruption controller is not running here, so the budget's status is written by hand,
    # as kube-controller-manager would: no disruption allowed.
    _allow_no_disruption(core, namespace)

    eviction = Eviction(f"{namespace}/guarded", "g-0", NODE_B, PREEMPTED_BY_X)
    result = apply_plan(core.api_client, Plan(evictions=[eviction]))

    assert result.ok and result.evicted == []
    assert [(b.pod, b.eviction.reason.preemptor) for b in result.blocked] == [(f"{namespace}/g-0", "ns/x")]
    assert "guard" in result.blocked[0].message
    assert running_on(core, namespace, "g-0", NODE_B)  # still there
    assert events_for(core, namespace, "PodGroup", "guarded") == []  # no Evict Event for what did not happen
    annotations = get_podgroup(custom, namespace, "guarded")["metadata"].get("annotations") or {}
    assert "kai.scheduler/last-eviction-timestamp" not in annotations


def _allow_no_disruption(core: client.CoreV1Api, namespace: str) -> None:
    """Mark the budget as observed with no disruption allowed (the disruption controller's job)."""
    policy = client.PolicyV1Api(core.api_client)
    current = policy.read_namespaced_pod_disruption_budget("guard", namespace)
    status = {
        "observedGeneration": current.metadata.generation,
        "disruptionsAllowed": 0,
        "currentHealthy": 1,
        "desiredHealthy": 1,
        "expectedPods": 1,
    }
    policy.patch_namespaced_pod_disruption_budget_status("guard", namespace, {"status": status})


def test_pipelined_pod_gets_an_event_and_nothing_else(
    core: client.CoreV1Api, custom: client.CustomObjectsApi, namespace: str, tidy: None
) -> None:
    core.create_namespaced_pod(namespace, make_pod("waiter", gpus=1))
    plan = Plan(pipelined=[Bind(f"{namespace}/pg", "waiter", NODE_A, (), 1.0)])
    events = EventWriter(core.api_client)

    first = apply_plan(core.api_client, plan, recorder=events)
    second = apply_plan(core.api_client, plan, recorder=events)  # same writer: no duplicate Event

    assert first.pipelined == [f"{namespace}/waiter"] and first.events == 1 and second.events == 0
    assert bind_requests(custom, namespace) == []
    assert node_of(core, namespace, "waiter") is None
    recorded = events_for(core, namespace, "Pod", "waiter")
    assert [(e.reason, e.type) for e in recorded] == [("Pipelined", "Normal")]
    assert NODE_A in (recorded[0].message or "")


# --------------------------------------------------------------------------------------------
# PodGroup and Queue status


def test_pending_job_gets_condition_and_events_until_it_is_scheduled(
    core: client.CoreV1Api, custom: client.CustomObjectsApi, namespace: str, tidy: None
) -> None:
    uid = create_podgroup(custom, namespace, "big", min_member=2)
    for pod in ("big-0", "big-1"):
        core.create_namespaced_pod(namespace, make_pod(pod, gpus=8, podgroup="big"))
    key = f"{namespace}/big"
    reason = "gang needs 2 more pods together, only 1 fit: no node has 8 idle GPUs"
    pending = TaskState(TaskStatus.PENDING, None, (), 0.0)
    plan = Plan(
        pending_reasons={key: PendingReason(PendingCause.NO_ROOM, reason)},
        tasks={(key, "big-0"): pending, (key, "big-1"): pending},
    )
    writer = StatusWriter(core.api_client)

    first = writer.write_podgroup_status(plan)
    repeat = writer.write_podgroup_status(plan)

    assert first.ok and first.conditions_set == [key] and first.pods_marked == 2
    assert repeat.ok and repeat.conditions_set == [] and repeat.events == 0 and repeat.pods_marked == 0
    conditions = get_podgroup(custom, namespace, "big")["status"]["schedulingConditions"]
    assert len(conditions) == 1
    condition = conditions[0]
    assert {k: v for k, v in condition.items() if k != "lastTransitionTime"} == {
        "type": "UnschedulableOnNodePool",
        "nodePool": "default",
        "reason": "Unschedulable",
        "message": reason,
        "reasons": [{"reason": "Unable to schedule podgroup", "message": reason}],
        "status": "True",
        "transitionID": "1",
    }
    events = events_for(core, namespace, "PodGroup", "big")
    assert [(e.reason, e.type, e.message) for e in events] == [("Unschedulable", "Normal", reason)]
    assert events[0].involved_object.uid == uid
    big_0 = core.read_namespaced_pod("big-0", namespace)
    assert big_0.status is not None
    scheduled = [c for c in big_0.status.conditions or [] if c.type == "PodScheduled"]
    assert [(c.status, c.reason, c.message) for c in scheduled] == [("False", "Unschedulable", reason)]
    assert [e.reason for e in events_for(core, namespace, "Pod", "big-0")] == ["Unschedulable"]

    # A new reason: a new condition (transition id + 1) and a new Event.
    other = "queue default-queue gpu limit 8 would be exceeded (0 in use + 16 requested)"
    over_limit = PendingReason(PendingCause.OVER_LIMIT, other)
    changed = writer.write_podgroup_status(Plan(pending_reasons={key: over_limit}, tasks=plan.tasks))
    assert changed.conditions_set == [key]
    condition = get_podgroup(custom, namespace, "big")["status"]["schedulingConditions"][-1]
    assert (condition["transitionID"], condition["reasons"][0]["reason"]) == ("2", "OverLimit")

    # Scheduled: the condition is cleared (a fresh writer, as after a restart, reads it back).
    placed = TaskState(TaskStatus.ALLOCATED, NODE_A, (), 8.0)
    done = Plan(tasks={(key, "big-0"): placed, (key, "big-1"): placed})
    cleared = write_podgroup_status(core.api_client, done)
    assert cleared.ok and cleared.conditions_cleared == [key]
    assert not (get_podgroup(custom, namespace, "big").get("status") or {}).get("schedulingConditions")


def test_status_from_cache_refs_skips_unknown_and_unchanged_podgroups(
    core: client.CoreV1Api, custom: client.CustomObjectsApi, namespace: str, tidy: None
) -> None:
    create_podgroup(custom, namespace, "known")
    key = f"{namespace}/known"
    reasons = {
        key: PendingReason(PendingCause.NO_ROOM, "no room"),
        f"{namespace}/unknown": PendingReason(PendingCause.NO_ROOM, "no room either"),
    }
    plan = Plan(pending_reasons=reasons)
    writer = StatusWriter(core.api_client, mark_pods=False)

    first = writer.write_podgroup_status(
        plan, {key: PodGroupRef.from_object(get_podgroup(custom, namespace, "known"))}
    )
    stored = PodGroupRef.from_object(get_podgroup(custom, namespace, "known"))
    fresh = StatusWriter(core.api_client, mark_pods=False).write_podgroup_status(plan, {key: stored})

    assert first.conditions_set == [key]  # the PodGroup the cache does not know is left alone
    assert fresh.conditions_set == [] and fresh.ok  # what the PodGroup holds already says it


def test_queue_status_is_written_through_the_status_subresource(
    custom: client.CustomObjectsApi, kube_api: Any
) -> None:
    name = f"q-{uuid.uuid4().hex[:8]}"
    resources = {r: {"quota": -1, "limit": -1, "overQuotaWeight": 1} for r in ("cpu", "gpu", "memory")}
    body = {
        "apiVersion": f"{GROUP}/v2",
        "kind": "Queue",
        "metadata": {"name": name},
        "spec": {"parentQueue": "default-parent-queue", "resources": resources},
    }
    custom.create_cluster_custom_object(GROUP, "v2", "queues", body)
    try:
        usage: dict[str, dict[str, Any]] = {
            "allocated": {"cpu": "1500m", "memory": "2Gi", "nvidia.com/gpu": 1.5},
            "requested": {"cpu": "2", "memory": "4Gi", "nvidia.com/gpu": 3},
        }
        first = write_queue_status(kube_api, {name: usage})
        assert first.ok and first.queues_written == [name], first.errors
        queue: Any = custom.get_cluster_custom_object(GROUP, "v2", "queues", name)
        assert queue["status"]["allocated"] == {"cpu": "1500m", "memory": "2Gi", "nvidia.com/gpu": "1.5"}
        assert queue["status"]["requested"] == {"cpu": "2", "memory": "4Gi", "nvidia.com/gpu": "3"}
        assert queue["spec"]["resources"] == resources  # status writes never touch the spec

        writer = StatusWriter(kube_api)
        writer.write_queue_status({name: usage})
        # GPUs released: the resource disappears from the status instead of keeping its old value.
        smaller: dict[str, dict[str, Any]] = {
            "allocated": {"cpu": "500m", "memory": "1Gi"},
            "requested": usage["requested"],
        }
        second = writer.write_queue_status({name: smaller})
        unchanged = writer.write_queue_status({name: smaller})
        assert second.queues_written == [name] and unchanged.queues_written == []
        queue = custom.get_cluster_custom_object(GROUP, "v2", "queues", name)
        assert queue["status"]["allocated"] == {"cpu": "500m", "memory": "1Gi"}
    finally:
        custom.delete_cluster_custom_object(GROUP, "v2", "queues", name)


def test_api_errors_are_collected_with_the_object_named(
    core: client.CoreV1Api, namespace: str, tidy: None
) -> None:
    result = write_queue_status(core.api_client, {"no-such-queue-xyz": {"allocated": {"cpu": "1"}}})
    assert not result.ok
    assert result.errors[0].object == "Queue no-such-queue-xyz" and "404" in result.errors[0].message


def test_devcluster_fixture_is_what_these_tests_assume(kube_cluster: DevCluster) -> None:
    assert set(kube_cluster.nodes) >= {NODE_A, NODE_B} and kube_cluster.gpus_per_node == 8


# --------------------------------------------------------------------------------------------
# The shapes, without a cluster


def test_received_gpu_follows_kai_formatting() -> None:
    assert received_gpu(Bind("ns/j", "p", "n", ("g1", "g2"), 1.0)) == ("Fraction", 2, "0.50")
    assert received_gpu(Bind("ns/j", "p", "n", ("g1",), 0.25)) == ("Fraction", 1, "0.25")
    assert received_gpu(Bind("ns/j", "p", "n", (), 4)) == ("Regular", 4, "1.00")
    assert received_gpu(Bind("ns/j", "p", "n", (), 0.0)) == ("", 0, "0.00")


def test_bind_request_leaves_out_label_values_kubernetes_would_reject() -> None:
    long_name = "p" * 70
    body = bind_request_body(
        Bind("ns/j", long_name, "node-1", (), 1.0), "uid-1", node_pool_label=("pool", "a")
    )
    assert body["metadata"]["name"] == long_name and body["metadata"]["namespace"] == "ns"
    assert body["metadata"]["labels"] == {"selected-node": "node-1", "pool": "a"}


def test_scheduling_conditions_keep_one_entry_per_pool_with_the_current_last() -> None:
    now = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
    no_room = [PendingReason(PendingCause.NO_ROOM, "no room")]
    first = desired_conditions([], "default", no_room, now)
    assert first is not None and first[0]["transitionID"] == "1"
    assert first[0]["lastTransitionTime"] == "2026-01-02T03:04:05Z"
    assert desired_conditions(first, "default", no_room, now) is None  # unchanged: no write
    other_pool = desired_conditions(first, "pool-b", no_room, now)
    assert other_pool is not None and [c["nodePool"] for c in other_pool] == ["default", "pool-b"]
    still = [PendingReason(PendingCause.NO_ROOM, "still no room")]
    back = desired_conditions(other_pool, "default", still, now)
    assert back is not None and [c["nodePool"] for c in back] == ["pool-b", "default"]
    assert back[-1]["transitionID"] == "3"


def test_queue_usage_from_book_writes_kai_quantities() -> None:
    @dataclasses.dataclass
    class Book:  # the QueueBook columns: cpu millicores, memory bytes, GPUs
        names: list[str]
        allocated: list[list[float]]
        allocated_non_preemptible: list[list[float]]
        request: list[list[float]]

    book = Book(["q"], [[1500.0, 2 * 2**30, 1.5]], [[0.0, 0.0, 0.0]], [[2000.0, 4 * 2**30, 3.0]])
    usage = queue_usage_from_book(book)
    assert usage["q"]["allocated"] == {"cpu": "1500m", "memory": str(2 * 2**30), "nvidia.com/gpu": "1.5"}
    assert usage["q"]["requested"]["nvidia.com/gpu"] == "3"
    assert usage["q"]["allocatedNonPreemptible"] == {"cpu": "0m", "memory": "0", "nvidia.com/gpu": "0"}
