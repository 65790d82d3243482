"""The compiled, columnar snapshot a scheduling session starts from.

Nodes become rows of numpy arrays sorted by name, so node-dimension work in
the engine is one array expression and ties break by row index (= name).
Jobs keep their tasks as small objects because gang logic walks them one
by one anyway. Malformed objects are dropped here, with a recorded problem,
so the engine never sees them and never raises on them; a dropped pod that
sits on a node still holds what it requested there (it becomes a `HeldPod`),
so dropping it never frees capacity it occupies.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from kai_ray.model.objects import (
    OCCUPYING,
    ClusterState,
    HeldPod,
    JobSpec,
    NodeSpec,
    QueueSpec,
    SubGroupSetSpec,
    TaskSpec,
    TopologySpec,
)
from kai_ray.model.resources import CPU, GPU, MEMORY, NUM_RESOURCES, PODS


@dataclass(frozen=True)
class Problem:
    """Why an object was left out of the snapshot."""

    kind: str
    name: str
    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.kind}/{self.name}: {self.field}: {self.message}"


@dataclass
class NodeTable:
    """Static node facts, one row per node, rows in name order."""

    names: list[str]
    allocatable: np.ndarray
    gpu_memory: np.ndarray
    gpu_memory_synced: np.ndarray
    schedulable: np.ndarray
    specs: list[NodeSpec]
    index: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.index = {name: i for i, name in enumerate(self.names)}

    def __len__(self) -> int:
        return len(self.names)


@dataclass
class Snapshot:
    """Everything a session reads, validated and indexed."""

    nodes: NodeTable
    queues: dict[str, QueueSpec]
    children: dict[str, list[str]]
    jobs: list[JobSpec]
    now: float
    problems: list[Problem]
    held: list[HeldPod] = field(default_factory=list)
    """Pods on this snapshot's nodes that hold resources but are not scheduled (see `HeldPod`)."""
    topologies: dict[str, TopologySpec] = field(default_factory=dict)
    """Topology objects by name; a constraint naming a missing one is the job's fit error, not a problem."""

    def is_leaf(self, queue: str) -> bool:
        return queue in self.queues and not self.children[queue]

    def ancestry(self, queue: str) -> list[str]:
        """The queue and its ancestors, leaf first."""
        chain = []
        current: str | None = queue
        while current is not None:
            chain.append(current)
            current = self.queues[current].parent
        return chain


def node_table(nodes: list[NodeSpec]) -> NodeTable:
    ordered = sorted(nodes, key=lambda n: n.name)
    alloc = np.zeros((len(ordered), NUM_RESOURCES))
    for i, node in enumerate(ordered):
        alloc[i, CPU] = node.cpu_millis
        alloc[i, MEMORY] = node.memory
        alloc[i, GPU] = node.gpus
        alloc[i, PODS] = node.max_pods
    return NodeTable(
        names=[n.name for n in ordered],
        allocatable=alloc,
        gpu_memory=np.array([n.gpu_memory_mib for n in ordered], dtype=np.float64),
        gpu_memory_synced=np.array([n.gpu_memory_synced for n in ordered], dtype=bool),
        schedulable=np.array([n.ready and not n.unschedulable for n in ordered], dtype=bool),
        specs=ordered,
    )


def compile_snapshot(state: ClusterState) -> Snapshot:
    return SnapshotCompiler().compile(state)


@dataclass(frozen=True)
class _CompiledJob:
    source: JobSpec
    valid: JobSpec | None
    problems: tuple[Problem, ...]
    held: tuple[HeldPod, ...]


