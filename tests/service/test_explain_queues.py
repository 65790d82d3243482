"""Explain, ListQueues, GetCluster and WhatIf on the simulated backend."""

from __future__ import annotations

import pytest
import yaml
from kai_ray_operators.manifests import prepare_manifests
from service_builders import NOW, cluster, gpu_job

from kai_ray.rpc.api import SchedulerService
from kai_ray.rpc.caller import ANYONE, Caller
from kai_ray.rpc.errors import ErrorCode, ServiceError
from kai_ray.rpc.sim_backend import SimBackend
from kai_ray.v1 import scheduler_pb2 as pb

pytestmark = pytest.mark.unit


def test_gang_shortfall_is_explained_with_counts(service: SchedulerService, backend: SimBackend) -> None:
    service.submit_workload(gpu_job("ml", "gang", "team-a", 3, 8), ANYONE)
    backend.run_cycle()
    explanation = service.explain(pb.ExplainRequest(id="ml/gang"), ANYONE)
    assert explanation.state == pb.PENDING and explanation.cause == "NoRoom"
    assert explanation.gang.min_available == 3 and explanation.gang.pods_existing == 3
    assert explanation.gang.pods_bound == 0 and explanation.gang.pods_placeable == 2
    assert explanation.nodes_total == 2
    assert explanation.to_free["nvidia.com/gpu"] == 8
    assert explanation.queue.name == "team-a"


def test_node_predicates_are_counted(service: SchedulerService, backend: SimBackend) -> None:
    filler = gpu_job("ml", "filler", "team-a", 1, 6)
    filler.workload.pod_sets[0].template.node_selector["kubernetes.io/hostname"] = "node-0"
    service.submit_workload(filler, ANYONE)
    request = gpu_job("ml", "picky", "team-a", 1, 4)
    request.workload.pod_sets[0].template.node_selector["kubernetes.io/hostname"] = "node-0"
    service.submit_workload(request, ANYONE)
    backend.run_cycle()
    assert service.get_workload(pb.GetWorkloadRequest(id="ml/filler"), ANYONE).placements[0].node == "node-0"
    explanation = service.explain(pb.ExplainRequest(id="ml/picky"), ANYONE)
    failures = {p.predicate: (p.nodes, p.message) for p in explanation.predicates}
    assert failures == {
        "NodeAffinity": (
            1,
            "node selector, required node affinity or a volume's node affinity does not match",
        ),
        "NodeResourcesFit": (1, "insufficient nvidia.com/gpu (the pod asks 4)"),
    }


def web_pod(name: str, **requests: str) -> str:
    """A bare pod of team-a that wants port 8080 on its host and no other `app: web` pod there."""
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "labels": {"kai.scheduler/queue": "team-a", "app": "web"}},
            "spec": {
                "schedulerName": "kai-scheduler",
                "affinity": {
                    "podAntiAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": [
                            {
                                "labelSelector": {"matchLabels": {"app": "web"}},
                                "topologyKey": "kubernetes.io/hostname",
                            }
                        ]
                    }
                },
                "containers": [
                    {
                        "name": "c",
                        "ports": [{"containerPort": 8080, "hostPort": 8080}],
                        "resources": {"requests": {"nvidia.com/gpu": "1", **requests}},
                    }
                ],
            },
        }
    )


def submit_pods(service: SchedulerService, *documents: str) -> None:
    for document in documents:
        request = pb.SubmitWorkloadRequest(namespace="ml", manifests=pb.Manifests(documents=[document]))
        service.submit_workload(request, ANYONE)


def test_the_engines_pod_rules_are_the_explanations_predicates(backend: SimBackend) -> None:
    service = SchedulerService(backend, grouper=prepare_manifests)
    submit_pods(service, web_pod("web-0"), web_pod("web-1"))
    backend.run_cycle()
    submit_pods(service, web_pod("web-2"))
    backend.run_cycle()
    explanation = service.explain(pb.ExplainRequest(id="ml/web-2"), ANYONE)
    assert explanation.state == pb.PENDING and explanation.nodes_total == 2
    assert {(p.predicate, p.nodes) for p in explanation.predicates} == {
        ("InterPodAntiAffinity", 2),
        ("ExistingPodsAntiAffinity", 2),
        ("NodePorts", 2),
    }
    ports = next(p for p in explanation.predicates if p.predicate == "NodePorts")
    assert ports.message == "host port 8080/TCP in use"
    # Both nodes have 7 GPUs free, but the rules admit it to neither.
    assert explanation.gang.pods_placeable == 0


def test_an_extended_resource_no_node_offers_is_named(backend: SimBackend) -> None:
    service = SchedulerService(backend, grouper=prepare_manifests)
    submit_pods(service, web_pod("rdma", **{"rdma/hca": "1"}))
    backend.run_cycle()
    explanation = service.explain(pb.ExplainRequest(id="ml/rdma"), ANYONE)
    assert explanation.state == pb.PENDING
    assert [(p.predicate, p.nodes, p.message) for p in explanation.predicates] == [
        ("NodeResourcesFit", 2, "insufficient rdma/hca")
    ]
    assert explanation.gang.pods_placeable == 0


def test_over_limit_is_explained_with_the_queues_numbers(
    service: SchedulerService, backend: SimBackend
) -> None:
    service.submit_workload(gpu_job("ml", "greedy", "team-small", 1, 4), ANYONE)
    backend.run_cycle()
    workload = service.get_workload(pb.GetWorkloadRequest(id="ml/greedy"), ANYONE)
    assert workload.state == pb.PENDING and workload.reason == "OverLimit"
    explanation = service.explain(pb.ExplainRequest(id="ml/greedy"), ANYONE)
    assert explanation.cause == "OverLimit"
    gpu = explanation.queue.resources["nvidia.com/gpu"]
    assert (gpu.quota, gpu.limit, gpu.allocated, gpu.requested) == (0, 2, 0, 4)


