"""Reclaim between two queues on the real API server: the over-quota queue gives GPUs back.

Queue A (GPU quota 0) runs preemptible `train` pods on every GPU of the test's two nodes,
which is allowed because nobody else wants them (over-quota share).  Queue B (quota 16, all
the GPUs) then asks for room: the scheduler must evict exactly as many of A's pods as B
needs (Eviction API; kwok finalizes the pod at once, nothing recreates it), explain the
eviction with an `Evict` Event on the victim's PodGroup, and bind B's pods in a *later*
cycle, onto the GPUs the victims freed.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kai_ray_operators.controller import PodGroupController
from kube_support import eventually, queue_body
from kubernetes import client

from kai_ray import devcluster
from kai_ray.server.scheduler import CycleOutcome, KubeScheduler

pytestmark = pytest.mark.kube

GROUP = "scheduling.run.ai"
GPUS_PER_NODE = 8
NODES = 2


def pod(name: str, leaf: str, zone: str, gpus: int, *, group: str | None = None) -> client.V1Pod:
    return client.V1Pod(
        metadata=client.V1ObjectMeta(
            name=name,
            labels={"kai.scheduler/queue": leaf},
            annotations={"pod-group-name": group} if group else None,
        ),
        spec=client.V1PodSpec(
            scheduler_name="kai-scheduler",
            priority_class_name="train",
            node_selector={"kai-ray-test": zone},
            containers=[
                client.V1Container(
                    name="main",
                    image="busybox",
                    resources=client.V1ResourceRequirements(
                        requests={"cpu": "100m", "memory": "100Mi"}, limits={"nvidia.com/gpu": str(gpus)}
                    ),
                )
            ],
        ),
    )


@pytest.fixture
def zone(kube_api: Any, namespace: str) -> Iterator[str]:
    """This test's two 8-GPU nodes and its queues: `<ns>-a` (quota 0) and `<ns>-b` (quota 16)."""
    custom = client.CustomObjectsApi(kube_api)
    for index in range(NODES):
        devcluster.create_gpu_node(
            kube_api, f"{namespace}-n{index}", GPUS_PER_NODE, labels={"kai-ray-test": namespace}
        )
    queues = [
        queue_body(f"{namespace}-dept", None, NODES * GPUS_PER_NODE),
        queue_body(f"{namespace}-a", f"{namespace}-dept", 0),
        queue_body(f"{namespace}-b", f"{namespace}-dept", NODES * GPUS_PER_NODE),
    ]
    for body in queues:
        custom.create_cluster_custom_object(GROUP, "v2", "queues", body)
    yield namespace
    core = client.CoreV1Api(kube_api)
    for index in range(NODES):
        core.delete_node(f"{namespace}-n{index}")
    for body in reversed(queues):
        custom.delete_cluster_custom_object(GROUP, "v2", "queues", body["metadata"]["name"])


def pods_by_name(kube_api: Any, namespace: str) -> dict[str, client.V1Pod]:
    return {p.metadata.name: p for p in client.CoreV1Api(kube_api).list_namespaced_pod(namespace).items}


def evict_events(kube_api: Any, namespace: str) -> list[client.CoreV1Event]:
    events = client.CoreV1Api(kube_api).list_namespaced_event(
        namespace, field_selector="involvedObject.kind=PodGroup,reason=Evict"
    )
    return list(events.items)


def fill_with_queue_a(kube_api: Any, scheduler: KubeScheduler, zone: str) -> dict[str, str]:
    """Sixteen 1-GPU train pods of queue A, all Running; returns pod name → node."""
    core = client.CoreV1Api(kube_api)
    names = [f"a-{index:02d}" for index in range(NODES * GPUS_PER_NODE)]
    for name in names:
        core.create_namespaced_pod(zone, pod(name, f"{zone}-a", zone, 1))

    def all_running() -> bool:
        pods = pods_by_name(kube_api, zone)
        return all(name in pods and pods[name].status.phase == "Running" for name in names)

    assert eventually(all_running, timeout=60, step=scheduler.run_cycle), "queue A never filled the nodes"
    return {name: p.spec.node_name for name, p in pods_by_name(kube_api, zone).items()}


def reclaim(
    kube_api: Any, scheduler: KubeScheduler, zone: str, reclaimers: list[str], timeout: float = 60
) -> list[CycleOutcome]:
    """Run cycles until every reclaimer runs; returns the outcome of each cycle."""
    outcomes: list[CycleOutcome] = []

    def reclaimers_running() -> bool:
        pods = pods_by_name(kube_api, zone)
        return all(pods[name].status.phase == "Running" for name in reclaimers)

    assert eventually(reclaimers_running, timeout, step=lambda: outcomes.append(scheduler.run_cycle())), (
        "queue B's pods never ran"
    )
    return outcomes


