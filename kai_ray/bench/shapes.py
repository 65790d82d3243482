"""Benchmark cluster shapes, as data: a name gives a reproducible cluster.

Shapes are generated, never stored, so a benchmark run needs nothing but
the name; the same name always builds the same cluster (no randomness, only
index arithmetic). Every shape is built in the conformance scenario's own
terms (clock at `SCENARIO_NOW`, whole-minute ages, explicit -1 limits,
harness config) so that `--emit-scenario` can write it out losslessly and
`kai-ray simulate` on that file schedules exactly what the benchmark timed.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

from kai_ray.api.config import (
    DEFAULT_ACTIONS,
    DEFAULT_PLUGINS,
    ActionName,
    PluginSpec,
    SchedulerConfig,
)
from kai_ray.api.constants import NODE_POOL_LABEL
from kai_ray.cluster.sim.scenario import SCENARIO_NOW
from kai_ray.model.objects import (
    UNLIMITED,
    ClusterState,
    JobSpec,
    LabelSelector,
    NodeSpec,
    PodAffinitySpec,
    PodAffinityTerm,
    PodSetSpec,
    QueueSpec,
    ResourceQuota,
    SpreadConstraint,
    SubGroupSetSpec,
    TaskSpec,
    TaskStatus,
)

GPUS_PER_NODE = 8
MINUTE = 60.0
NODE_TYPE_LABEL = "kai.scheduler/type"
"""Every conformance node carries this label with its own name (FORMAT.md, nodes)."""
STALE_GANG_GRACE_SECONDS = 60.0
UNCAPPED = ResourceQuota(UNLIMITED, UNLIMITED, 1.0)
"""A resource without quota or limit. Spelled out because an unset KAI limit means 0, not "none"."""

Actions = tuple[ActionName, ...]
Built = tuple[ClusterState, Actions]
"""What a shape builder returns: the cluster and the actions its cycle runs."""

ALLOCATE_ONLY: Actions = ("allocate",)
FULL_CYCLE: Actions = DEFAULT_ACTIONS


@dataclass(frozen=True)
class Shape:
    """A named benchmark cluster and the actions one of its cycles runs."""

    name: str
    state: ClusterState
    actions: Actions

    @property
    def config(self) -> SchedulerConfig:
        return harness_config(self.actions)


def harness_config(actions: Actions) -> SchedulerConfig:
    """The config an emitted scenario loads back to, so bench and `simulate` schedule alike.

    These are the conformance harness values the emitted `config` block
    writes: default plugins with binpack placement, predicates on, unlimited
    consolidation preemptees, a 60 s stale-gang grace period.
    """
    plugins = tuple(
        PluginSpec(name=name, arguments={"gpu": "binpack", "cpu": "binpack"})
        if name == "nodeplacement"
        else PluginSpec(name=name)
        for name in DEFAULT_PLUGINS
    )
    return SchedulerConfig(
        actions=actions,
        plugins=plugins,
        default_staleness_grace_seconds=STALE_GANG_GRACE_SECONDS,
        max_consolidation_preemptees=-1,
        allow_consolidating_reclaim=True,
    )


def gpu_quota(quota: float, over_quota_weight: float = 1.0) -> ResourceQuota:
    """A GPU quota with the limit spelled out as -1, never left at KAI's 0."""
    return ResourceQuota(quota, UNLIMITED, over_quota_weight)


def gpu_nodes(count: int) -> list[NodeSpec]:
    """Identical 8-GPU nodes, roomy enough in CPU, memory and pods that only GPUs ever run out."""
    names = [f"node-{i:05d}" for i in range(count)]
    return [
        NodeSpec(
            name=name,
            cpu_millis=128_000,
            memory=1e12,
            gpus=GPUS_PER_NODE,
            max_pods=110,
            labels={NODE_TYPE_LABEL: name},
        )
        for name in names
    ]


