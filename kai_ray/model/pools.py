"""A cluster as KAI's scheduling shards see it: one sub-cluster per node pool.

KAI runs one scheduler per `SchedulingShard`. The shard of pool X reads only the
Nodes, Queues and PodGroups whose node-pool label (`kai.scheduler/node-pool` by
default) is X, and the shard of "" only those without the label
(spec/kubernetes-api.md §6, spec/helm-and-deploy.md §6). Pods are not filtered: every
pod on a shard's nodes holds what it requests there. Topologies are read cluster-wide.
So a pool's sub-cluster, scheduled on its own, is exactly what its shard decides;
there is no fairness, reclaim or preemption across pools (spec/scheduling.md §19).

Rules this module follows, each from that selector:
- a queue belongs to the pool of its own label, never its parent's: a child whose parent
  lies in another pool has no parent in its shard, and KAI drops it (and so its jobs wait
  with `QueueDoesNotExist`), as it does a job naming another pool's queue;
- a label present with an empty value is taken as no label (kai-ray keeps "" for both;
  KAI's `DoesNotExist` selector would leave such an object to no shard at all);
- a pod of pool A's PodGroup running on a node of pool B (see `off_pool_tasks`): shard B
  counts it on its node as a pod it did not schedule (`HeldPod`, not foreign: same
  scheduler name). KAI's shard A still lists it in its job and charges its queue without
  a node; kai-ray's engine has no running task without a node, so here shard A does
  not see it at all. Callers report each such pod, so the difference is never silent.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from kai_ray.model.objects import OCCUPYING, ClusterState, HeldPod, JobSpec, NodeSpec, TaskSpec

UNLABELLED = ""
"""The pool of objects without the node-pool label (the shard with an empty `partitionLabelValue`)."""


@dataclass(frozen=True)
class OffPoolTask:
    """A placed pod whose node lies in another pool than its PodGroup."""

    job: str
    pod: str
    """namespace/name, as the snapshot names pods in its problems."""
    node: str
    job_pool: str
    node_pool: str

    def describe(self) -> str:
        return (
            f"pod {self.pod!r} of PodGroup {self.job!r} (node pool {self.job_pool!r}) occupies node "
            f"{self.node!r} of node pool {self.node_pool!r}: it is held on that node, and the shard of "
            f"{self.job_pool!r} does not count it for its job or queue (KAI's would, without a node)"
        )


def node_pool(node: NodeSpec, label_key: str) -> str:
    return node.labels.get(label_key, UNLABELLED)


def pool_names(state: ClusterState, label_key: str) -> list[str]:
    """Every pool a node, queue or job names, "" first: each gets a shard, as if each had its
    SchedulingShard (a job of a pool without nodes then waits with a reason instead of silently)."""
    names = {node_pool(node, label_key) for node in state.nodes}
    names.update(queue.node_pool for queue in state.queues)
    names.update(job.node_pool for job in state.jobs)
    return sorted(names)


def _node_pools(state: ClusterState, label_key: str) -> dict[str, str]:
    """Node name → pool; for a duplicated name the first node counts, as the snapshot keeps it."""
    pools: dict[str, str] = {}
    for node in state.nodes:
        pools.setdefault(node.name, node_pool(node, label_key))
    return pools


def _off_pool(job: JobSpec, nodes: dict[str, str]) -> list[TaskSpec]:
    """The job's pods that occupy a node of another pool (a node no pool has stays the job's:
    the snapshot reports it as missing, sharded or not)."""
    return [
        task
        for task in job.tasks
        if task.node is not None
        and task.status in OCCUPYING
        and nodes.get(task.node, job.node_pool) != job.node_pool
    ]


def off_pool_tasks(state: ClusterState, label_key: str) -> list[OffPoolTask]:
    """Every placed pod on another pool's node than its PodGroup's, by job then pod order."""
    nodes = _node_pools(state, label_key)
    found = []
    for job in state.jobs:
        for task in _off_pool(job, nodes):
            assert task.node is not None  # _off_pool keeps placed pods only
            pod = f"{job.namespace}/{task.name}" if job.namespace else task.name
            found.append(OffPoolTask(job.key, pod, task.node, job.node_pool, nodes[task.node]))
    return found


def split_by_pool(state: ClusterState, label_key: str) -> dict[str, ClusterState]:
    """Pool value → the sub-cluster its shard schedules, pools in name order ("" first).

    Nodes go by their label, queues and jobs by `node_pool`, held pods with the node they
    sit on (those on no known node are dropped, as the snapshot drops them); the clock and
    every topology are shared. Jobs, nodes and queues are the same objects as in `state`
    (a job with off-pool pods is a copy without them), so a scheduler that updates tasks in
    place updates `state`.
    """
    nodes = _node_pools(state, label_key)
    pools = {
        name: ClusterState(now=state.now, topologies=list(state.topologies))
        for name in pool_names(state, label_key)
    }
    for node in state.nodes:
        pools[node_pool(node, label_key)].nodes.append(node)
    for queue in state.queues:
        pools[queue.node_pool].queues.append(queue)
    for held in state.held:
        if held.task.node in nodes:
            pools[nodes[held.task.node]].held.append(held)
    for job in state.jobs:
        off = _off_pool(job, nodes)
        if not off:
            pools[job.node_pool].jobs.append(job)
            continue
        moved = {id(task) for task in off}
        pools[job.node_pool].jobs.append(replace(job, tasks=[t for t in job.tasks if id(t) not in moved]))
        for task in off:
            assert task.node is not None  # _off_pool keeps placed pods only
            pools[nodes[task.node]].held.append(HeldPod(job.namespace, task, foreign=False))
    return pools
