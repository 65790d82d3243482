"""Fluent builders for engine tests: a cluster in three readable lines.

    state = (
        cluster().node("n1", gpus=8).queue("team-a", gpu_quota=4)
        .job("j1", queue="team-a", gpus=1, pods=4, min_member=4).build()
    )
    plan = run_cycle(state)

Defaults are chosen so that only what a test names can decide its outcome:
nodes have plenty of CPU, memory and pod slots; tasks ask for a little CPU and
memory; queues have **explicit** limits of -1 (no cap). KAI's own default for an
unset limit is 0, which means "nothing allowed" (spec §1.1, §21.3) - a test that
wants a cap passes it.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from kai_ray.api.config import DEFAULT_PLUGINS, PluginSpec, SchedulerConfig
from kai_ray.engine.cycle import open_session as _open_session
from kai_ray.engine.cycle import run_actions, schedule
from kai_ray.engine.jobs import Job, Task
from kai_ray.engine.plan import Plan
from kai_ray.engine.session import Session
from kai_ray.model.objects import (
    UNLIMITED,
    AffinityRequirement,
    ClusterState,
    JobSpec,
    NodeSelectorTerm,
    NodeSpec,
    PodSetSpec,
    QueueSpec,
    ResourceQuota,
    SubGroupSetSpec,
    Taint,
    TaskSpec,
    TaskStatus,
    Toleration,
    TopologyConstraintSpec,
    TopologySpec,
)
from kai_ray.model.snapshot import compile_snapshot

NO_LIMIT = UNLIMITED
"""-1: no cap. KAI's unset limit is 0 = nothing allowed, so builders always say -1 out loud."""

NODE_CPU_MILLIS = 256_000.0
NODE_MEMORY = 1_024e9
TASK_CPU_MILLIS = 100.0
TASK_MEMORY = 1e8

__all__ = [
    "NO_LIMIT",
    "ClusterBuilder",
    "binds",
    "cluster",
    "config",
    "find_job",
    "find_task",
    "open_session",
    "pipelined",
    "pod_set",
    "run_cycle",
    "run_with_session",
    "subgroup_set",
]


@dataclass
class _JobDraft:
    spec: JobSpec
    min_member: int | None
    explicit_tree: bool
    template: dict[str, object] = field(default_factory=dict)
    topology: TopologyConstraintSpec | None = None