def flat_queues(count: int, gpus_each: float) -> list[QueueSpec]:
    """`count` equal leaf queues under one uncapped top-level queue."""
    root = QueueSpec(name="root", gpu=UNCAPPED)
    leaves = [
        QueueSpec(name=f"queue-{i:02d}", parent="root", created=MINUTE * i, gpu=gpu_quota(gpus_each))
        for i in range(count)
    ]
    return [root, *leaves]


def department_queues(total: float, departments: int, leaves_per_department: int) -> list[QueueSpec]:
    """Departments splitting `total` GPUs equally, each split equally over its leaves (weights 1).

    Leaves are numbered across departments (`queue-0`, `queue-1` under
    `dept-0`, ...) so jobs can be dealt round-robin by leaf number.
    """
    leaves = departments * leaves_per_department
    tops = [
        QueueSpec(name=f"dept-{d}", created=MINUTE * d, gpu=gpu_quota(total / departments))
        for d in range(departments)
    ]
    children = [
        QueueSpec(
            name=f"queue-{q}",
            parent=f"dept-{q // leaves_per_department}",
            created=MINUTE * q,
            gpu=gpu_quota(total / leaves),
        )
        for q in range(leaves)
    ]
    return [*tops, *children]


def gpu_job(
    name: str,
    queue: str,
    age_minutes: int,
    pods: int = 1,
    gpu: float = 1.0,
    running_on: str | None = None,
) -> JobSpec:
    """A gang of `pods` identical pods (minMember = pods), pending or running on one node.

    Ages are whole minutes before the scenario clock, the unit a scenario
    file stores, so the emitted file reloads to the same creation times.
    """
    status = TaskStatus.PENDING if running_on is None else TaskStatus.RUNNING
    return JobSpec(
        name=name,
        queue=queue,
        created=SCENARIO_NOW - MINUTE * age_minutes,
        last_start=None if running_on is None else SCENARIO_NOW - MINUTE,
        subgroups=SubGroupSetSpec(pod_sets=(PodSetSpec("default", pods),)),
        tasks=[
            TaskSpec(name=f"{name}-{k}", status=status, node=running_on, cpu_millis=1000, memory=1e9, gpu=gpu)
            for k in range(pods)
        ],
    )


def _cluster(nodes: int, queues: list[QueueSpec], jobs: list[JobSpec]) -> ClusterState:
    return ClusterState(nodes=gpu_nodes(nodes), queues=queues, jobs=jobs, now=SCENARIO_NOW)


def fill(nodes: int, jobs: int, queues: int = 10) -> Built:
    """`nodes` 8-GPU nodes and `jobs` pending one-GPU jobs spread over `queues` equal queues."""
    total = float(nodes * GPUS_PER_NODE)
    pending = [gpu_job(f"job-{i:06d}", f"queue-{i % queues:02d}", jobs - i) for i in range(jobs)]
    return _cluster(nodes, flat_queues(queues, total / queues), pending), FULL_CYCLE


GROUP_SIZE = 4
"""Pods per group in the affinity and spread shapes (one PodGroup each)."""
HOSTNAME_LABEL = "kubernetes.io/hostname"
ZONE_LABEL = "topology.kubernetes.io/zone"
ZONES = 8


def _labelled_cluster(nodes: int, queues: int, jobs: list[JobSpec]) -> ClusterState:
    """A fill cluster whose nodes carry a hostname and one of `ZONES` zones, as real nodes do."""
    state = _cluster(nodes, flat_queues(queues, float(nodes * GPUS_PER_NODE) / queues), jobs)
    for i, node in enumerate(state.nodes):
        node.labels.update({HOSTNAME_LABEL: node.name, ZONE_LABEL: f"zone-{i % ZONES}"})
    return state


