"""ListQueues and GetCluster: the queue tree and the nodes, as of the last cycle.

Both read the last cycle's session (queue accounting with fair shares, node accounting) rather
than compiling a snapshot per call: cheap, and consistent with the reasons workloads show.  The
backend runs a follow-up cycle after every change, so once the cluster is quiet the last cycle's
end state is the current state.
"""

from __future__ import annotations

from collections.abc import Iterable

from kai_ray.api.constants import NODE_POOL_LABEL, RESOURCE_CPU, RESOURCE_GPU, RESOURCE_MEMORY
from kai_ray.engine.session import Session
from kai_ray.model.objects import UNLIMITED
from kai_ray.model.resources import CPU, GPU, MEMORY, PODS
from kai_ray.v1 import scheduler_pb2 as pb

__all__ = ["cluster_view", "queue_view", "queue_views"]

_COLUMNS = ((RESOURCE_CPU, 0, 1000.0), (RESOURCE_MEMORY, 1, 1.0), (RESOURCE_GPU, 2, 1.0))
"""API resource name, QueueBook column, divisor to the API's unit (CPU: millicores → cores)."""


def _scaled(value: float, unit: float) -> float:
    return value if value == UNLIMITED else float(value) / unit


def queue_view(session: Session, name: str, counts: dict[str, tuple[int, int]] | None = None) -> pb.Queue:
    book = session.queues
    row = book.index[name]
    spec = book.specs[row]
    weights = {
        RESOURCE_CPU: spec.cpu.over_quota_weight,
        RESOURCE_MEMORY: spec.memory.over_quota_weight,
        RESOURCE_GPU: spec.gpu.over_quota_weight,
    }
    queue = pb.Queue(name=name, parent=spec.parent or "", priority=spec.priority)
    queue.children.extend(sorted(book.children.get(name, [])))
    for resource, column, unit in _COLUMNS:
        queue.resources[resource].CopyFrom(
            pb.QueueResource(
                quota=_scaled(book.deserved[row, column], unit),
                limit=_scaled(book.limit[row, column], unit),
                over_quota_weight=weights[resource],
                fair_share=float(book.fair_share[row, column]) / unit,
                allocated=float(book.allocated[row, column]) / unit,
                requested=float(book.request[row, column]) / unit,
            )
        )
    pending, running = (counts or {}).get(name, (0, 0))
    queue.workloads_pending, queue.workloads_running = pending, running
    return queue


def queue_views(session: Session, workloads: Iterable[pb.Workload]) -> list[pb.Queue]:
    """Parents before children, siblings by name; workload counts summed up the tree."""
    book = session.queues
    counts: dict[str, tuple[int, int]] = {}
    for workload in workloads:
        queue: str | None = workload.queue
        pending = workload.state in (pb.PENDING, pb.EVICTED)
        running = workload.state == pb.RUNNING
        while queue is not None and queue in book.index:
            p, r = counts.get(queue, (0, 0))
            counts[queue] = (p + pending, r + running)
            queue = book.specs[book.index[queue]].parent
    ordered: list[pb.Queue] = []

    def visit(name: str) -> None:
        ordered.append(queue_view(session, name, counts))
        for child in sorted(book.children.get(name, [])):
            visit(child)

    for top in sorted(book.top_level()):
        visit(top)
    return ordered


def cluster_view(session: Session) -> pb.Cluster:
    """Nodes with allocatable and allocated (what pods hold: allocatable less idle), by node pool."""
    table = session.nodes.table
    used = table.allocatable - session.nodes.idle
    counts = _pod_counts(session)
    cluster = pb.Cluster()
    pools: dict[str, pb.NodePool] = {}
    for row, name in enumerate(table.names):
        spec = table.specs[row]
        pool_name = spec.labels.get(NODE_POOL_LABEL, "")
        node = cluster.nodes.add(
            name=name, node_pool=pool_name, ready=bool(table.schedulable[row]), pods=counts.get(row, 0)
        )
        for target, values in ((node.allocatable, table.allocatable[row]), (node.allocated, used[row])):
            target.update(
                {
                    RESOURCE_CPU: float(values[CPU]) / 1000.0,
                    RESOURCE_MEMORY: float(values[MEMORY]),
                    RESOURCE_GPU: float(values[GPU]),
                    "pods": float(values[PODS]),
                }
            )
        pool = pools.setdefault(pool_name, pb.NodePool(name=pool_name))
        pool.nodes += 1
        pool.gpus += float(table.allocatable[row, GPU])
        pool.gpus_allocated += float(used[row, GPU])
    for name in sorted(pools):
        pool = pools[name]
        pool.gpus_free = max(0.0, pool.gpus - pool.gpus_allocated)
        cluster.node_pools.append(pool)
    return cluster


def _pod_counts(session: Session) -> dict[int, int]:
    counts: dict[int, int] = {}
    for job in session.jobs:
        for task in job.tasks:
            if task.node is not None:
                counts[task.node] = counts.get(task.node, 0) + 1
    for held in session.snapshot.held:
        row = session.nodes.table.index.get(held.task.node or "")
        if row is not None:
            counts[row] = counts.get(row, 0) + 1
    return counts
