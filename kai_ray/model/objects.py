"""Plain cluster objects: the boundary between backends and the engine.

Every backend (the simulated cluster's scenario and manifest loaders, the
Kubernetes informer cache) turns what it sees into these dataclasses, already
normalised to internal units: CPU in millicores, memory in bytes, GPUs in
devices, GPU memory in MiB, time in seconds. `compile_snapshot` then builds
the columnar `Snapshot` from a `ClusterState`. Keeping this layer free of
Kubernetes and scenario specifics is what lets one engine serve all backends.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field

UNLIMITED = -1.0
"""Quota or limit value meaning "no bound" (KAI's -1)."""


class TaskStatus(enum.StrEnum):
    """Pod statuses as KAI names them (spec §1.3)."""

    PENDING = "Pending"
    GATED = "Gated"
    RUNNING = "Running"
    BOUND = "Bound"
    BINDING = "Binding"
    ALLOCATED = "Allocated"
    PIPELINED = "Pipelined"
    RELEASING = "Releasing"
    STUCK_IN_RELEASING = "StuckInReleasing"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


PENDING, ALLOCATED, PIPELINED, RELEASING = (
    TaskStatus.PENDING,
    TaskStatus.ALLOCATED,
    TaskStatus.PIPELINED,
    TaskStatus.RELEASING,
)
"""The statuses the engine's per-pod paths compare with, as module constants: a member read
off its enum class (`TaskStatus.PENDING`) costs several times a global's lookup in CPython
3.11, and placing a pod compares a dozen times. The hottest of those compare by identity
(`is`): a status is always a member (`TaskStatus(value)` gives the member itself, and so does
unpickling one), and `==` on a `str` subclass takes the interpreter's generic comparison."""


ACTIVE_USED = frozenset(
    {
        TaskStatus.ALLOCATED,
        TaskStatus.PIPELINED,
        TaskStatus.BINDING,
        TaskStatus.BOUND,
        TaskStatus.RUNNING,
        TaskStatus.RELEASING,
        TaskStatus.STUCK_IN_RELEASING,
    }
)
ACTIVE_ALLOCATED = frozenset(
    {TaskStatus.ALLOCATED, TaskStatus.PIPELINED, TaskStatus.BINDING, TaskStatus.BOUND, TaskStatus.RUNNING}
)
ALIVE = frozenset(
    {
        TaskStatus.ALLOCATED,
        TaskStatus.PIPELINED,
        TaskStatus.BINDING,
        TaskStatus.BOUND,
        TaskStatus.RUNNING,
        TaskStatus.PENDING,
        TaskStatus.GATED,
    }
)
QUEUE_CHARGING = frozenset({TaskStatus.ALLOCATED, TaskStatus.BINDING, TaskStatus.BOUND, TaskStatus.RUNNING})
OCCUPYING = ACTIVE_USED


@dataclass(frozen=True)
class ResourceQuota:
    """One resource of a queue: deserved quota, hard limit and surplus weight."""

    quota: float = 0.0
    limit: float = 0.0
    over_quota_weight: float = 0.0


@dataclass(frozen=True)
class QueueSpec:
    """A queue of the hierarchy; memory quota/limit already in bytes."""

    name: str
    parent: str | None = None
    priority: int = 100
    created: float = 0.0
    gpu: ResourceQuota = ResourceQuota(UNLIMITED, UNLIMITED, 1.0)
    cpu: ResourceQuota = ResourceQuota(UNLIMITED, UNLIMITED, 1.0)
    memory: ResourceQuota = ResourceQuota(UNLIMITED, UNLIMITED, 1.0)
    preempt_min_runtime: float | None = None
    reclaim_min_runtime: float | None = None
    node_pool: str = ""
    """The queue's node-pool label value ("" = unlabelled): only that pool's shard sees it."""


@dataclass(frozen=True)
class Taint:
    key: str
    value: str = ""
    effect: str = "NoSchedule"


@dataclass(frozen=True)
class Toleration:
    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""


@dataclass(frozen=True)
class AffinityRequirement:
    """One node-selector requirement: a label (or, in `NodeSelectorTerm.fields`, a field) with an
    operator (In, NotIn, Exists, DoesNotExist, Gt, Lt) and its values."""

    key: str
    operator: str
    values: tuple[str, ...] = ()


@dataclass(frozen=True)
class NodeSelectorTerm:
    """One `nodeSelectorTerms` entry: its expressions (on labels) and fields (only `metadata.name`)
    are ANDed. A term with neither matches no node, as in Kubernetes."""

    expressions: tuple[AffinityRequirement, ...] = ()
    fields: tuple[AffinityRequirement, ...] = ()


NodeSelectorTerms = tuple[NodeSelectorTerm, ...]
"""A required node selector: its terms are ORed. Empty = no requirement."""


@dataclass(frozen=True)
class PreferredNodeTerm:
    """A preferred node-affinity term: nodes it matches score its weight (1-100)."""

    weight: int
    term: NodeSelectorTerm


@dataclass(frozen=True)
class LabelRequirement:
    """A label selector's `matchExpressions` entry (In, NotIn, Exists, DoesNotExist)."""

    key: str
    operator: str
    values: tuple[str, ...] = ()


@dataclass(frozen=True)
class LabelSelector:
    """A Kubernetes label selector: `matchLabels` and `matchExpressions`, all ANDed. An empty one
    selects every object; an absent one (None where a selector is optional) selects none."""

    match_labels: tuple[tuple[str, str], ...] = ()
    expressions: tuple[LabelRequirement, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash((self.match_labels, self.expressions)))

    def __hash__(self) -> int:
        """Worked out once: selectors and terms key the engine's pod index, asked per placement."""
        return self._hash  # type: ignore[attr-defined,no-any-return]

    def __reduce__(self) -> tuple[type[LabelSelector], tuple[object, ...]]:
        """Rebuilt from its fields, so another process (a Ray worker, another hash seed) hashes
        it afresh instead of keeping this one's hash."""
        return (LabelSelector, (self.match_labels, self.expressions))


@dataclass(frozen=True)
class PodAffinityTerm:
    """One inter-pod (anti-)affinity term, namespaces already resolved by the backend.

    `selector` None selects no pod. `namespaces` None means every namespace (an empty
    `namespaceSelector`); otherwise the namespaces the term's pods may be in (the pod's own when
    the term names neither `namespaces` nor a `namespaceSelector`). `matchLabelKeys` and
    `mismatchLabelKeys` are already folded into `selector`, as the API server folds them.
    `weight` is set on preferred terms only.
    """

    topology_key: str
    selector: LabelSelector | None
    namespaces: frozenset[str] | None
    weight: int = 0

    def __post_init__(self) -> None:
        fields = (self.topology_key, self.selector, self.namespaces, self.weight)
        object.__setattr__(self, "_hash", hash(fields))

    def __hash__(self) -> int:
        """Worked out once, as `LabelSelector`'s."""
        return self._hash  # type: ignore[attr-defined,no-any-return]

    def __reduce__(self) -> tuple[type[PodAffinityTerm], tuple[object, ...]]:
        return (PodAffinityTerm, (self.topology_key, self.selector, self.namespaces, self.weight))


@dataclass(frozen=True)
class PodAffinitySpec:
    """`spec.affinity.podAffinity` and `podAntiAffinity` of a pod."""

    required: tuple[PodAffinityTerm, ...] = ()
    required_anti: tuple[PodAffinityTerm, ...] = ()
    preferred: tuple[PodAffinityTerm, ...] = ()
    preferred_anti: tuple[PodAffinityTerm, ...] = ()


@dataclass(frozen=True)
class SpreadConstraint:
    """One `topologySpreadConstraints` entry; `matchLabelKeys` already folded into `selector`.

    `hard` is `whenUnsatisfiable: DoNotSchedule` (a filter); otherwise a score.
    `honor_node_affinity` / `honor_node_taints` are `nodeAffinityPolicy` / `nodeTaintsPolicy`
    (Honor: only nodes the pod's node affinity / tolerations admit count as domains).
    """

    max_skew: int
    topology_key: str
    selector: LabelSelector | None
    hard: bool = True
    min_domains: int | None = None
    honor_node_affinity: bool = True
    honor_node_taints: bool = False


@dataclass(frozen=True)
class HostPort:
    """A container port bound on the node: (host IP, protocol, port) conflict rules of the
    kubelet; an empty host IP (or 0.0.0.0) means every address."""

    port: int
    protocol: str = "TCP"
    host_ip: str = ""


class BlockerCause(enum.StrEnum):
    """Why a pod may not be placed anywhere yet, whatever the nodes: it waits for an object."""

    CLAIM_MISSING = "PersistentVolumeClaimMissing"
    CLAIM_UNBOUND = "PersistentVolumeClaimUnbound"
    VOLUME_MISSING = "PersistentVolumeMissing"
    CONFIG_MAP_MISSING = "ConfigMapMissing"
    INVALID_CONSTRAINT = "InvalidConstraint"


@dataclass(frozen=True)
class Blocker:
    """A typed reason the pod waits (`cause`) and its words for people, naming the object."""

    cause: BlockerCause
    message: str


@dataclass(frozen=True)
class NodeSpec:
    name: str
    cpu_millis: float = 0.0
    memory: float = 0.0
    gpus: int = 0
    gpu_memory_mib: int = 100
    max_pods: int = 110
    gpu_memory_synced: bool = True
    labels: dict[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False
    ready: bool = True
    extended: dict[str, float] = field(default_factory=dict)
    """Allocatable of every resource other than cpu, memory, nvidia.com/gpu and pods (extended
    resources, hugepages-*, ephemeral-storage, MIG profiles), in the API's units."""


@dataclass
class TaskSpec:
    """A pod as the scheduler sees it. `gpu` is whole devices or a fraction per device."""

    name: str
    status: TaskStatus = TaskStatus.PENDING
    node: str | None = None
    cpu_millis: float = 0.0
    memory: float = 0.0
    gpu: float = 0.0
    gpu_devices: int = 1
    gpu_memory_mib: int = 0
    gpu_groups: tuple[str, ...] = ()
    subgroup: str = "default"
    node_affinity: NodeSelectorTerms = ()
    """Required node affinity: terms ORed (empty: none)."""
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: tuple[Toleration, ...] = ()
    task_priority: int | None = None
    labels: dict[str, str] = field(default_factory=dict)
    created: float = 0.0
    preferred_node_affinity: tuple[PreferredNodeTerm, ...] = ()
    volume_node_affinity: tuple[NodeSelectorTerms, ...] = ()
    """Node selectors its volumes impose (a bound PV's node affinity, a delayed claim's class's
    allowed topologies): each must hold, as `node_affinity` does."""
    pod_affinity: PodAffinitySpec | None = None
    spread: tuple[SpreadConstraint, ...] = ()
    host_ports: tuple[HostPort, ...] = ()
    extended: tuple[tuple[str, float], ...] = ()
    """Requests of resources other than cpu, memory, nvidia.com/gpu and pods, sorted by name:
    they must fit the node's `NodeSpec.extended` but charge no queue (KAI's fairness is over
    GPU, CPU and memory)."""
    blockers: tuple[Blocker, ...] = ()
    """Objects it waits for (a volume claim, a ConfigMap): no node is tried while any is set."""
    delayed_claims: tuple[str, ...] = ()
    """Unbound `WaitForFirstConsumer` claims (names, in the job's namespace): on bind each is
    annotated with the selected node, as kube-scheduler's VolumeBinding does."""

    @property
    def has_pod_constraints(self) -> bool:
        """Whether placing it reads what other pods hold (the session's pod index) or resources
        outside the node vector: such a pod takes the constraint-aware path."""
        return bool(
            self.pod_affinity
            or self.spread
            or self.host_ports
            or self.extended
            or self.preferred_node_affinity
        )

    @property
    def is_shared_gpu(self) -> bool:
        """Fractional and GPU-memory requests go through the GPU-sharing path."""
        return self.gpu_memory_mib > 0 or 0.0 < self.gpu < 1.0

    def gpu_memory_per_device(self, node_gpu_memory: float) -> float:
        """MiB this pod takes on each shared device of a node with that GPU memory."""
        if self.gpu_memory_mib > 0 and not 0 < self.gpu < 1:
            return float(self.gpu_memory_mib)
        return self.gpu * node_gpu_memory

    def gpu_portion(self, node_gpu_memory: float) -> float:
        """The GPU fraction per device this pod is granted on such a node (§17)."""
        if 0 < self.gpu < 1:
            return self.gpu
        if self.gpu_memory_mib > 0:
            return math.ceil(round(self.gpu_memory_mib / node_gpu_memory * 100, 9)) / 100
        return self.gpu

    def accepted_gpus(self, node_gpu_memory: float) -> float:
        """GPUs this pod counts for in queue accounting on such a node."""
        if self.is_shared_gpu:
            return self.gpu_portion(node_gpu_memory) * self.gpu_devices
        return self.gpu


@dataclass(frozen=True)
class TopologySpec:
    """A Topology object: node label keys from the coarsest level (first) to the finest (last)."""

    name: str
    levels: tuple[str, ...]
    aliases: tuple[tuple[str, str], ...] = ()
    """(alias, node label) pairs: a constraint may name a level by its alias."""


@dataclass(frozen=True)
class TopologyConstraintSpec:
    """Where a (sub)group's pods must (required) or should (preferred) share one topology domain.

    Levels are node label keys or level aliases of the named topology; None = no such constraint.
    """

    topology: str
    required_level: str | None = None
    preferred_level: str | None = None


@dataclass(frozen=True)
class PodSetSpec:
    name: str
    min_available: int
    topology: TopologyConstraintSpec | None = None


@dataclass(frozen=True)
class SubGroupSetSpec:
    """An inner node of the PodGroup tree; `min_subgroups` None = all members."""

    name: str = ""
    min_subgroups: int | None = None
    subgroup_sets: tuple[SubGroupSetSpec, ...] = ()
    pod_sets: tuple[PodSetSpec, ...] = ()
    topology: TopologyConstraintSpec | None = None
    """On the root: the job-level constraint (PodGroup `spec.topologyConstraint`)."""

    def all_pod_sets(self) -> list[PodSetSpec]:
        found: list[PodSetSpec] = []
        for child in self.subgroup_sets:
            found.extend(child.all_pod_sets())
        found.extend(self.pod_sets)
        return found


@dataclass
class JobSpec:
    """A PodGroup with its pods."""

    name: str
    queue: str
    namespace: str = ""
    priority: int = 50
    preemptible: bool = True
    created: float = 0.0
    last_start: float | None = None
    subgroups: SubGroupSetSpec = field(
        default_factory=lambda: SubGroupSetSpec(pod_sets=(PodSetSpec("default", 1),))
    )
    preemption_delay: float | None = None
    last_eviction: float | None = None
    stale_since: float | None = None
    staleness_grace: float | None = None
    deleting: bool = False
    tasks: list[TaskSpec] = field(default_factory=list)
    node_pool: str = ""
    """The PodGroup's node-pool label value ("" = unlabelled): only that pool's shard schedules it."""

    key: str = field(init=False, repr=False, compare=False)
    """namespace/name, made with the spec (specs are never mutated): job order and the plan read
    it for every job of every cycle. A field set in `__post_init__`, not a property or a cached
    one: an attribute added to an instance after its fields costs every later attribute read of
    that instance (its dict leaves the class's shared keys)."""

    def __post_init__(self) -> None:
        self.key = f"{self.namespace}/{self.name}" if self.namespace else self.name


@dataclass(frozen=True)
class HeldPod:
    """A pod that holds resources on a node but is not scheduled in this cycle.

    Nodes are shared: pods of other schedulers, and pods of ours that cannot be
    interpreted (their queue or PodGroup went away, an annotation does not parse),
    still occupy what they requested.  Forgetting them would double-book the node,
    so they are counted on it, never placed, moved or evicted.  `task` carries the
    request, status and node (and shared-GPU groups) in the engine's units.
    `foreign` marks another scheduler's pod: KAI subtracts those from the capacity
    queues divide (spec/scheduling.md §6.1).
    """

    namespace: str
    task: TaskSpec
    foreign: bool

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.task.name}" if self.namespace else self.task.name


@dataclass
class ClusterState:
    """Everything one scheduling cycle reads. `now` is in seconds."""

    nodes: list[NodeSpec] = field(default_factory=list)
    queues: list[QueueSpec] = field(default_factory=list)
    jobs: list[JobSpec] = field(default_factory=list)
    now: float = 0.0
    held: list[HeldPod] = field(default_factory=list)
    topologies: list[TopologySpec] = field(default_factory=list)
