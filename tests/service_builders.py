"""Small clusters and submit requests for the service-layer tests (tests/service)."""

from __future__ import annotations

from kai_ray.api import ApiObject, Queue
from kai_ray.rpc.objects import default_cluster_objects
from kai_ray.v1 import scheduler_pb2 as pb

NOW = 1_700_000_000.0


def queue(name: str, gpu_quota: float, gpu_limit: float = -1, parent: str = "") -> Queue:
    unlimited = {"quota": -1, "limit": -1, "overQuotaWeight": 1}
    spec = {
        "resources": {
            "gpu": {"quota": gpu_quota, "limit": gpu_limit, "overQuotaWeight": 1},
            "cpu": unlimited,
            "memory": unlimited,
        }
    }
    if parent:
        spec["parentQueue"] = parent
    return Queue.model_validate(
        {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": name}, "spec": spec}
    )


def cluster(nodes: int = 2) -> list[ApiObject]:
    """`nodes` × 8 GPUs, KAI's default queues, and a department with two teams (8 GPUs each,
    team-small limited to 2)."""
    return [
        *default_cluster_objects(nodes),
        queue("dept", 16),
        queue("team-a", 8, parent="dept"),
        queue("team-b", 8, parent="dept"),
        queue("team-small", 0, gpu_limit=2, parent="dept"),
    ]


def gpu_job(
    namespace: str, name: str, queue_name: str, replicas: int, gpus: int, **spec: object
) -> pb.SubmitWorkloadRequest:
    template = pb.PodTemplate(requests={"nvidia.com/gpu": str(gpus), "cpu": "1"})
    workload = pb.WorkloadSpec(
        queue=queue_name, pod_sets=[pb.PodSet(replicas=replicas, template=template)], **spec
    )  # type: ignore[arg-type]
    return pb.SubmitWorkloadRequest(namespace=namespace, name=name, workload=workload)