class SnapshotCompiler:
    """`compile_snapshot`, remembering between calls what each input compiled to.

    Why: a scheduler compiles every cycle a state in which almost nothing changed, and
    `LiveCluster` hands back the very same node list, queue list and job objects for what did
    not change.  The node table and queue tree are compiled again only for a new list, each job
    only when it is a new object or either of those changed; the snapshot is the one
    `compile_snapshot` gives (same rows, jobs, problems, order).
    """

    def __init__(self) -> None:
        self._nodes: tuple[list[NodeSpec], NodeTable, list[Problem]] | None = None
        self._queues: (
            tuple[list[QueueSpec], dict[str, QueueSpec], dict[str, list[str]], list[Problem]] | None
        ) = None
        self._jobs: dict[int, _CompiledJob] = {}

    def compile(self, state: ClusterState) -> Snapshot:
        problems: list[Problem] = []
        table, node_problems, nodes_changed = self._node_table(state.nodes)
        queues, children, queue_problems, queues_changed = self._queue_tree(state.queues)
        problems.extend(node_problems)
        problems.extend(queue_problems)
        known = {} if nodes_changed or queues_changed else self._jobs
        compiled: dict[int, _CompiledJob] = {}
        held = [pod for pod in state.held if pod.task.node in table.index]
        jobs = []
        for job in state.jobs:
            identity = id(job)
            entry = known.get(identity)
            if entry is None or entry.source is not job:
                entry = _compile_job(job, queues, children, table)
            compiled[identity] = entry
            if entry.valid is not None:
                jobs.append(entry.valid)
            if entry.problems:
                problems.extend(entry.problems)
            if entry.held:
                held.extend(entry.held)
        self._jobs = compiled
        topologies = {t.name: t for t in sorted(state.topologies, key=lambda t: t.name)}
        return Snapshot(table, queues, children, jobs, state.now, problems, held, topologies)

    def _node_table(self, nodes: list[NodeSpec]) -> tuple[NodeTable, list[Problem], bool]:
        if self._nodes is not None and self._nodes[0] is nodes:
            return self._nodes[1], self._nodes[2], False
        problems: list[Problem] = []
        table = node_table(_unique_nodes(nodes, problems))
        self._nodes = (nodes, table, problems)
        return table, problems, True

    def _queue_tree(
        self, specs: list[QueueSpec]
    ) -> tuple[dict[str, QueueSpec], dict[str, list[str]], list[Problem], bool]:
        if self._queues is not None and self._queues[0] is specs:
            return self._queues[1], self._queues[2], self._queues[3], False
        problems: list[Problem] = []
        queues = _valid_queues(specs, problems)
        children: dict[str, list[str]] = {name: [] for name in queues}
        for queue in sorted(queues.values(), key=lambda q: (q.created, q.name)):
            if queue.parent is not None:
                children[queue.parent].append(queue.name)
        self._queues = (specs, queues, children, problems)
        return queues, children, problems, True


def _compile_job(
    job: JobSpec, queues: dict[str, QueueSpec], children: dict[str, list[str]], table: NodeTable
) -> _CompiledJob:
    problems: list[Problem] = []
    valid = _valid_job(job, queues, children, table, problems)
    return _CompiledJob(job, valid, tuple(problems), tuple(_dropped_but_placed(job, valid, table)))


def _dropped_but_placed(job: JobSpec, kept: JobSpec | None, nodes: NodeTable) -> list[HeldPod]:
    """The job's pods left out of the snapshot (each with a problem) that still occupy a node."""
    kept_names = {task.name for task in kept.tasks} if kept is not None else set()
    return [
        HeldPod(job.namespace, task, foreign=False)
        for task in job.tasks
        if task.name not in kept_names and task.node in nodes.index and task.status in OCCUPYING
    ]


def _unique_nodes(nodes: list[NodeSpec], problems: list[Problem]) -> list[NodeSpec]:
    seen: dict[str, NodeSpec] = {}
    for node in nodes:
        if node.name in seen:
            problems.append(
                Problem("Node", node.name, "metadata.name", "duplicate node; the later one is ignored")
            )
            continue
        if min(node.cpu_millis, node.memory, node.gpus, node.max_pods) < 0:
            problems.append(Problem("Node", node.name, "status.allocatable", "negative allocatable resource"))
            continue
        seen[node.name] = node
    return list(seen.values())