class ClusterBuilder:
    """Collects nodes, queues and jobs; `build()` returns a fresh `ClusterState`."""

    def __init__(self, now: float = 0.0) -> None:
        self._now = now
        self._nodes: list[NodeSpec] = []
        self._queues: list[QueueSpec] = []
        self._jobs: list[_JobDraft] = []
        self._topologies: list[TopologySpec] = []

    def topology(self, name: str, *levels: str, aliases: dict[str, str] | None = None) -> ClusterBuilder:
        """A Topology object: node label keys from the coarsest level to the finest; aliases → label."""
        self._topologies.append(TopologySpec(name, levels, tuple((aliases or {}).items())))
        return self

    # ------------------------------------------------------------------ nodes
    def node(
        self,
        name: str,
        *,
        gpus: int = 0,
        cpu_millis: float = NODE_CPU_MILLIS,
        memory: float = NODE_MEMORY,
        gpu_memory_mib: int = 100,
        max_pods: int = 110,
        gpu_memory_synced: bool = True,
        labels: dict[str, str] | None = None,
        taints: Iterable[Taint] = (),
        unschedulable: bool = False,
        ready: bool = True,
        extended: dict[str, float] | None = None,
    ) -> ClusterBuilder:
        self._nodes.append(
            NodeSpec(
                name=name,
                cpu_millis=cpu_millis,
                memory=memory,
                gpus=gpus,
                gpu_memory_mib=gpu_memory_mib,
                max_pods=max_pods,
                gpu_memory_synced=gpu_memory_synced,
                labels=dict(labels or {}),
                taints=tuple(taints),
                unschedulable=unschedulable,
                ready=ready,
                extended=dict(extended or {}),
            )
        )
        return self

    # ------------------------------------------------------------------ queues
    def queue(
        self,
        name: str,
        *,
        parent: str | None = None,
        priority: int = 100,
        created: float = 0.0,
        gpu_quota: float = 0.0,
        gpu_limit: float = NO_LIMIT,
        gpu_weight: float = 1.0,
        cpu_quota: float = UNLIMITED,
        cpu_limit: float = NO_LIMIT,
        cpu_weight: float = 1.0,
        memory_quota: float = UNLIMITED,
        memory_limit: float = NO_LIMIT,
        memory_weight: float = 1.0,
        preempt_min_runtime: float | None = None,
        reclaim_min_runtime: float | None = None,
    ) -> ClusterBuilder:
        """A queue. GPU quota defaults to 0 (KAI's default); every limit defaults to -1 (no cap)."""
        self._queues.append(
            QueueSpec(
                name=name,
                parent=parent,
                priority=priority,
                created=created,
                gpu=ResourceQuota(gpu_quota, gpu_limit, gpu_weight),
                cpu=ResourceQuota(cpu_quota, cpu_limit, cpu_weight),
                memory=ResourceQuota(memory_quota, memory_limit, memory_weight),
                preempt_min_runtime=preempt_min_runtime,
                reclaim_min_runtime=reclaim_min_runtime,
            )
        )
        return self

    # ------------------------------------------------------------------ jobs
    def job(
        self,
        name: str,
        *,
        queue: str,
        pods: int = 1,
        gpus: float = 0.0,
        gpu_memory_mib: int = 0,
        gpu_devices: int = 1,
        cpu_millis: float = TASK_CPU_MILLIS,
        memory: float = TASK_MEMORY,
        min_member: int | None = None,
        subgroups: SubGroupSetSpec | None = None,
        priority: int = 50,
        preemptible: bool | None = None,
        created: float = 0.0,
        namespace: str = "",
        deleting: bool = False,
        status: TaskStatus = TaskStatus.PENDING,
        node: str | None = None,
        gpu_groups: tuple[str, ...] = (),
        node_selector: dict[str, str] | None = None,
        node_affinity: Iterable[AffinityRequirement] = (),
        tolerations: Iterable[Toleration] = (),
        started: float | None = None,
        preemption_delay: float | None = None,
        topology: TopologyConstraintSpec | None = None,
    ) -> ClusterBuilder:
        """A PodGroup with `pods` identical pods named `<job>-<i>`; `topology`: its job-level constraint.

        `gpus` is per pod (whole devices, or a fraction below 1). `min_member`
        defaults to every pod of the job (a full gang); `preemptible` defaults
        to `priority < 100` (spec §9). More pods, with other statuses, can be
        added with `.task(...)`, which inherits this job's requests.
        """
        spec = JobSpec(
            name=name,
            queue=queue,
            namespace=namespace,
            priority=priority,
            preemptible=priority < 100 if preemptible is None else preemptible,
            created=created,
            deleting=deleting,
            last_start=started,
            preemption_delay=preemption_delay,
        )
        if subgroups is not None:
            spec.subgroups = subgroups
        template: dict[str, object] = {
            "gpu": gpus,
            "gpu_memory_mib": gpu_memory_mib,
            "gpu_devices": gpu_devices,
            "cpu_millis": cpu_millis,
            "memory": memory,
            "node_selector": dict(node_selector or {}),
            "node_affinity": (NodeSelectorTerm(expressions=tuple(node_affinity)),) if node_affinity else (),
            "tolerations": tuple(tolerations),
        }
        self._jobs.append(_JobDraft(spec, min_member, subgroups is not None, template, topology))
        for _ in range(pods):
            self.task(status=status, node=node, gpu_groups=gpu_groups)
        return self

    def task(
        self,
        name: str | None = None,
        *,
        status: TaskStatus = TaskStatus.PENDING,
        node: str | None = None,
        gpu_groups: tuple[str, ...] = (),
        subgroup: str = "default",
        created: float = 0.0,
        task_priority: int | None = None,
        labels: dict[str, str] | None = None,
        **requests: object,
    ) -> ClusterBuilder:
        """One more pod for the last job; requests default to that job's (override e.g. `gpu=0.5`)."""
        draft = self._jobs[-1]
        values = {**draft.template, **requests}
        index = len(draft.spec.tasks)
        draft.spec.tasks.append(
            TaskSpec(
                name=name or f"{draft.spec.name}-{index}",
                status=status,
                node=node,
                gpu_groups=tuple(gpu_groups),
                subgroup=subgroup,
                created=created,
                task_priority=task_priority,
                labels=dict(labels or {}),
                **values,  # type: ignore[arg-type]
            )
        )
        return self

    def build(self) -> ClusterState:
        jobs = []
        for draft in self._jobs:
            spec = draft.spec
            if not draft.explicit_tree:
                minimum = len(spec.tasks) if draft.min_member is None else draft.min_member
                spec.subgroups = SubGroupSetSpec(pod_sets=(PodSetSpec("default", minimum),))
            if draft.topology is not None:
                spec.subgroups = replace(spec.subgroups, topology=draft.topology)
            jobs.append(spec)
        state = ClusterState(
            nodes=list(self._nodes),
            queues=list(self._queues),
            jobs=jobs,
            now=self._now,
            topologies=list(self._topologies),
        )
        return copy.deepcopy(state)


