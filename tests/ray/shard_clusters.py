"""A small cluster whose plan depends on every node shard, and the plan facts tests compare."""

from __future__ import annotations

from builders import cluster

from kai_ray.engine.plan import Plan
from kai_ray.model.objects import ClusterState, TaskStatus


def many_nodes() -> ClusterState:
    """Twelve nodes of two sizes, a running job and pending gang, single, and CPU jobs."""
    builder = cluster()
    for index in range(12):
        builder.node(f"n{index:02d}", gpus=8 if index % 3 else 4)
    return (
        builder.queue("a", gpu_quota=40)
        .queue("b", gpu_quota=40)
        .job("running", queue="a", gpus=4, pods=5, status=TaskStatus.RUNNING, node="n01")
        .job("gang", queue="a", gpus=2, pods=6)
        .job("singles", queue="b", gpus=1, pods=9, min_member=1)
        .job("cpu", queue="b", gpus=0, cpu_millis=4000, pods=4, min_member=1)
        .build()
    )


def facts(plan: Plan) -> tuple[object, ...]:
    return (plan.binds, plan.pipelined, plan.evictions, plan.pending_reasons)