def _valid_queues(queues: list[QueueSpec], problems: list[Problem]) -> dict[str, QueueSpec]:
    """Drops duplicate queues, parent cycles and orphans (with all their descendants)."""
    by_name: dict[str, QueueSpec] = {}
    for queue in queues:
        if queue.name in by_name:
            problems.append(
                Problem("Queue", queue.name, "metadata.name", "duplicate queue; the later one is ignored")
            )
            continue
        by_name[queue.name] = queue
    valid: dict[str, QueueSpec] = {}
    for name in sorted(by_name):
        reason = _queue_chain_problem(name, by_name)
        if reason is None:
            valid[name] = by_name[name]
        else:
            problems.append(Problem("Queue", name, "spec.parentQueue", reason))
    return valid


def _queue_chain_problem(name: str, by_name: dict[str, QueueSpec]) -> str | None:
    seen = {name}
    current = by_name[name].parent
    while current is not None:
        if current not in by_name:
            return f"ancestor queue {current!r} does not exist"
        if current in seen:
            return "the queue is part of a parent cycle"
        seen.add(current)
        current = by_name[current].parent
    return None


def _valid_job(
    job: JobSpec,
    queues: dict[str, QueueSpec],
    children: dict[str, list[str]],
    nodes: NodeTable,
    problems: list[Problem],
) -> JobSpec | None:
    """The job without its uninterpretable pods, or None when the job itself is unusable."""

    def report(field_name: str, message: str) -> None:
        problems.append(Problem("PodGroup", job.key, field_name, message))

    if job.queue not in queues:
        report("spec.queue", f"queue {job.queue!r} does not exist")
        return None
    if children[job.queue]:
        report("spec.queue", f"queue {job.queue!r} is not a leaf queue")
        return None
    tree_problem = _subgroup_tree_problem(job.subgroups)
    if tree_problem:
        report("spec.subGroups", tree_problem)
        return None
    pod_sets = {p.name for p in job.subgroups.all_pod_sets()}
    kept = []
    for task in job.tasks:
        task_problem = _task_problem(task, pod_sets, nodes)
        if task_problem:
            pod = f"{job.namespace}/{task.name}" if job.namespace else task.name
            problems.append(Problem("Pod", pod, *task_problem))
        else:
            kept.append(task)
    return job if len(kept) == len(job.tasks) else replace(job, tasks=kept)


def _subgroup_tree_problem(tree: SubGroupSetSpec) -> str | None:
    names: list[str] = []

    def walk(node: SubGroupSetSpec) -> str | None:
        members = len(node.subgroup_sets) + len(node.pod_sets)
        if node.min_subgroups is not None and not 0 <= node.min_subgroups <= members:
            return f"subgroup {node.name or '<root>'!r} needs {node.min_subgroups} of {members} members"
        for pod_set in node.pod_sets:
            if pod_set.min_available < 0:
                return f"subgroup {pod_set.name!r} has a negative minMember"
            names.append(pod_set.name)
        for child in node.subgroup_sets:
            names.append(child.name)
            found = walk(child)
            if found:
                return found
        return None

    found = walk(tree)
    if found:
        return found
    if len(names) != len(set(names)):
        return "subgroup names are not unique"
    return None


SUBGROUP_FIELD = "metadata.labels[kai.scheduler/subgroup-name]"
REQUESTS_FIELD = "spec.containers[].resources.requests"


def _task_problem(task: TaskSpec, pod_sets: set[str], nodes: NodeTable) -> tuple[str, str] | None:
    """(field, message) of the first thing that makes this pod unschedulable as written."""
    if task.subgroup not in pod_sets:
        return SUBGROUP_FIELD, f"names subgroup {task.subgroup!r} that the PodGroup does not have"
    if min(task.cpu_millis, task.memory, task.gpu, task.gpu_memory_mib) < 0:
        return REQUESTS_FIELD, "negative resource request"
    if task.gpu > 1 and not float(task.gpu).is_integer():
        return REQUESTS_FIELD, f"GPU request {task.gpu} is neither whole nor a fraction below 1"
    if (
        task.node is not None
        and task.node not in nodes.index
        and task.status.value not in ("Pending", "Gated")
    ):
        return "spec.nodeName", f"placed on node {task.node!r} that does not exist"
    return None
