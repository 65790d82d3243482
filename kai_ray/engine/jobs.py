"""Session-side jobs and tasks: the mutable view the actions work on.

A `Task` carries its placement (status, node row, GPU groups) which the
session changes through one primitive, so every change can be undone.
The PodGroup tree is rebuilt here with links from each pod set to its
tasks, because gang rules (§8) count tasks per pod set constantly.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import numpy as np

from kai_ray.identity_cache import IdentityCache
from kai_ray.model.objects import (
    ACTIVE_ALLOCATED,
    ACTIVE_USED,
    ALIVE,
    PENDING,
    JobSpec,
    PodSetSpec,
    SubGroupSetSpec,
    TaskSpec,
    TaskStatus,
    TopologyConstraintSpec,
)
from kai_ray.model.resources import CPU, GPU, MEMORY, NUM_RESOURCES, PODS

if TYPE_CHECKING:
    from kai_ray.engine.booking import JobBooking
    from kai_ray.engine.node_finder import ShapeKey
    from kai_ray.engine.plan import TaskState
    from kai_ray.engine.queues import Charge
    from kai_ray.engine.requests import FairnessFloats


UNGATED_ALIVE = ALIVE - {TaskStatus.GATED}
"""The statuses `PodSet.alive` counts, one set: every allocate asks it of every pending job's pod
sets, and a second test per task read the enum's member off its class."""


class OrderableJob(Protocol):
    """What job ordering reads: a victim's not-yet-taken remainder is ordered like a job."""

    @property
    def spec(self) -> JobSpec: ...

    @property
    def name(self) -> str: ...

    def elastic_rank(self) -> int: ...


@dataclass(eq=False, slots=True)
class Task:
    spec: TaskSpec
    job: Job
    uid: int
    status: TaskStatus
    node: int | None
    groups: tuple[str, ...]
    request: np.ndarray
    pod_set: PodSet | None = None
    is_shared_gpu: bool = field(init=False)
    """Its spec's `is_shared_gpu`, read once: the placement path asks it several times per pod,
    and a spec never changes (a changed pod is a new spec)."""
    facts: SpecFacts = field(init=False)
    """What the engine derives from its spec, kept per spec (`spec_facts`): among them its
    request in plain floats, which node rows are charged and compared with."""

    def __post_init__(self) -> None:
        self.is_shared_gpu = self.spec.is_shared_gpu
        self.facts = spec_facts.of(self.spec)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def needs_gpu(self) -> bool:
        return spec_needs_gpu(self.spec)

    def gpu_memory_per_device(self, node_gpu_memory: float) -> float:
        """MiB this task takes on each shared device of a node with that GPU memory."""
        return self.spec.gpu_memory_per_device(node_gpu_memory)

    def gpu_portion(self, node_gpu_memory: float) -> float:
        return self.spec.gpu_portion(node_gpu_memory)

    def accepted_gpus(self, node_gpu_memory: float) -> float:
        return self.spec.accepted_gpus(node_gpu_memory)


@dataclass(eq=False, slots=True)
class PodSet:
    name: str
    min_available: int
    tasks: list[Task] = field(default_factory=list)
    topology: TopologyConstraintSpec | None = None

    def count(self, statuses: frozenset[TaskStatus]) -> int:
        # A plain loop, not a generator under `sum` nor a list comprehension (a function call of
        # its own in CPython 3.11): gang rules and job order count a pod set's few tasks many
        # times per placement.
        count = 0
        for task in self.tasks:
            if task.status in statuses:
                count += 1
        return count

    def active_allocated(self) -> int:
        return self.count(ACTIVE_ALLOCATED)

    def min_satisfied(self) -> bool:
        return self.active_allocated() >= self.min_available

    def gang_satisfied(self) -> bool:
        return self.count(ACTIVE_USED) >= self.min_available

    def alive(self) -> int:
        """Pods that exist and are not gated: what a gang minimum can be met with."""
        return self.count(UNGATED_ALIVE)

    def ready(self) -> bool:
        """`alive() >= min_available`, counted here: every allocate asks it of every pending job,
        and the two calls through `alive` and `count` cost more than the loop."""
        alive = 0
        for task in self.tasks:
            if task.status in UNGATED_ALIVE:
                alive += 1
        return alive >= self.min_available

    def pending(self) -> list[Task]:
        return [t for t in self.tasks if t.status == PENDING]


