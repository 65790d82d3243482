"""The gRPC API on a real cluster: a `KubeScheduler` loop, its `KubeBackend`, the gRPC server, and
`KaiRayClient` over a real socket; what a submit or a cancel does is checked on the API server.

The scheduler is limited to the test's namespace (as `serve` can be with a namespaced cache), so
other tests' pods never meet it; the session cluster's two 8-GPU nodes and KAI's default queues
are the cluster it schedules.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from kai_ray_operators.controller import PodGroupController
from kube_serve import wait_until
from kube_zone import gpu_pod
from kubernetes import client

from kai_ray.rpc.client import KaiRayClient, RemoteError
from kai_ray.server.api_serve import GrpcOptions, KubeApi, start_kube_api
from kai_ray.server.scheduler import KubeScheduler
from kai_ray.v1 import scheduler_pb2 as pb

pytestmark = [pytest.mark.kube, pytest.mark.grpc]

GROUP, VERSION = "scheduling.run.ai", "v2alpha2"
QUEUE = "default-queue"
PERIOD = 0.2
TIMEOUT = 60.0


@dataclass
class Served:
    api: KubeApi
    client: KaiRayClient
    scheduler: KubeScheduler
    namespace: str


@pytest.fixture
def served(kube_api: Any, namespace: str) -> Iterator[Served]:
    """`kai-ray serve --grpc-address 127.0.0.1:0` in-process: the loop on its own thread."""
    scheduler = KubeScheduler(kube_api, namespace=namespace, grouper=PodGroupController(kube_api))
    api = start_kube_api(scheduler, GrpcOptions("127.0.0.1:0"))
    stop = threading.Event()
    loop = threading.Thread(target=scheduler.run, args=(stop,), kwargs={"period": PERIOD}, daemon=True)
    loop.start()
    # Until the cache has listed the cluster the API answers UNAVAILABLE (retryable).
    assert scheduler.cache.wait_synced(TIMEOUT), "the cache did not sync"
    rpc = KaiRayClient(f"127.0.0.1:{api.port}")
    try:
        yield Served(api, rpc, scheduler, namespace)
    finally:
        rpc.close()
        api.stop(grace=1.0)
        stop.set()
        loop.join(timeout=30)
        assert not loop.is_alive(), "the scheduling loop did not stop"


def gpu_workload(namespace: str, name: str, replicas: int, gpus: int) -> pb.SubmitWorkloadRequest:
    template = pb.PodTemplate(image="busybox", requests={"nvidia.com/gpu": str(gpus), "cpu": "100m"})
    spec = pb.WorkloadSpec(queue=QUEUE, pod_sets=[pb.PodSet(replicas=replicas, template=template)])
    return pb.SubmitWorkloadRequest(namespace=namespace, name=name, workload=spec)


def pods(kube_api: Any, namespace: str) -> dict[str, Any]:
    return {p.metadata.name: p for p in client.CoreV1Api(kube_api).list_namespaced_pod(namespace).items}


def pod_groups(kube_api: Any, namespace: str) -> dict[str, dict[str, Any]]:
    listed = client.CustomObjectsApi(kube_api).list_namespaced_custom_object(
        GROUP, VERSION, namespace, "podgroups"
    )
    return {item["metadata"]["name"]: item for item in listed["items"]}


def workload(served: Served, name: str) -> pb.Workload | None:
    try:
        return served.client.get_workload(pb.GetWorkloadRequest(id=f"{served.namespace}/{name}"))
    except RemoteError as error:
        if error.status == "NOT_FOUND":
            return None
        raise


def test_submit_runs_explain_queues_and_cancel_through_the_api_server(kube_api: Any, served: Served) -> None:
    ns = served.namespace
    stop = threading.Event()
    timer = threading.Timer(TIMEOUT, stop.set)
    timer.start()
    events = served.client.watch_workloads(pb.WatchWorkloadsRequest(namespace=ns), stop)
    response = served.client.submit_workload(gpu_workload(ns, "train", 2, 4))
    assert response.id == f"{ns}/train"
    # The watch (its stream opens at the first `next`) sees it added once, then running, though
    # both the cache and the cycles announce the new objects.
    seen: list[tuple[int, int]] = []
    for event in events:
        seen.append((event.type, event.workload.state))
        if event.workload.state == pb.RUNNING:
            break
    timer.cancel()
    assert seen[0][0] == pb.WorkloadEvent.ADDED, seen
    assert [kind for kind, _ in seen].count(pb.WorkloadEvent.ADDED) == 1, seen
    assert seen[-1][1] == pb.RUNNING, f"no RUNNING event within {TIMEOUT}s: {seen}"
    # Created through the API server: the PodGroup and both pods, labelled as one workload.
    groups = pod_groups(kube_api, ns)
    assert groups["train"]["spec"]["minMember"] == 2
    assert groups["train"]["metadata"]["labels"]["kai-ray.io/workload"] == "train"
    created = pods(kube_api, ns)
    assert sorted(created) == ["train-0", "train-1"]
    assert {p.metadata.annotations["pod-group-name"] for p in created.values()} == {"train"}

    def running() -> bool:
        found = workload(served, "train")
        return found is not None and found.state == pb.RUNNING

    wait_until(running, TIMEOUT, "train to be RUNNING")
    bound = pods(kube_api, ns)
    assert all(bound[name].spec.node_name for name in ("train-0", "train-1"))
    view = workload(served, "train")
    assert view is not None and view.pods_bound == 2
    assert {p.node for p in view.placements} <= {
        bound["train-0"].spec.node_name,
        bound["train-1"].spec.node_name,
    }

    def default_queue_allocated() -> float:
        queues = {q.name: q for q in served.client.list_queues(pb.ListQueuesRequest()).queues}
        queue = queues.get(QUEUE)
        return -1.0 if queue is None else queue.resources["nvidia.com/gpu"].allocated

    wait_until(lambda: default_queue_allocated() == 8.0, TIMEOUT, "default-queue to hold the 8 GPUs")
    queues = {q.name: q for q in served.client.list_queues(pb.ListQueuesRequest()).queues}
    assert queues[QUEUE].parent == "default-parent-queue"
    assert queues["default-parent-queue"].resources["nvidia.com/gpu"].allocated == 8.0
    assert queues[QUEUE].workloads_running == 1

    # What-if runs on a copy of the cache: the 8 free GPUs would take one more 8-GPU pod.
    hypothetical = served.client.what_if(pb.WhatIfRequest(workloads=[gpu_workload(ns, "maybe", 1, 8)]))
    assert [(b.workload, b.pod) for b in hypothetical.binds] == [(f"{ns}/maybe", "maybe-0")]
    assert "maybe-0" not in pods(kube_api, ns) and "maybe" not in pod_groups(kube_api, ns)

    # Two 8-GPU nodes with 8 GPUs taken: a gang of two 8-GPU pods has no room (yet).
    served.client.submit_workload(gpu_workload(ns, "too-big", 2, 8))

    def explained() -> pb.Explanation:
        return served.client.explain(pb.ExplainRequest(id=f"{ns}/too-big"))

    def waits_for_room() -> bool:
        found = workload(served, "too-big")
        return found is not None and found.reason == "NoRoom"

    wait_until(waits_for_room, TIMEOUT, "a cycle to find no room for too-big")
    assert explained().cause == "NoRoom"
    explanation = explained()
    assert explanation.state == pb.PENDING
    gang = explanation.gang
    assert (gang.min_available, gang.pods_existing, gang.pods_bound) == (2, 2, 0)
    assert explanation.nodes_total >= 2
    assert explanation.queue.name == QUEUE
    assert explanation.to_free["nvidia.com/gpu"] > 0

    listed = served.client.list_workloads(pb.ListWorkloadsRequest(namespace=ns)).workloads
    assert [w.id for w in listed] == [f"{ns}/too-big", f"{ns}/train"]

    cancelled = served.client.cancel_workload(pb.CancelWorkloadRequest(id=f"{ns}/train"))
    assert cancelled.state == pb.CANCELLED

    def train_gone() -> bool:
        return "train" not in pod_groups(kube_api, ns) and not {"train-0", "train-1"} & set(
            pods(kube_api, ns)
        )

    wait_until(train_gone, TIMEOUT, "train's pods and PodGroup to be deleted")
    again = workload(served, "train")
    assert again is not None and again.state == pb.CANCELLED
    # The freed GPUs go to the gang that waited for them.
    wait_until(lambda: (workload(served, "too-big") or pb.Workload()).state == pb.RUNNING, TIMEOUT, "too-big")


def test_a_submit_failing_half_way_leaves_nothing_behind(kube_api: Any, served: Served) -> None:
    ns = served.namespace
    # Someone else's pod under the name the second replica would get (another scheduler's, so
    # nothing groups or binds it).
    core = client.CoreV1Api(kube_api)
    squatter = core.create_namespaced_pod(ns, gpu_pod("clash-1", ns, gpus=0, scheduler="someone-else"))
    with pytest.raises(RemoteError) as refused:
        served.client.submit_workload(gpu_workload(ns, "clash", 4, 1))
    assert refused.value.status == "ALREADY_EXISTS"
    assert "clash-1" in refused.value.message
    # Nothing of the submit is left; the other pod is untouched.
    assert "clash" not in pod_groups(kube_api, ns)
    left = pods(kube_api, ns)
    assert sorted(left) == ["clash-1"]
    assert left["clash-1"].metadata.uid == squatter.metadata.uid
    # Nor does the API report a workload (it may have glimpsed the objects before the rollback).
    wait_until(lambda: workload(served, "clash") is None, TIMEOUT, "no clash workload")
    listed = served.client.list_workloads(pb.ListWorkloadsRequest(namespace=ns)).workloads
    assert [w.id for w in listed] == []
    # The name is free again once the other pod is gone.
    core.delete_namespaced_pod("clash-1", ns, grace_period_seconds=0)
    wait_until(lambda: "clash-1" not in pods(kube_api, ns), TIMEOUT, "the other pod to go")
    served.client.submit_workload(gpu_workload(ns, "clash", 4, 1))
    assert sorted(pods(kube_api, ns)) == [f"clash-{i}" for i in range(4)]


def test_workloads_made_outside_the_api_appear_and_follow_their_pods(kube_api: Any, served: Served) -> None:
    ns = served.namespace
    core = client.CoreV1Api(kube_api)
    # A bare pod of this scheduler: the podgrouper gives it a PodGroup owned by the pod, so the
    # API names the workload after the pod.
    body = gpu_pod("solo", ns, queue=QUEUE, gpus=1)
    body.spec.node_selector = None
    core.create_namespaced_pod(ns, body)

    def solo() -> pb.Workload | None:
        return workload(served, "solo")

    wait_until(lambda: (solo() or pb.Workload()).state == pb.RUNNING, TIMEOUT, "solo to appear RUNNING")
    found = solo()
    assert found is not None and found.queue == QUEUE and found.pods == 1
    assert found.pod_groups[0] != "solo"  # the podgrouper's name, not the workload's
    core.delete_namespaced_pod("solo", ns, grace_period_seconds=0)
    # No garbage collector runs in the dev cluster: the PodGroup stays, the pod is gone.
    wait_until(lambda: (solo() or pb.Workload(pods=1)).pods == 0, TIMEOUT, "solo's pod to be gone")


def test_a_topology_constraint_reaches_the_pod_group_and_an_unknown_topology_is_refused(
    kube_api: Any, served: Served
) -> None:
    """The kube backend finds the cluster's Topology objects: a constraint naming one is written
    into the PodGroup on the API server, one naming none is refused with nothing created."""
    ns = served.namespace
    custom = client.CustomObjectsApi(kube_api)
    topology = f"{ns}-hosts"
    body = {
        "apiVersion": "kai.scheduler/v1alpha1",
        "kind": "Topology",
        "metadata": {"name": topology},
        "spec": {"levels": [{"nodeLabel": "kubernetes.io/hostname", "alias": "host"}]},
    }
    custom.create_cluster_custom_object("kai.scheduler", "v1alpha1", "topologies", body)
    try:
        request = gpu_workload(ns, "together", 2, 4)
        request.workload.topology.topology = topology
        request.workload.topology.required_level = "host"

        def submitted() -> bool:
            # The cache sees the new Topology a moment after the API server has it.
            try:
                served.client.submit_workload(request)
            except RemoteError as error:
                assert error.status == "FAILED_PRECONDITION" and "does not exist" in str(error), error
                return False
            return True

        wait_until(submitted, TIMEOUT, "the Topology to reach the cache")
        constraint = pod_groups(kube_api, ns)["together"]["spec"]["topologyConstraint"]
        assert constraint == {"topology": topology, "requiredTopologyLevel": "host"}
        wait_until(
            lambda: (workload(served, "together") or pb.Workload()).state == pb.RUNNING,
            TIMEOUT,
            "together to be RUNNING",
        )
        placed = pods(kube_api, ns)
        assert placed["together-0"].spec.node_name == placed["together-1"].spec.node_name
        answered = workload(served, "together")
        assert answered is not None and answered.topology == request.workload.topology
        missing = gpu_workload(ns, "apart", 1, 1)
        missing.workload.topology.topology = f"{ns}-nowhere"
        missing.workload.topology.preferred_level = "host"
        with pytest.raises(RemoteError) as refused:
            served.client.submit_workload(missing)
        assert refused.value.status == "FAILED_PRECONDITION"
        assert refused.value.field == "workload.topology.topology"
        assert "apart" not in pod_groups(kube_api, ns) and "apart-0" not in pods(kube_api, ns)
    finally:
        custom.delete_cluster_custom_object("kai.scheduler", "v1alpha1", "topologies", topology)
