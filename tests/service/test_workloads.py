"""Submit, state, list, cancel and the permission checks of the service layer."""

from __future__ import annotations

import pytest
from service_builders import cluster, gpu_job

from kai_ray.rpc.api import SchedulerService
from kai_ray.rpc.caller import ANYONE, Caller
from kai_ray.rpc.errors import ErrorCode, ServiceError
from kai_ray.rpc.sim_backend import SimBackend
from kai_ray.v1 import scheduler_pb2 as pb

pytestmark = pytest.mark.unit


def test_submit_then_a_cycle_runs_it_with_placements(service: SchedulerService, backend: SimBackend) -> None:
    response = service.submit_workload(gpu_job("ml", "train", "team-a", 2, 4), ANYONE)
    assert response.id == "ml/train"
    assert response.workload.state == pb.PENDING
    assert [p.pod for p in response.workload.placements] == ["train-0", "train-1"]
    backend.run_cycle()
    workload = service.get_workload(pb.GetWorkloadRequest(id="ml/train"), ANYONE)
    assert workload.state == pb.RUNNING
    assert workload.pods_bound == 2 and workload.min_available == 2
    assert all(p.node.startswith("node-") for p in workload.placements)
    assert workload.allocated["nvidia.com/gpu"] == 8
    assert workload.requested["cpu"] == 2


def test_objects_carry_kai_labels_and_annotations(service: SchedulerService, backend: SimBackend) -> None:
    request = gpu_job("ml", "share", "team-a", 1, 0)
    request.workload.pod_sets[0].template.requests.pop("nvidia.com/gpu")
    request.workload.pod_sets[0].template.gpu_fraction = 0.5
    request.workload.priority_class = "build"
    service.submit_workload(request, ANYONE)
    pod = backend.view().get("Pod", "ml", "share-0")
    group = backend.view().get("PodGroup", "ml", "share")
    assert pod is not None and group is not None
    assert pod.metadata.annotations["pod-group-name"] == "share"
    assert pod.metadata.annotations["gpu-fraction"] == "0.5"
    assert pod.metadata.labels["kai.scheduler/queue"] == "team-a"
    assert pod.spec.scheduler_name == "kai-scheduler"  # type: ignore[union-attr]
    assert group.spec.priority_class_name == "build" and group.spec.min_member == 1  # type: ignore[union-attr]
    backend.run_cycle()
    workload = service.get_workload(pb.GetWorkloadRequest(id="ml/share"), ANYONE)
    assert workload.state == pb.RUNNING and not workload.preemptible and workload.priority == 100
    assert workload.allocated["nvidia.com/gpu"] == 0.5


def test_list_filters_and_pages(service: SchedulerService, backend: SimBackend) -> None:
    for index in range(5):
        service.submit_workload(gpu_job("ml", f"job-{index}", "team-a", 1, 1), ANYONE)
    service.submit_workload(gpu_job("web", "other", "team-b", 1, 1), ANYONE)
    service.submit_workload(gpu_job("web", "huge", "team-b", 1, 64), ANYONE)
    backend.run_cycle()
    ids: list[str] = []
    token = ""
    while True:
        page = service.list_workloads(pb.ListWorkloadsRequest(page_size=2, page_token=token), ANYONE)
        assert len(page.workloads) <= 2
        ids.extend(w.id for w in page.workloads)
        token = page.next_page_token
        if not token:
            break
    assert ids == sorted(ids) and len(ids) == 7
    by_namespace = service.list_workloads(pb.ListWorkloadsRequest(namespace="web"), ANYONE)
    assert [w.id for w in by_namespace.workloads] == ["web/huge", "web/other"]
    by_queue = service.list_workloads(pb.ListWorkloadsRequest(queue="team-a"), ANYONE)
    assert len(by_queue.workloads) == 5
    pending = service.list_workloads(pb.ListWorkloadsRequest(state=pb.PENDING), ANYONE)
    assert [w.id for w in pending.workloads] == ["web/huge"]
    assert pending.workloads[0].reason == "NoRoom"
    with pytest.raises(ServiceError) as bad:
        service.list_workloads(pb.ListWorkloadsRequest(page_token="nonsense"), ANYONE)
    assert bad.value.code == ErrorCode.INVALID_ARGUMENT and bad.value.field == "page_token"