@dataclass(eq=False, slots=True)
class SubGroupSet:
    name: str
    min_subgroups: int | None
    sets: list[SubGroupSet]
    pod_sets: list[PodSet]
    topology: TopologyConstraintSpec | None = None

    @property
    def members(self) -> list[SubGroupSet | PodSet]:
        return [*self.sets, *self.pod_sets]

    def min_members(self) -> int:
        # Counted without building `members`: asked of every job on each readiness and gang check.
        return len(self.sets) + len(self.pod_sets) if self.min_subgroups is None else self.min_subgroups

    def satisfied_members(self) -> int:
        return len([m for m in self.members if m.min_satisfied()])

    def min_satisfied(self) -> bool:
        return self.satisfied_members() >= self.min_members()

    def ready(self) -> bool:
        if not self.sets and len(self.pod_sets) == 1:
            # One pod set (most jobs): counted without the members list; asked of every
            # pending job each allocate.
            return int(self.pod_sets[0].ready()) >= self.min_members()
        return len([m for m in self.members if m.ready()]) >= self.min_members()

    def all_pod_sets(self) -> list[PodSet]:
        found: list[PodSet] = []
        for child in self.sets:
            found.extend(child.all_pod_sets())
        found.extend(self.pod_sets)
        return found


@dataclass(eq=False, slots=True)
class Job:
    spec: JobSpec
    root: SubGroupSet
    tasks: list[Task] = field(default_factory=list)
    pod_sets: dict[str, PodSet] = field(default_factory=dict)
    last_start: float | None = None
    plan_states: dict[tuple[str, str], TaskState] | None = None
    """Its tasks' states in the last plan that saw it: still true while none of them moved."""
    stale: bool | None = None
    """Whether it was a stale gang when last checked: still true while none of its tasks moved."""
    booking: JobBooking | None = None
    """What its tasks held when its first session opened: still true while none of them moved."""
    facts: JobFacts = field(init=False)
    """What the engine derives from its spec, kept per spec (`job_facts`)."""

    def __post_init__(self) -> None:
        self.facts = job_facts.of(self.spec)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def key(self) -> str:
        """namespace/name: names alone repeat across namespaces."""
        return self.spec.key

    @property
    def queue(self) -> str:
        return self.spec.queue

    def pending_tasks(self) -> list[Task]:
        return [t for t in self.tasks if t.status == PENDING]

    def has_status(self, statuses: frozenset[TaskStatus]) -> bool:
        # A plain loop, not `any` over a generator or a list comprehension (each a call of its
        # own in CPython 3.11): asked of every job the allocate action attempts.
        for task in self.tasks:  # noqa: SIM110
            if task.status in statuses:
                return True
        return False

    def is_elastic(self) -> bool:
        return any(p.min_available < len(p.tasks) for p in self.pod_sets.values())

    def elastic_rank(self) -> int:
        # A plain loop, not a list comprehension (a call of its own in CPython 3.11): job order
        # asks it of every pending job each action.
        # Each pod set's allocated pods counted in place, not through `active_allocated` and
        # `count` (two calls per pod set).
        counts = []
        for pod_set in self.pod_sets.values():
            allocated = 0
            for task in pod_set.tasks:
                if task.status in ACTIVE_ALLOCATED:
                    allocated += 1
            counts.append((allocated, pod_set.min_available))
        return elastic_rank(counts)

    def ready(self) -> bool:
        """Whether enough pods exist for the gang minimum. A job of one pod set and no SubGroup
        minimum (most jobs) asks its pod set alone, as its tree would: the allocate action asks
        every pending job, and the tree's two calls cost more than the answer."""
        root = self.root
        if not root.sets and len(root.pod_sets) == 1 and root.min_subgroups is None:
            return root.pod_sets[0].ready()
        return root.ready()

    def gang_satisfied(self) -> bool:
        return all(p.gang_satisfied() for p in self.pod_sets.values())


def elastic_rank(counts: list[tuple[int, int]]) -> int:
    """0 below the gang minimum, 1 exactly at it, 2 above (§5.3 elastic order); pairs are (have, need)."""
    # One loop, not `any` and `all` over generators: job order asks it of every pending job.
    rank = 1
    for have, need in counts:
        if have < need:
            return 0
        if have != need:
            rank = 2
    return rank


def spec_needs_gpu(spec: TaskSpec) -> bool:
    """Whether a pod of this spec asks for GPUs, whole, fractional or by memory."""
    return spec.gpu > 0 or spec.gpu_memory_mib > 0


def _compute_task_request(spec: TaskSpec) -> np.ndarray:
    vec = np.zeros(NUM_RESOURCES)
    vec[CPU] = spec.cpu_millis
    vec[MEMORY] = spec.memory
    vec[GPU] = 0.0 if spec.is_shared_gpu else spec.gpu
    vec[PODS] = 1.0
    vec.flags.writeable = False
    return vec


task_request = IdentityCache(_compute_task_request)
"""The node-vector request: whole GPUs only; shared GPUs are tracked per group.  Read-only, and
remembered per pod spec: a scheduler's specs outlive its cycles (`convert.live`), and building
one array per pod per cycle was a tenth of a 40,000-pod session."""


