"""Random small clusters for property tests: filled by the scheduler, then new jobs arrive.

The starting point is one KAI could reach (allocate only, then the bound pods
start running), so properties are checked from realistic states.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

from builders import NO_LIMIT, ClusterBuilder, cluster, config
from hypothesis import strategies as st

from kai_ray.cluster.sim.simulator import CycleResult, SimulatedCluster
from kai_ray.distributed.executor import Executor
from kai_ray.engine.plan import Plan
from kai_ray.model.objects import ClusterState, TopologyConstraintSpec

ALL_ACTIONS = ("allocate", "consolidation", "reclaim", "preempt", "stalegangeviction")
QUEUES = ("d1/a", "d1/b", "d2/c")
RACK = "example.com/rack"
TOPOLOGY_CHOICES = (
    None,
    TopologyConstraintSpec("racks", required_level=RACK),
    TopologyConstraintSpec("racks", preferred_level=RACK),
)
"""A job's constraint: none, all pods in one rack, or one rack if possible. Node i is in rack i % 2."""


@dataclass(frozen=True)
class JobDraw:
    queue: int
    pods: int
    min_member: int
    gpus: float
    priority: int
    preemptible: bool
    topology: int
    """Index into `TOPOLOGY_CHOICES`."""


@dataclass(frozen=True)
class QueueDraw:
    quota: float
    limit: float
    weight: float


job_draws = st.builds(
    JobDraw,
    queue=st.integers(0, len(QUEUES) - 1),
    pods=st.integers(1, 4),
    min_member=st.integers(1, 4),
    gpus=st.sampled_from([0.5, 1.0, 2.0]),
    priority=st.sampled_from([50, 75, 100, 125]),
    preemptible=st.booleans(),
    topology=st.sampled_from([0, 0, 1, 2]),
)
queue_draws = st.builds(
    QueueDraw,
    quota=st.sampled_from([0.0, 1.0, 2.0, 4.0, NO_LIMIT]),
    limit=st.sampled_from([NO_LIMIT, NO_LIMIT, 3.0, 6.0]),
    weight=st.sampled_from([0.0, 1.0, 2.0]),
)
scenarios = st.tuples(
    st.lists(st.integers(1, 4), min_size=1, max_size=3),
    st.lists(queue_draws, min_size=len(QUEUES), max_size=len(QUEUES)),
    st.lists(job_draws, min_size=2, max_size=7),
    st.lists(job_draws, min_size=1, max_size=4),
)


def add_jobs(builder: ClusterBuilder, jobs: list[JobDraw], prefix: str, created: float) -> None:
    for index, draw in enumerate(jobs):
        builder.job(
            f"{prefix}{index}",
            queue=QUEUES[draw.queue].split("/")[1],
            pods=draw.pods,
            min_member=min(draw.min_member, draw.pods),
            gpus=draw.gpus,
            priority=draw.priority,
            preemptible=draw.preemptible,
            created=created + index,
            topology=TOPOLOGY_CHOICES[draw.topology],
        )


def build(nodes: list[int], queues: list[QueueDraw], jobs: list[JobDraw]) -> ClusterState:
    builder = cluster(now=10_000.0).topology("racks", RACK)
    for index, gpus in enumerate(nodes):
        builder.node(f"n{index}", gpus=gpus, labels={RACK: f"r{index % 2}"})
    builder.queue("d1", gpu_quota=NO_LIMIT).queue("d2", gpu_quota=NO_LIMIT, created=1)
    for index, (path, draw) in enumerate(zip(QUEUES, queues, strict=True)):
        parent, name = path.split("/")
        builder.queue(
            name,
            parent=parent,
            created=index,
            gpu_quota=draw.quota,
            gpu_limit=draw.limit,
            gpu_weight=draw.weight,
        )
    add_jobs(builder, jobs, "old", 0.0)
    return builder.build()


def running_cluster(nodes: list[int], queues: list[QueueDraw], first: list[JobDraw]) -> SimulatedCluster:
    simulated = SimulatedCluster(build(nodes, queues, first), config(actions=("allocate",)))
    simulated.run_cycle()
    simulated.advance()
    return simulated


def with_arrivals(simulated: SimulatedCluster, later: list[JobDraw]) -> ClusterState:
    state = copy.deepcopy(simulated.state)
    builder = cluster(now=state.now)
    add_jobs(builder, later, "new", 1000.0)
    state.jobs.extend(builder.build().jobs)
    return state


def full_cycle(state: ClusterState, executor: Executor | None = None) -> CycleResult:
    return SimulatedCluster(copy.deepcopy(state), config(actions=ALL_ACTIONS), executor).run_cycle()


def plan_facts(plan: Plan) -> tuple[object, ...]:
    return (plan.binds, plan.pipelined, plan.evictions, plan.pending_reasons)