def _group_jobs(pods: int, queues: int, dress: Callable[[int, TaskSpec], TaskSpec]) -> list[JobSpec]:
    """`pods` one-GPU pods as gangs of `GROUP_SIZE`, each pod dressed with its group's rules."""
    groups = pods // GROUP_SIZE
    jobs = []
    for g in range(groups):
        job = gpu_job(f"group-{g:05d}", f"queue-{g % queues:02d}", groups - g, pods=GROUP_SIZE)
        job.tasks = [dress(g, replace(task, labels={"group": f"g{g}"})) for task in job.tasks]
        jobs.append(job)
    return jobs


def _group_selector(group: int) -> LabelSelector:
    return LabelSelector(match_labels=(("group", f"g{group}"),))


def affinity(nodes: int, pods: int, queues: int = 10) -> Built:
    """Groups of four one-GPU pods, each pod repelling its group's others from its host (required
    anti-affinity on hostname); every tenth group prefers the zone of the next group's pods."""

    def dress(group: int, task: TaskSpec) -> TaskSpec:
        apart = PodAffinityTerm(HOSTNAME_LABEL, _group_selector(group), frozenset({""}))
        near = PodAffinityTerm(ZONE_LABEL, _group_selector(group + 1), frozenset({""}), weight=50)
        preferred = (near,) if group % 10 == 0 else ()
        return replace(task, pod_affinity=PodAffinitySpec(required_anti=(apart,), preferred=preferred))

    return _labelled_cluster(nodes, queues, _group_jobs(pods, queues, dress)), FULL_CYCLE


def spread(nodes: int, pods: int, queues: int = 10) -> Built:
    """Groups of four one-GPU pods spread over zones and hosts, maxSkew 1 on each (DoNotSchedule)."""

    def dress(group: int, task: TaskSpec) -> TaskSpec:
        selector = _group_selector(group)
        rules = (SpreadConstraint(1, ZONE_LABEL, selector), SpreadConstraint(1, HOSTNAME_LABEL, selector))
        return replace(task, spread=rules)

    return _labelled_cluster(nodes, queues, _group_jobs(pods, queues, dress)), FULL_CYCLE


def reclaim(nodes: int, gang_pods: int) -> Built:
    """A full cluster of one-GPU pods from an over-quota queue, and one pending gang of 8-GPU pods.

    The gang's queue deserves exactly what the gang needs, so reclaim must free
    `gang_pods` whole nodes by evicting the hog queue's newest pods.
    """
    if gang_pods > nodes:
        raise ValueError(f"reclaim-{nodes}x{gang_pods}: the gang needs more nodes than the cluster has")
    total = float(nodes * GPUS_PER_NODE)
    wanted = float(gang_pods * GPUS_PER_NODE)
    queues = [
        QueueSpec(name="root", gpu=UNCAPPED),
        QueueSpec(name="hog", parent="root", created=0.0, gpu=gpu_quota(total - wanted)),
        QueueSpec(name="starved", parent="root", created=MINUTE, gpu=gpu_quota(wanted)),
    ]
    count = nodes * GPUS_PER_NODE + 1
    running = [
        gpu_job(f"hog-{i:06d}", "hog", count - i, running_on=f"node-{i % nodes:05d}")
        for i in range(count - 1)
    ]
    gang = gpu_job("gang", "starved", 1, pods=gang_pods, gpu=GPUS_PER_NODE)
    return _cluster(nodes, queues, [*running, gang]), FULL_CYCLE


def kai_allocate(nodes: int, jobs: int) -> Built:
    """KAI's allocate benchmark: one-GPU jobs dealt round-robin over 2 departments x 2 leaves."""
    return kai_gang(nodes, jobs, 1)


def kai_gang(nodes: int, jobs: int, pods: int) -> Built:
    """As `kai_allocate`, with every job a gang of `pods` one-GPU pods."""
    total = float(nodes * GPUS_PER_NODE)
    pending = [gpu_job(f"job-{i:06d}", f"queue-{i % 4}", jobs - i, pods=pods) for i in range(jobs)]
    return _cluster(nodes, department_queues(total, 2, 2), pending), ALLOCATE_ONLY