RequestFloats = tuple[float, float, float, float]
"""A node-vector request in plain floats: cpu, memory, GPUs, pod slots."""


class SpecFacts:
    """What the engine derives from one pod spec, each a pure function of the spec, kept together
    per spec (`spec_facts`) and reached from the task in one attribute read.

    Why: the per-pod path asked three identity caches of the same spec (its shape key, its queue
    charge, its lone fairness request), each a call, an `id`, a dict lookup and a weak reference's
    call, about 1% of a small cluster's cycle. A task is built with its spec's facts (one lookup),
    and the facts a session asks for later are computed the first time (None until then) and kept
    here alone: a spec seen for the first time costs one identity-cache entry, not one per fact
    (each a weak reference with its callback, a fifth of a new pod's first cycle). Specs are never
    mutated (a changed pod is a new spec), as every identity cache assumes.
    """

    __slots__ = ("lone_request", "queue_charge", "request_floats", "shape_key")

    def __init__(self, spec: TaskSpec) -> None:
        cpu, memory, gpus, pods = task_request(spec).tolist()
        self.request_floats: RequestFloats = (cpu, memory, gpus, pods)
        """`task_request` in plain floats: node rows are charged and compared float by float,
        and `tolist` per pod placed cost about as much as the arithmetic."""
        self.shape_key: ShapeKey | None = None
        """`node_finder.shape_key` of the spec, once a node finder asked (`key_of`)."""
        self.queue_charge: Charge | None = None
        """`requests.whole_gpu_charge` of a spec that shares no GPU, once a placement charged it."""
        self.lone_request: FairnessFloats | None = None
        """`requests.lone_request_floats` of a spec that shares no GPU, once a job queue asked."""


spec_facts = IdentityCache(SpecFacts)
"""Each pod spec's `SpecFacts`, remembered per spec: a scheduler's specs outlive its cycles."""


class JobFacts:
    """What the engine keeps per PodGroup spec across sessions (`job_facts`), as `SpecFacts` does
    per pod spec, reached from the job in one attribute read (`Job.facts`): every allocate asks
    them of every job it attempts, and an identity-cache lookup each cost more than the answer."""

    __slots__ = ("names_topology", "pod_constraints", "standing_order_key")

    def __init__(self, spec: JobSpec) -> None:
        self.names_topology = names_topology(spec.subgroups)
        self.pod_constraints = any(task.has_pod_constraints for task in spec.tasks)
        """Whether a pod of it carries a rule that reads other pods or extended resources (a
        session without any such pod builds no pod index)."""
        """Whether a (sub)group of its tree names a topology (the topology plugin's
        `splits_nodes`)."""
        self.standing_order_key: tuple[object, tuple[float | str, ...]] | None = None
        """The job order key of a job whose pods stand as the spec lists them, with the signature
        of the ordering plugins it was made under (`Session.standing_job_order_key`), once a
        session asked (None until then)."""


def names_topology(tree: SubGroupSetSpec) -> bool:
    """Whether a (sub)group of the tree names a topology."""
    groups: list[SubGroupSetSpec | PodSetSpec] = [tree]
    while groups:
        group = groups.pop()
        if group.topology is not None and group.topology.topology:
            return True
        if isinstance(group, SubGroupSetSpec):
            groups.extend(group.subgroup_sets)
            groups.extend(group.pod_sets)
    return False


job_facts = IdentityCache(JobFacts)
"""Each PodGroup spec's `JobFacts`, remembered per spec: a PodGroup's spec outlives the cycles
that leave it unchanged, and most pending jobs wait through many."""


def build_job(spec: JobSpec, node_index: dict[str, int], first_uid: int) -> Job:
    root = _build_tree(spec.subgroups)
    job = Job(spec=spec, root=root, last_start=spec.last_start)
    job.pod_sets = {p.name: p for p in root.all_pod_sets()}
    for offset, task_spec in enumerate(spec.tasks):
        node = node_index.get(task_spec.node) if task_spec.node is not None else None
        task = Task(
            spec=task_spec,
            job=job,
            uid=first_uid + offset,
            status=task_spec.status,
            node=node,
            groups=task_spec.gpu_groups,
            request=task_request(task_spec),
        )
        task.pod_set = job.pod_sets[task_spec.subgroup]
        task.pod_set.tasks.append(task)
        job.tasks.append(task)
    return job


def _build_tree(spec: SubGroupSetSpec) -> SubGroupSet:
    return SubGroupSet(
        name=spec.name,
        min_subgroups=spec.min_subgroups,
        sets=[_build_tree(child) for child in spec.subgroup_sets],
        pod_sets=[PodSet(p.name, p.min_available, topology=p.topology) for p in spec.pod_sets],
        topology=spec.topology,
    )
