"""Clusters of several node pools for the pool-sharding tests, made from one cluster per pool.

Each pool's cluster is drawn on its own (by `random_clusters`, or built by hand), then renamed
under a prefix and labelled with its pool, and the pools are put side by side in one cluster.
What each pool's shard must decide is then known independently of `split_by_pool`: it is what
that pool's cluster, scheduled alone, decides.
"""

from __future__ import annotations

from dataclasses import replace

from hypothesis import strategies as st
from random_clusters import running_cluster, scenarios, with_arrivals

from kai_ray.api.constants import NODE_POOL_LABEL
from kai_ray.model.objects import ClusterState, HeldPod, JobSpec, TaskSpec

POOLS = ("", "pool-a", "pool-b")
"""Pool values in name order; "" is the unlabelled pool (the default shard's)."""


def _task(task: TaskSpec, prefix: str) -> TaskSpec:
    return replace(task, node=None if task.node is None else prefix + task.node)


def _job(job: JobSpec, prefix: str, pool: str) -> JobSpec:
    tasks = [_task(task, prefix) for task in job.tasks]
    return replace(job, name=prefix + job.name, queue=prefix + job.queue, node_pool=pool, tasks=tasks)


def in_pool(state: ClusterState, pool: str, prefix: str) -> ClusterState:
    """The cluster with every node, queue, job and held pod's node named `prefix...` and in `pool`
    ("" leaves nodes unlabelled)."""
    label = {NODE_POOL_LABEL: pool} if pool else {}
    return ClusterState(
        nodes=[replace(n, name=prefix + n.name, labels={**n.labels, **label}) for n in state.nodes],
        queues=[
            replace(q, name=prefix + q.name, parent=q.parent and prefix + q.parent, node_pool=pool)
            for q in state.queues
        ],
        jobs=[_job(job, prefix, pool) for job in state.jobs],
        now=state.now,
        held=[HeldPod(h.namespace, _task(h.task, prefix), h.foreign) for h in state.held],
        topologies=list(state.topologies),
    )


def side_by_side(parts: list[ClusterState]) -> ClusterState:
    """One cluster holding every part's objects (parts share the clock and the topologies)."""
    return ClusterState(
        nodes=[node for part in parts for node in part.nodes],
        queues=[queue for part in parts for queue in part.queues],
        jobs=[job for part in parts for job in part.jobs],
        now=parts[0].now,
        held=[held for part in parts for held in part.held],
        topologies=list(parts[0].topologies),
    )


@st.composite
def pooled_clusters(draw: st.DrawFn, max_pools: int = len(POOLS)) -> dict[str, ClusterState]:
    """Pool value → that pool's cluster (renamed and labelled), each a random running cluster
    that new jobs arrived at; 1 to `max_pools` pools."""
    count = draw(st.integers(1, max_pools))
    parts = {}
    for index, pool in enumerate(POOLS[:count]):
        nodes, queues, first, later = draw(scenarios)
        state = with_arrivals(running_cluster(nodes, queues, first), later)
        parts[pool] = in_pool(state, pool, f"p{index}-")
    return parts