def test_cancel_deletes_objects_and_frees_the_gpus(service: SchedulerService, backend: SimBackend) -> None:
    service.submit_workload(gpu_job("ml", "big", "team-a", 2, 8), ANYONE)
    backend.run_cycle()
    service.submit_workload(gpu_job("ml", "next", "team-a", 1, 8), ANYONE)
    backend.run_cycle()
    assert service.get_workload(pb.GetWorkloadRequest(id="ml/next"), ANYONE).state == pb.PENDING
    cancelled = service.cancel_workload(pb.CancelWorkloadRequest(id="ml/big"), ANYONE)
    assert cancelled.state == pb.CANCELLED
    assert backend.view().get("Pod", "ml", "big-0") is None
    assert backend.view().get("PodGroup", "ml", "big") is None
    backend.run_cycle()
    assert service.get_workload(pb.GetWorkloadRequest(id="ml/big"), ANYONE).state == pb.CANCELLED
    assert service.get_workload(pb.GetWorkloadRequest(id="ml/next"), ANYONE).state == pb.RUNNING
    again = service.submit_workload(gpu_job("ml", "big", "team-a", 1, 1), ANYONE)
    assert again.workload.state == pb.PENDING
    with pytest.raises(ServiceError) as missing:
        service.cancel_workload(pb.CancelWorkloadRequest(id="ml/nope"), ANYONE)
    assert missing.value.code == ErrorCode.NOT_FOUND


def test_a_restricted_caller_sees_and_touches_only_its_namespaces(service: SchedulerService) -> None:
    service.submit_workload(gpu_job("ml", "mine", "team-a", 1, 1), ANYONE)
    service.submit_workload(gpu_job("web", "theirs", "team-b", 1, 1), ANYONE)
    caller = Caller(frozenset({"ml"}), "alice")
    listed = service.list_workloads(pb.ListWorkloadsRequest(), caller)
    assert [w.id for w in listed.workloads] == ["ml/mine"]
    calls = [
        lambda: service.get_workload(pb.GetWorkloadRequest(id="web/theirs"), caller),
        lambda: service.get_workload(pb.GetWorkloadRequest(id="web/does-not-exist"), caller),
        lambda: service.cancel_workload(pb.CancelWorkloadRequest(id="web/theirs"), caller),
        lambda: service.explain(pb.ExplainRequest(id="web/theirs"), caller),
        lambda: service.list_workloads(pb.ListWorkloadsRequest(namespace="web"), caller),
        lambda: service.submit_workload(gpu_job("web", "sneaky", "team-b", 1, 1), caller),
        lambda: service.watch_workloads(
            pb.WatchWorkloadsRequest(namespace="web"), caller, __import__("threading").Event()
        ),
    ]
    for call in calls:
        with pytest.raises(ServiceError) as denied:
            call()
        assert denied.value.code == ErrorCode.PERMISSION_DENIED
    assert service.get_workload(pb.GetWorkloadRequest(id="web/theirs"), ANYONE).state == pb.PENDING
    assert service.backend.view().get("Pod", "web", "sneaky-0") is None


def test_the_background_thread_schedules_a_submit() -> None:
    backend = SimBackend(cluster(), period=5.0)
    service = SchedulerService(backend)
    backend.start()
    try:
        first = backend.wait_for_cycle(0)
        service.submit_workload(gpu_job("ml", "train", "team-a", 1, 1), ANYONE)
        backend.wait_for_cycle(first.number)
        assert service.get_workload(pb.GetWorkloadRequest(id="ml/train"), ANYONE).state == pb.RUNNING
    finally:
        backend.close()


def test_manifests_are_grouped_like_simulate(backend: SimBackend) -> None:
    from kai_ray_operators.manifests import prepare_manifests

    service = SchedulerService(backend, grouper=prepare_manifests)
    pod = """
apiVersion: v1
kind: Pod
metadata: {name: solo, labels: {kai.scheduler/queue: team-a}}
spec:
  schedulerName: kai-scheduler
  containers: [{name: c, resources: {requests: {nvidia.com/gpu: "1"}}}]
"""
    response = service.submit_workload(
        pb.SubmitWorkloadRequest(namespace="ml", manifests=pb.Manifests(documents=[pod])), ANYONE
    )
    assert response.id == "ml/solo"
    assert response.workload.pods == 1 and response.workload.queue == "team-a"
    backend.run_cycle()
    assert service.get_workload(pb.GetWorkloadRequest(id="ml/solo"), ANYONE).state == pb.RUNNING
