"""Benchmark cluster shapes, as data: a name gives a reproducible cluster.

Shapes are generated, never stored, so a benchmark run needs nothing but
the name; the same name always builds the same cluster.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from kai_ray.model.objects import (
    ClusterState,
    JobSpec,
    NodeSpec,
    PodSetSpec,
    QueueSpec,
    ResourceQuota,
    SubGroupSetSpec,
    TaskSpec,
    TaskStatus,
)

GPUS_PER_NODE = 8
UNLIMITED_QUOTA = ResourceQuota(-1.0, -1.0, 1.0)


def gpu_nodes(count: int) -> list[NodeSpec]:
    return [
        NodeSpec(name=f"node-{i:05d}", cpu_millis=128_000, memory=1e12, gpus=GPUS_PER_NODE, max_pods=110)
        for i in range(count)
    ]


def flat_queues(count: int, gpus_each: float) -> list[QueueSpec]:
    root = QueueSpec(name="root", gpu=UNLIMITED_QUOTA)
    leaves = [
        QueueSpec(
            name=f"queue-{i:02d}", parent="root", created=float(i), gpu=ResourceQuota(gpus_each, -1.0, 1.0)
        )
        for i in range(count)
    ]
    return [root, *leaves]


def single_gpu_jobs(count: int, queues: int) -> list[JobSpec]:
    return [
        JobSpec(
            name=f"job-{i:06d}",
            queue=f"queue-{i % queues:02d}",
            created=float(i),
            tasks=[TaskSpec(name=f"job-{i:06d}-0", cpu_millis=1000, memory=1e9, gpu=1)],
        )
        for i in range(count)
    ]


def fill(nodes: int, jobs: int, queues: int = 10) -> ClusterState:
    """`nodes` 8-GPU nodes and `jobs` pending one-GPU jobs spread over `queues` equal queues."""
    total = float(nodes * GPUS_PER_NODE)
    return ClusterState(
        nodes=gpu_nodes(nodes), queues=flat_queues(queues, total / queues), jobs=single_gpu_jobs(jobs, queues)
    )


def reclaim(nodes: int, gang_pods: int) -> ClusterState:
    """A full cluster of one-GPU pods from an over-quota queue, and one pending gang of 8-GPU pods.

    The gang's queue deserves exactly what the gang needs, so reclaim must free
    `gang_pods` whole nodes by evicting the hog queue's newest pods.
    """
    total = float(nodes * GPUS_PER_NODE)
    wanted = float(gang_pods * GPUS_PER_NODE)
    queues = [
        QueueSpec(name="root", gpu=UNLIMITED_QUOTA),
        QueueSpec(name="hog", parent="root", created=0.0, gpu=ResourceQuota(total - wanted, -1.0, 1.0)),
        QueueSpec(name="starved", parent="root", created=1.0, gpu=ResourceQuota(wanted, -1.0, 1.0)),
    ]
    running = [
        JobSpec(
            name=f"hog-{i:06d}",
            queue="hog",
            created=float(i),
            last_start=float(i),
            tasks=[
                TaskSpec(
                    name=f"hog-{i:06d}-0",
                    status=TaskStatus.RUNNING,
                    node=f"node-{i % nodes:05d}",
                    cpu_millis=1000,
                    memory=1e9,
                    gpu=1,
                )
            ],
        )
        for i in range(nodes * GPUS_PER_NODE)
    ]
    gang = JobSpec(
        name="gang",
        queue="starved",
        created=float(nodes * GPUS_PER_NODE),
        subgroups=SubGroupSetSpec(pod_sets=(PodSetSpec("default", gang_pods),)),
        tasks=[
            TaskSpec(name=f"gang-{i}", cpu_millis=1000, memory=1e9, gpu=GPUS_PER_NODE)
            for i in range(gang_pods)
        ],
    )
    return ClusterState(nodes=gpu_nodes(nodes), queues=queues, jobs=[*running, gang], now=float(nodes * 100))


SHAPES: dict[str, tuple[str, Callable[[int, int], ClusterState]]] = {
    "fill": (r"fill-(\d+)x(\d+)", fill),
    "reclaim": (r"reclaim-(\d+)x(\d+)", reclaim),
}


def build_shape(name: str) -> ClusterState:
    for pattern, builder in SHAPES.values():
        match = re.fullmatch(pattern, name)
        if match:
            return builder(*(int(g) for g in match.groups()))
    known = ", ".join(f"{key}-NxM" for key in SHAPES)
    raise ValueError(f"unknown shape {name!r}; known shapes: {known}")