def cluster(now: float = 0.0) -> ClusterBuilder:
    return ClusterBuilder(now)


def pod_set(name: str, min_available: int, topology: TopologyConstraintSpec | None = None) -> PodSetSpec:
    return PodSetSpec(name, min_available, topology)


def subgroup_set(
    name: str = "",
    *members: SubGroupSetSpec | PodSetSpec,
    min_subgroups: int | None = None,
    topology: TopologyConstraintSpec | None = None,
) -> SubGroupSetSpec:
    """An inner node of a PodGroup tree; members are listed sets first, then pod sets (as KAI builds them)."""
    return SubGroupSetSpec(
        name=name,
        min_subgroups=min_subgroups,
        subgroup_sets=tuple(m for m in members if isinstance(m, SubGroupSetSpec)),
        pod_sets=tuple(m for m in members if isinstance(m, PodSetSpec)),
        topology=topology,
    )


# ---------------------------------------------------------------------- clusters several tests share


def two_nodes_one_busy() -> ClusterState:
    """Two 8-GPU nodes, six GPUs of n2 in use, one pending 1-GPU pod: binpack and spread disagree."""
    return (
        cluster()
        .node("n1", gpus=8)
        .node("n2", gpus=8)
        .queue("q")
        .job("busy", queue="q", gpus=1, pods=6, status=TaskStatus.RUNNING, node="n2")
        .job("new", queue="q", gpus=1)
        .build()
    )


def owner_and_borrower() -> ClusterState:
    """A queue without quota holds the only node's GPUs; the queue owning them asks: a reclaim."""
    return (
        cluster()
        .node("n1", gpus=2)
        .queue("owner", gpu_quota=2)
        .queue("borrower", gpu_quota=0)
        .job("borrowed", queue="borrower", gpus=2, status=TaskStatus.RUNNING, node="n1")
        .job("rightful", queue="owner", gpus=2)
        .build()
    )


# ---------------------------------------------------------------------- config and running


def config(
    *,
    gpu_placement: str = "binpack",
    cpu_placement: str = "binpack",
    gpu_sharing: str = "pack",
    predicates: bool = True,
    actions: tuple[str, ...] = ("allocate",),
    drop: Iterable[str] = (),
) -> SchedulerConfig:
    """KAI's default plugins with the given strategies; only `allocate` runs unless asked otherwise."""
    dropped = set(drop)
    if not predicates:
        dropped.add("predicates")
    plugins = []
    for name in DEFAULT_PLUGINS:
        if name in dropped:
            continue
        if name == "gpupack" and gpu_sharing == "spread":
            name = "gpuspread"
        arguments = {"gpu": gpu_placement, "cpu": cpu_placement} if name == "nodeplacement" else {}
        plugins.append(PluginSpec(name=name, arguments=arguments))
    return SchedulerConfig.model_validate(
        {
            "actions": actions,
            "plugins": plugins,
        }
    )


def open_session(state: ClusterState, cfg: SchedulerConfig | None = None) -> Session:
    """A session over the state, with plugins open but no action run (for statement-level tests)."""
    return _open_session(compile_snapshot(state), cfg or config())


def run_cycle(state: ClusterState, cfg: SchedulerConfig | None = None) -> Plan:
    """One scheduling cycle, exactly as a backend runs it."""
    return schedule(compile_snapshot(state), cfg or config())


def run_with_session(state: ClusterState, cfg: SchedulerConfig | None = None) -> tuple[Session, Plan]:
    """One cycle, keeping the session so tests can look at its end state (queue accounting, GPU groups)."""
    session = open_session(state, cfg)
    return session, run_actions(session)


def binds(plan: Plan) -> dict[str, str]:
    """Task name → node for every bind of the plan."""
    return {b.task: b.node for b in plan.binds}


def pipelined(plan: Plan) -> dict[str, str]:
    return {b.task: b.node for b in plan.pipelined}


def find_task(session: Session, task_name: str) -> Task:
    for job in session.jobs:
        for task in job.tasks:
            if task.name == task_name:
                return task
    raise KeyError(task_name)


def find_job(session: Session, job_name: str) -> Job:
    for job in session.jobs:
        if job.name == job_name:
            return job
    raise KeyError(job_name)