def kai_full_cycle(nodes: int, jobs: int) -> Built:
    """The allocate layout with the older half of the jobs already running (job i on node i mod N).

    All five actions run, so this times a whole cycle on a half-busy cluster.
    """
    running = jobs // 2
    if running > nodes * GPUS_PER_NODE:
        raise ValueError(f"kai-full-cycle-{nodes}x{jobs}: {running} running pods do not fit on {nodes} nodes")
    total = float(nodes * GPUS_PER_NODE)
    listed = [
        gpu_job(
            f"job-{i:06d}",
            f"queue-{i % 4}",
            jobs - i,
            running_on=f"node-{i % nodes:05d}" if i < running else None,
        )
        for i in range(jobs)
    ]
    return _cluster(nodes, department_queues(total, 2, 2), listed), FULL_CYCLE


def kai_reclaim_large(nodes: int) -> Built:
    """KAI's BenchmarkReclaimLargeJobs: one-GPU pods fill the cluster, then a job of N/2 8-GPU pods.

    The running pods belong to `queue-0`, whose GPU quota is 0, and the
    large job to `queue-1`, which deserves every GPU (over-quota weights 0,
    as in KAI's benchmark). So reclaim has to evict half the cluster, pod by
    pod, to make room: the benchmark times that victim search.
    """
    if nodes < 2:
        raise ValueError("kai-reclaim-large-N needs N >= 2 (the large job has N/2 pods)")
    total = float(nodes * GPUS_PER_NODE)
    queues = [
        QueueSpec(name="default", gpu=UNCAPPED),
        QueueSpec(name="queue-0", parent="default", created=0.0, gpu=gpu_quota(0.0, 0.0)),
        QueueSpec(name="queue-1", parent="default", created=MINUTE, gpu=gpu_quota(total, 0.0)),
    ]
    count = nodes * GPUS_PER_NODE + 1
    running = [
        gpu_job(f"running-{i:06d}", "queue-0", count - i, running_on=f"node-{i % nodes:05d}")
        for i in range(count - 1)
    ]
    large = gpu_job("large-job", "queue-1", 1, pods=nodes // 2, gpu=GPUS_PER_NODE)
    return _cluster(nodes, queues, [*running, large]), FULL_CYCLE


def gang(nodes: int) -> Built:
    """One pending job of one 8-GPU pod per node: the whole cluster or nothing."""
    total = float(nodes * GPUS_PER_NODE)
    job = gpu_job("gang", "queue-00", 1, pods=nodes, gpu=GPUS_PER_NODE)
    return _cluster(nodes, flat_queues(1, total), [job]), FULL_CYCLE


BIG_DEPARTMENTS = 4
BIG_LEAVES_PER_DEPARTMENT = 5
FRACTION = 0.5


def _big_block() -> tuple[tuple[int, float], ...]:
    """One repeat of the big mix, as (pods, GPUs per pod) per job, in creation order.

    160 pods: a 64-pod gang, four 8-pod gangs spread among 64 single pods,
    and every other single pod fractional, so 32 of 160 pods (20%) share GPUs.
    """
    jobs: list[tuple[int, float]] = [(64, 1.0)]
    singles = 0
    for slot in range(68):
        if slot % 17 == 0:
            jobs.append((8, 1.0))
        else:
            jobs.append((1, FRACTION if singles % 2 == 0 else 1.0))
            singles += 1
    return tuple(jobs)


BIG_BLOCK = _big_block()


def _big_jobs(pods: int) -> Iterator[tuple[int, float]]:
    """Repeats the block until `pods` pods; a gang that would overshoot becomes single pods."""
    remaining = pods
    while remaining:
        for size, gpu in BIG_BLOCK:
            if not remaining:
                return
            if size > remaining:
                size, gpu = 1, 1.0
            remaining -= size
            yield size, gpu


def big(nodes: int, pods: int) -> Built:
    """A large mixed workload: singles, 8- and 64-pod gangs, 20% fractional, over 20 leaf queues."""
    total = float(nodes * GPUS_PER_NODE)
    leaves = BIG_DEPARTMENTS * BIG_LEAVES_PER_DEPARTMENT
    sizes = list(_big_jobs(pods))
    jobs = [
        gpu_job(f"job-{i:06d}", f"queue-{i % leaves}", len(sizes) - i, pods=size, gpu=gpu)
        for i, (size, gpu) in enumerate(sizes)
    ]
    queues = department_queues(total, BIG_DEPARTMENTS, BIG_LEAVES_PER_DEPARTMENT)
    return _cluster(nodes, queues, jobs), FULL_CYCLE


def pools(count: int, nodes: int, jobs: int) -> Built:
    """`count` node pools (`kai.scheduler/node-pool: pool-P`), each a kai-full-cycle-NxJ of its own.

    Every node, queue and job of pool P is named `pool-P-...` and labelled with the pool, so
    each pool's shard (`--shard-by node-pool`) schedules one half-busy cluster alone.
    """
    state = ClusterState(now=SCENARIO_NOW)
    for index in range(count):
        part, _ = kai_full_cycle(nodes, jobs)
        pool = f"pool-{index}"
        renamed = {node.name: f"{pool}-{node.name}" for node in part.nodes}
        state.nodes += [
            replace(n, name=renamed[n.name], labels={NODE_TYPE_LABEL: renamed[n.name], NODE_POOL_LABEL: pool})
            for n in part.nodes
        ]
        state.queues += [
            replace(q, name=f"{pool}-{q.name}", parent=q.parent and f"{pool}-{q.parent}", node_pool=pool)
            for q in part.queues
        ]
        for job in part.jobs:
            for task in job.tasks:
                task.name, task.node = f"{pool}-{task.name}", task.node and renamed[task.node]
            state.jobs.append(
                replace(job, name=f"{pool}-{job.name}", queue=f"{pool}-{job.queue}", node_pool=pool)
            )
    return state, FULL_CYCLE


SHAPES: dict[str, tuple[str, Callable[..., Built]]] = {
    "kai-allocate-NxJ": (r"kai-allocate-(\d+)x(\d+)", kai_allocate),
    "kai-gang-NxJxP": (r"kai-gang-(\d+)x(\d+)x(\d+)", kai_gang),
    "kai-full-cycle-NxJ": (r"kai-full-cycle-(\d+)x(\d+)", kai_full_cycle),
    "kai-reclaim-large-N": (r"kai-reclaim-large-(\d+)", kai_reclaim_large),
    "fill-NxJ": (r"fill-(\d+)x(\d+)", fill),
    "affinity-NxP": (r"affinity-(\d+)x(\d+)", affinity),
    "spread-NxP": (r"spread-(\d+)x(\d+)", spread),
    "reclaim-NxP": (r"reclaim-(\d+)x(\d+)", reclaim),
    "gang-N": (r"gang-(\d+)", gang),
    "big-NxJ": (r"big-(\d+)x(\d+)", big),
    "pools-PxNxJ": (r"pools-(\d+)x(\d+)x(\d+)", pools),
}
"""Shape families by usage: the name pattern (sizes as groups, in builder argument order) and builder."""


def build_shape(name: str) -> Shape:
    for pattern, builder in SHAPES.values():
        match = re.fullmatch(pattern, name)
        if match:
            sizes = [int(g) for g in match.groups()]
            if min(sizes) < 1:
                raise ValueError(f"shape {name!r}: every size must be at least 1")
            state, actions = builder(*sizes)
            return Shape(name, state, actions)
    raise ValueError(f"unknown shape {name!r}; known shapes: {', '.join(SHAPES)}")