def test_jobs_ahead_in_queue_order(service: SchedulerService, backend: SimBackend) -> None:
    service.submit_workload(gpu_job("ml", "later", "team-a", 1, 64), ANYONE)
    service.submit_workload(gpu_job("web", "urgent", "team-a", 1, 64, priority_class="build"), ANYONE)
    service.submit_workload(gpu_job("ml", "elsewhere", "team-b", 1, 64, priority_class="inference"), ANYONE)
    backend.run_cycle()
    explanation = service.explain(pb.ExplainRequest(id="ml/later"), ANYONE)
    assert [(ref.id, ref.priority) for ref in explanation.ahead] == [("web/urgent", 100)]
    hidden = service.explain(pb.ExplainRequest(id="ml/later"), Caller(frozenset({"ml"})))
    assert [(ref.id, ref.queue) for ref in hidden.ahead] == [("", "team-a")]


def test_queues_tree_and_cluster_totals(service: SchedulerService, backend: SimBackend) -> None:
    service.submit_workload(gpu_job("ml", "a", "team-a", 1, 3), ANYONE)
    service.submit_workload(gpu_job("ml", "b", "team-b", 1, 64), ANYONE)
    backend.run_cycle()
    queues = service.list_queues(pb.ListQueuesRequest(), ANYONE).queues
    names = [q.name for q in queues]
    assert names == ["default-parent-queue", "default-queue", "dept", "team-a", "team-b", "team-small"]
    dept = queues[2]
    assert list(dept.children) == ["team-a", "team-b", "team-small"]
    assert dept.resources["nvidia.com/gpu"].allocated == 3
    assert (dept.workloads_running, dept.workloads_pending) == (1, 1)
    team_a = queues[3]
    assert team_a.parent == "dept" and team_a.resources["nvidia.com/gpu"].quota == 8
    assert team_a.resources["cpu"].allocated == 1
    cluster = service.get_cluster(pb.GetClusterRequest(), ANYONE)
    assert [n.name for n in cluster.nodes] == ["node-0", "node-1"]
    (pool,) = cluster.node_pools
    assert (pool.nodes, pool.gpus, pool.gpus_allocated, pool.gpus_free) == (2, 16, 3, 13)
    assert sum(n.pods for n in cluster.nodes) == 1
    assert cluster.nodes[0].allocatable["cpu"] == 128


def test_what_if_shows_a_reclaim_and_changes_nothing(service: SchedulerService, backend: SimBackend) -> None:
    service.submit_workload(gpu_job("ml", "hog", "team-a", 2, 8), ANYONE)
    backend.run_cycle()
    generation = backend.view().generation
    before = service.list_workloads(pb.ListWorkloadsRequest(), ANYONE)
    request = pb.WhatIfRequest(workloads=[gpu_job("ml", "fair", "team-b", 1, 8)])
    answer = service.what_if(request, ANYONE)
    evictions = [(e.workload, e.pod, e.cause, e.for_workload) for e in answer.evictions]
    # The gang's minimum is both pods, so reclaiming one GPU node evicts the whole gang.
    assert sorted(evictions) == [("ml/hog", f"hog-{i}", "reclaim", "ml/fair") for i in range(2)]
    # The reclaimer is not bound this cycle: it waits, pipelined, for the gang's pods to be gone.
    assert [(p.workload, p.pod) for p in answer.pipelined] == [("ml/fair", "fair-0")] and not answer.binds
    states = {w.id: w.state for w in answer.workloads}
    assert states["ml/hog"] == pb.EVICTED and states["ml/fair"] == pb.PENDING
    assert backend.view().generation == generation
    assert service.list_workloads(pb.ListWorkloadsRequest(), ANYONE) == before
    assert backend.view().get("Pod", "ml", "fair-0") is None


def test_what_if_with_an_added_node_binds_there(service: SchedulerService, backend: SimBackend) -> None:
    service.submit_workload(gpu_job("ml", "hog", "team-a", 2, 8), ANYONE)
    backend.run_cycle()
    request = pb.WhatIfRequest(
        workloads=[gpu_job("ml", "extra", "team-a", 1, 8)],
        add_nodes=[
            pb.NodeTemplate(name="spare", allocatable={"nvidia.com/gpu": "8", "cpu": "32", "memory": "256Gi"})
        ],
        remove_nodes=["node-1"],
    )
    answer = service.what_if(request, ANYONE)
    binds = {(b.workload, b.node) for b in answer.binds}
    assert ("ml/extra", "spare") in binds or ("ml/hog", "spare") in binds
    assert [n.name for n in service.get_cluster(pb.GetClusterRequest(), ANYONE).nodes] == ["node-0", "node-1"]


def test_before_any_cycle_queues_and_cluster_are_unavailable_not_empty() -> None:
    # A standby replica never schedules: an empty tree would read as "there are no queues".
    backend = SimBackend(cluster(), clock=lambda: NOW)
    service = SchedulerService(backend)
    for call in (
        lambda: service.list_queues(pb.ListQueuesRequest(), ANYONE),
        lambda: service.get_cluster(pb.GetClusterRequest(), ANYONE),
    ):
        with pytest.raises(ServiceError) as refused:
            call()
        assert refused.value.code == ErrorCode.UNAVAILABLE
    backend.run_cycle()
    assert service.list_queues(pb.ListQueuesRequest(), ANYONE).queues
    assert service.get_cluster(pb.GetClusterRequest(), ANYONE).nodes