def check_evictions(
    kube_api: Any, scheduler: KubeScheduler, zone: str, before: dict[str, str], victims: int
) -> set[str]:
    """`victims` of A's pods are gone, each with an Evict Event naming reclaim; the rest untouched."""
    assert scheduler.events.flush(timeout=30), "the scheduler's Events were never written"
    now = pods_by_name(kube_api, zone)
    gone = {name for name in before if name.startswith("a-") and name not in now}
    assert len(gone) == victims, f"expected {victims} A pods evicted, {sorted(gone)} were"
    for name, node in before.items():
        if name.startswith("a-") and name not in gone:
            assert now[name].spec.node_name == node, f"{name} moved"
            assert now[name].metadata.deletion_timestamp is None, f"{name} is being deleted too"
    events = evict_events(kube_api, zone)
    for name in gone:
        about = [e for e in events if f"Pod {zone}/{name} was evicted" in (e.message or "")]
        assert len(about) == 1, f"no single Evict Event for {name}: {[e.message for e in events]}"
        event = about[0]
        assert "reclaimed" in event.message
        assert f"queue {zone}-b" in event.message
        assert event.involved_object.name.startswith(f"pg-{name}-")
        assert (event.metadata.annotations or {}).get("evictor-action-type") == "reclaim"
    assert len(events) == victims
    return gone


def test_a_pending_pod_of_an_under_quota_queue_reclaims_one_gpu(kube_api: Any, zone: str) -> None:
    core = client.CoreV1Api(kube_api)
    scheduler = KubeScheduler(kube_api, namespace=zone, grouper=PodGroupController(kube_api))
    scheduler.start()
    try:
        before = fill_with_queue_a(kube_api, scheduler, zone)
        assert len(set(before.values())) == NODES

        core.create_namespaced_pod(zone, pod("b-0", f"{zone}-b", zone, 1))
        outcomes = reclaim(kube_api, scheduler, zone, ["b-0"])

        gone = check_evictions(kube_api, scheduler, zone, before, victims=1)
        (victim,) = gone
        evicting = [i for i, o in enumerate(outcomes) if o.plan.evictions]
        binding = [i for i, o in enumerate(outcomes) if any(b.task == "b-0" for b in o.plan.binds)]
        assert len(evicting) == 1 and len(binding) == 1
        assert evicting[0] < binding[0], "B bound in the cycle that evicted for it"
        assert [e.task for e in outcomes[evicting[0]].plan.evictions] == [victim]
        assert outcomes[evicting[0]].applied.evicted == [f"{zone}/{victim}"]
        b_pod = pods_by_name(kube_api, zone)["b-0"]
        assert b_pod.spec.node_name == before[victim], "B did not take the GPU its victim freed"
        binds = client.CustomObjectsApi(kube_api).list_namespaced_custom_object(
            GROUP, "v1alpha2", zone, "bindrequests"
        )["items"]
        assert sum(1 for b in binds if b["spec"]["podName"] == "b-0") == 1
    finally:
        scheduler.stop()


def test_a_gang_of_an_under_quota_queue_reclaims_room_for_all_its_pods(kube_api: Any, zone: str) -> None:
    core = client.CoreV1Api(kube_api)
    custom = client.CustomObjectsApi(kube_api)
    scheduler = KubeScheduler(kube_api, namespace=zone, grouper=PodGroupController(kube_api))
    scheduler.start()
    try:
        before = fill_with_queue_a(kube_api, scheduler, zone)

        gang = {
            "apiVersion": f"{GROUP}/v2alpha2",
            "kind": "PodGroup",
            "metadata": {"name": "b-gang"},
            "spec": {"queue": f"{zone}-b", "minMember": 2, "priorityClassName": "train"},
        }
        custom.create_namespaced_custom_object(GROUP, "v2alpha2", zone, "podgroups", gang)
        reclaimers = ["b-gang-0", "b-gang-1"]
        for name in reclaimers:
            core.create_namespaced_pod(zone, pod(name, f"{zone}-b", zone, 2, group="b-gang"))
        outcomes = reclaim(kube_api, scheduler, zone, reclaimers)

        gone = check_evictions(kube_api, scheduler, zone, before, victims=4)
        first_eviction = next(i for i, o in enumerate(outcomes) if o.plan.evictions)
        bound_in = {b.task: i for i, o in enumerate(outcomes) for b in o.plan.binds if b.task in reclaimers}
        assert set(bound_in) == set(reclaimers)
        assert len(set(bound_in.values())) == 1, "the gang was bound piecemeal"
        assert first_eviction < min(bound_in.values())
        # Everything else is full, so the gang sits exactly on the GPUs its victims freed.
        pods = pods_by_name(kube_api, zone)
        freed = sorted(before[name] for name in gone)
        taken = sorted(node for name in reclaimers for node in [pods[name].spec.node_name] * 2)
        assert taken == freed
    finally:
        scheduler.stop()
