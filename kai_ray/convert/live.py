"""The `ClusterState` of a changing cluster, kept up to date object by object (issue 12).

`cluster_from_manifest_set` converts a whole set of objects at once; a scheduler that does that
every cycle pays for the cluster, not for what changed (seconds at 40,000 pods).  `LiveCluster`
gives the same result from the same objects (a randomized test holds the two equal after every
batch of changes), through the same per-object conversions (`convert.jobs.pod_outcome`,
`podgroup_outcome`, `convert_queues`, `node_spec`), but remembers each object's outcome and
converts again only what a change can affect:

- a pod: itself, its job, and, if it has a deletionTimestamp, every read (its status depends on
  the clock);
- a PodGroup: its job and the pods that name it;
- a BindRequest: the pods whose binding it changes;
- a PersistentVolumeClaim, PersistentVolume, StorageClass or ConfigMap: the pods whose volumes or
  environment name it (`storage_index`);
- any Queue or PriorityClass: every PodGroup (the queue tree and priorities are theirs);
- any Node coming or going: every pod (the node set decides whether a placement is valid);
- a Namespace's labels, or a namespace gaining its first pod or losing its last: the pods whose
  inter-pod affinity terms select namespaces by label.

Objects are read from the cluster, where the API server stamps every creationTimestamp, so
each is converted as if it came first (position 0): an object without a timestamp is created at
time 0, not at its place in an order that changes with every other object.
"""

from __future__ import annotations

import bisect
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, replace
from typing import TypeVar

from kai_ray.api import (
    ApiObject,
    BindRequest,
    Manifest,
    ManifestProblem,
    Namespace,
    Node,
    Pod,
    PodGroup,
    PriorityClass,
    Queue,
    Topology,
)
from kai_ray.api.constants import SCHEDULER_NAME
from kai_ray.convert.cluster import bind_requests_by_pod, namespace_labels
from kai_ray.convert.common import convert_each
from kai_ray.convert.constraints import reads_namespaces
from kai_ray.convert.jobs import (
    NamedJob,
    PodOutcome,
    occupant_outcome,
    pod_group_key,
    pod_outcome,
    podgroup_outcome,
    skip_reason,
)
from kai_ray.convert.nodes import node_spec
from kai_ray.convert.podgroups import Priorities
from kai_ray.convert.pods import PodContext
from kai_ray.convert.queues import QueueIndex, convert_queues
from kai_ray.convert.storage_index import STORAGE_KINDS, StorageIndex
from kai_ray.convert.topologies import convert_topologies
from kai_ray.model.objects import ClusterState, HeldPod, JobSpec, NodeSpec, QueueSpec, TopologySpec

__all__ = ["FOREIGN_POD", "KIND_ORDER", "LiveCluster", "ObjectModel"]

Key = tuple[str, str]
"""(namespace, name); the namespace is "" for cluster-scoped kinds."""

FOREIGN_POD = "ForeignPod"
"""Pods of other schedulers that occupy a node, followed apart from ours (they say `kind: Pod`)."""

KIND_ORDER = (
    "Namespace",
    "Queue",
    "PriorityClass",
    "Topology",
    "Node",
    *STORAGE_KINDS,
    "PodGroup",
    "BindRequest",
    "Pod",
    FOREIGN_POD,
)
"""The order problems are reported in: what others refer to first, for a readable list."""

_POD_KINDS = ("Pod", FOREIGN_POD)
ObjectT = TypeVar("ObjectT", bound=ApiObject)
NotedT = TypeVar("NotedT", bound=Hashable)
Member = tuple[int, Key]
"""A pod naming a PodGroup: (its kind's place in `_POD_KINDS`, key), in the order pods join jobs."""


@dataclass(frozen=True)
class ObjectModel:
    """One object as validation left it: the model (None when rejected), the problems found, and
    for a rejected pod what it still occupies (an occupancy-only model), if even that loads."""

    obj: ApiObject | None
    problems: tuple[ManifestProblem, ...] = ()
    occupant: Pod | None = None


@dataclass
class _PodRecord:
    model: ObjectModel
    outcome: PodOutcome | None = None
    held: HeldPod | None = None
    """For a rejected pod (no model): what its occupant holds."""


class _SortedKeys:
    """Keys kept in order under inserts and deletes, so a read never sorts the whole kind."""

    def __init__(self) -> None:
        self.keys: list[Key] = []

    def add(self, key: Key) -> None:
        index = bisect.bisect_left(self.keys, key)
        if index == len(self.keys) or self.keys[index] != key:
            self.keys.insert(index, key)

    def discard(self, key: Key) -> None:
        index = bisect.bisect_left(self.keys, key)
        if index < len(self.keys) and self.keys[index] == key:
            del self.keys[index]


class _SortedJobs:
    """Jobs in PodGroup key order, kept in order under changes, so a read copies a list instead
    of looking up every PodGroup's job."""

    def __init__(self) -> None:
        self.keys: list[Key] = []
        self.jobs: list[JobSpec] = []

    def __len__(self) -> int:
        return len(self.keys)

    def put(self, key: Key, job: JobSpec) -> None:
        index = bisect.bisect_left(self.keys, key)
        if index < len(self.keys) and self.keys[index] == key:
            self.jobs[index] = job
        else:
            self.keys.insert(index, key)
            self.jobs.insert(index, job)

    def discard(self, key: Key) -> None:
        index = bisect.bisect_left(self.keys, key)
        if index < len(self.keys) and self.keys[index] == key:
            del self.keys[index]
            del self.jobs[index]


class LiveCluster:
    """Objects in, `ClusterState` out, each object converted once per change that can affect it.

    `apply` takes changed models by kind and key (None: deleted); `state` converts what those
    changes affect and assembles the result.  Not thread-safe: one reader (the scheduling loop).
    """

    def __init__(self, source: str, scheduler_name: str = SCHEDULER_NAME) -> None:
        self._source = source
        self._scheduler_name = scheduler_name
        self._models: dict[str, dict[Key, ObjectModel]] = {kind: {} for kind in KIND_ORDER}
        self._order: dict[str, _SortedKeys] = {kind: _SortedKeys() for kind in KIND_ORDER}
        self._pods: dict[str, dict[Key, _PodRecord]] = {kind: {} for kind in _POD_KINDS}
        self._members: dict[Key, set[Member]] = {}
        """(namespace, PodGroup) → the pods naming it."""
        self._templates: dict[Key, tuple[JobSpec | None, ManifestProblem | None]] = {}
        self._jobs = _SortedJobs()
        self._deleting: set[tuple[str, Key]] = set()
        self._dirty_pods: set[tuple[str, Key]] = set()
        self._dirty_groups: set[Key] = set()
        self._dirty_jobs: set[Key] = set()
        self._changed_kinds: set[str] = set(KIND_ORDER)
        self._queues: list[QueueSpec] = []
        self._queue_index = QueueIndex(frozenset(), frozenset())
        self._priorities = Priorities.from_manifests([])
        # What a read must list in order, kept as sets of keys (few next to the cluster) so that
        # assembling a state never walks every object.
        self._invalid: set[tuple[int, Key]] = set()
        """(kind's place in KIND_ORDER, key) of objects the models found problems with."""
        self._twins: set[Key] = set()
        """Keys both among our pods and the foreign ones."""
        self._bad_groups: set[Key] = set()
        self._pod_problems: set[Member] = set()
        self._held_pods: set[Member] = set()
        self._occupants: set[Member] = set()
        self._assumed: dict[Key, tuple[str, str]] = {}
        """Our pods this scheduler bound itself that the objects do not show bound yet: pod →
        (node, the pod's uid).  Converted as binding to that node, like a BindRequest would."""
        self._assumed_changed = False
        self._queue_problems: list[ManifestProblem] = []
        self._node_problems: list[ManifestProblem] = []
        self._nodes: list[NodeSpec] = []
        self._topologies: list[TopologySpec] = []
        self._context = PodContext(0.0, frozenset(), {})
        self._storage = StorageIndex()
        """Claims, volumes, classes and ConfigMaps, and the pods naming each."""
        self._pod_namespaces: dict[str, int] = {}
        """Namespace → how many pods (of both kinds) it holds."""
        self._namespaces_moved = False
        """A namespace gained its first pod or lost its last since the last read."""
        self._namespace_readers: set[tuple[str, Key]] = set()
        """Pods whose conversion reads namespace labels (`reads_namespaces`)."""

    def __len__(self) -> int:
        return sum(len(models) for models in self._models.values())

    def remembered(self) -> int:
        """Entries kept besides the objects (pod records, PodGroup memberships, jobs): for the
        bounded-memory checks, it follows the objects that exist, never their history."""
        pods = sum(len(records) for records in self._pods.values())
        kept = len(self._members) + len(self._templates) + len(self._jobs) + len(self._assumed)
        return pods + kept + len(self._storage)

    # ---------------------------------------------------------------- changes in
    def assume_bound(self, pods: Mapping[Key, tuple[str, str]]) -> None:
        """Pods bound (pod → (node, uid)) ahead of their objects: until a pod's object shows a
        node, or is gone or replaced, it is converted as binding to that node (without this,
        a cycle that starts before the watch catches up would place it again)."""
        self._assumed.update(pods)
        self._assumed_changed = self._assumed_changed or bool(pods)

    def apply(self, changed: Mapping[str, Mapping[Key, ObjectModel | None]]) -> None:
        for kind, models in changed.items():
            if kind not in self._models or not models:
                continue
            self._changed_kinds.add(kind)
            for key, model in models.items():
                self._apply_one(kind, key, model)

    def replace_kind(self, kind: str, models: Mapping[Key, ObjectModel]) -> None:
        """Every object of `kind` now (a complete read): what is not there is gone."""
        gone = {key: None for key in self._models.get(kind, {}) if key not in models}
        self.apply({kind: {**gone, **models}})

    def _apply_one(self, kind: str, key: Key, model: ObjectModel | None) -> None:
        if kind in _POD_KINDS:
            self._forget_membership(kind, key)
            self._count_namespace(key[0], int(model is not None) - int(key in self._models[kind]))
        if model is None:
            self._models[kind].pop(key, None)
            self._order[kind].discard(key)
        else:
            self._models[kind][key] = model
            self._order[kind].add(key)
        _mark(self._invalid, (KIND_ORDER.index(kind), key), model is not None and bool(model.problems))
        if kind in _POD_KINDS:
            _mark(self._twins, key, all(key in self._models[pods] for pods in _POD_KINDS))
            self._pod_changed(kind, key, model)
        elif kind == "PodGroup":
            self._dirty_groups.add(key)
        elif kind in STORAGE_KINDS:
            changed = self._storage.object_changed(kind, key, None if model is None else model.obj)
            self._dirty_pods.update(("Pod", pod) for pod in changed)

    def _count_namespace(self, namespace: str, change: int) -> None:
        before = self._pod_namespaces.get(namespace, 0)
        after = before + change
        if after:
            self._pod_namespaces[namespace] = after
        else:
            self._pod_namespaces.pop(namespace, None)
        self._namespaces_moved = self._namespaces_moved or (before == 0) != (after == 0)

    def _forget_membership(self, kind: str, key: Key) -> None:
        record = self._pods[kind].pop(key, None)
        self._deleting.discard((kind, key))
        self._namespace_readers.discard((kind, key))
        member = (_POD_KINDS.index(kind), key)
        for noted in (self._pod_problems, self._held_pods, self._occupants):
            noted.discard(member)
        if record is not None and isinstance(record.model.obj, Pod):
            group = pod_group_key(record.model.obj)
            if group is not None:
                members = self._members.get(group, set())
                members.discard((_POD_KINDS.index(kind), key))
                if not members:
                    self._members.pop(group, None)  # memory follows the pods that exist
                self._dirty_jobs.add(group)

    def _pod_changed(self, kind: str, key: Key, model: ObjectModel | None) -> None:
        self._dirty_pods.add((FOREIGN_POD, key))  # our pod's twin among the foreign ones is refused
        if kind == "Pod":
            obj = None if model is None else model.obj
            self._storage.pod_changed(key, obj if isinstance(obj, Pod) else None)
        if kind == "Pod" and key in self._assumed and not _still_assumed(model, self._assumed[key][1]):
            del self._assumed[key]
            self._assumed_changed = True
        if model is None:
            return
        self._pods[kind][key] = _PodRecord(model)
        self._dirty_pods.add((kind, key))
        pod = model.obj
        shown = pod if isinstance(pod, Pod) else model.occupant
        if shown is not None and shown.metadata.deletion_timestamp is not None:
            self._deleting.add((kind, key))  # its status follows the clock, rejected or not
        if not isinstance(pod, Pod):
            return
        group = pod_group_key(pod)
        if group is not None:
            self._members.setdefault(group, set()).add((_POD_KINDS.index(kind), key))
            self._dirty_jobs.add(group)
        if reads_namespaces(pod.spec):
            self._namespace_readers.add((kind, key))

    # ---------------------------------------------------------------- state out
    def state(self, now: float) -> tuple[ClusterState, list[ManifestProblem]]:
        """The cluster as `cluster_from_manifest_set` would convert these objects at `now`."""
        self._refresh_context(now)
        self._refresh_groups()
        self._refresh_pods()
        self._refresh_jobs()
        self._changed_kinds.clear()
        state = ClusterState(
            nodes=self._nodes,
            queues=self._queues,
            jobs=list(self._jobs.jobs),
            now=now,
            held=self._held(),
            topologies=self._topologies,
        )
        return state, self._problems()

    def _manifest(self, obj: ObjectT) -> Manifest[ObjectT]:
        return Manifest(self._source, 0, 0, obj)

    def _objects(self, kind: str, model_class: type[ObjectT]) -> list[Manifest[ObjectT]]:
        models = self._models[kind]
        return [
            self._manifest(obj)
            for key in self._order[kind].keys
            if isinstance(obj := models[key].obj, model_class)
        ]

    def _refresh_context(self, now: float) -> None:
        changed = self._changed_kinds
        if changed & {"Queue", "PriorityClass"}:
            self._queue_problems = []
            self._queues, self._queue_index = convert_queues(
                self._objects("Queue", Queue), self._queue_problems
            )
            self._priorities = Priorities.from_manifests(self._objects("PriorityClass", PriorityClass))
            self._dirty_groups.update(self._order["PodGroup"].keys)
        if "Topology" in changed:
            self._topologies = convert_topologies(self._objects("Topology", Topology))
        context = self._context
        names = context.nodes
        if "Node" in changed:
            self._node_problems = []
            self._nodes = convert_each(self._objects("Node", Node), node_spec, self._node_problems)
            names = frozenset(node.name for node in self._nodes)
        binding, groups = context.binding, context.gpu_groups
        if changed & {"Node", "BindRequest"} or self._assumed_changed:
            binding, groups = bind_requests_by_pod(self._objects("BindRequest", BindRequest), names)
            binding |= {pod: node for pod, (node, _) in self._assumed.items() if node in names}
            self._assumed_changed = False
        if names != context.nodes:
            self._dirty_pods.update((kind, key) for kind in _POD_KINDS for key in self._pods[kind])
        else:
            moved = _changed_keys(context.binding, binding) | _changed_keys(context.gpu_groups, groups)
            self._dirty_pods.update(
                (kind, pod) for pod in moved for kind in _POD_KINDS if pod in self._pods[kind]
            )
        self._dirty_pods.update(self._deleting)
        namespaces = context.namespaces
        if "Namespace" in changed or self._namespaces_moved:
            namespaces = namespace_labels(
                (m.obj for m in self._objects("Namespace", Namespace)), self._pod_namespaces
            )
            self._namespaces_moved = False
            if namespaces != context.namespaces:
                self._dirty_pods.update(self._namespace_readers)
        self._context = PodContext(now, names, binding, groups, namespaces)

    def _refresh_groups(self) -> None:
        models = self._models["PodGroup"]
        for key in self._dirty_groups:
            self._dirty_jobs.add(key)
            self._dirty_pods.update((_POD_KINDS[rank], pod) for rank, pod in self._members.get(key, ()))
            group = models[key].obj if key in models else None
            if isinstance(group, PodGroup):
                self._templates[key] = podgroup_outcome(
                    self._manifest(group), self._queue_index, self._priorities
                )
            else:
                self._templates.pop(key, None)
            _mark(self._bad_groups, key, key in self._templates and self._templates[key][1] is not None)
        self._dirty_groups.clear()

    def _refresh_pods(self) -> None:
        for kind, key in self._dirty_pods:
            record = self._pods[kind].get(key)
            if record is None:
                continue
            self._convert_pod(kind, key, record)
            member = (_POD_KINDS.index(kind), key)
            outcome = record.outcome
            _mark(self._pod_problems, member, outcome is not None and outcome.problem is not None)
            _mark(self._held_pods, member, outcome is not None and outcome.held is not None)
            _mark(self._occupants, member, record.held is not None)
        self._dirty_pods.clear()

    def _convert_pod(self, kind: str, key: Key, record: _PodRecord) -> None:
        pod = record.model.obj
        if not isinstance(pod, Pod):
            occupant = record.model.occupant
            if occupant is not None:
                record.held = occupant_outcome(self._manifest(occupant), self._context, self._scheduler_name)
            return
        if kind == FOREIGN_POD and self._ours_too(key):
            record.outcome = None  # refused as a duplicate of ours: see `_problems`
            return
        record.outcome = pod_outcome(
            self._manifest(pod), self._named(pod), self._context, self._scheduler_name, self._storage.objects
        )
        group = pod_group_key(pod)
        if group is not None:
            self._dirty_jobs.add(group)

    def _ours_too(self, key: Key) -> bool:
        """Whether our pods have a usable one under this key, which a foreign one then duplicates
        (as the manifest loader refuses the second of two objects with one name)."""
        ours = self._models["Pod"].get(key)
        return ours is not None and ours.obj is not None

    def _named(self, pod: Pod) -> NamedJob:
        key = pod_group_key(pod)
        if key is None:
            return NamedJob(None)
        template = self._templates.get(key)
        if template is None:
            return NamedJob(None)
        job, problem = template
        return NamedJob(job, None if job is not None else skip_reason(problem))

    def _refresh_jobs(self) -> None:
        for key in self._dirty_jobs:
            template = self._templates.get(key)
            if template is None or template[0] is None:
                self._jobs.discard(key)
                continue
            tasks = []
            for rank, member in sorted(self._members.get(key, ())):
                outcome = self._pods[_POD_KINDS[rank]][member].outcome
                if outcome is not None and outcome.task is not None:
                    tasks.append(outcome.task)
            self._jobs.put(key, replace(template[0], tasks=tasks))
        self._dirty_jobs.clear()

    def _held(self) -> list[HeldPod]:
        held = []
        for rank, key in sorted(self._held_pods):
            outcome = self._pods[_POD_KINDS[rank]][key].outcome
            assert outcome is not None and outcome.held is not None  # as noted
            held.append(outcome.held)
        for rank, key in sorted(self._occupants):
            occupant = self._pods[_POD_KINDS[rank]][key].held
            assert occupant is not None  # as noted
            held.append(occupant)
        return held

    def _problems(self) -> list[ManifestProblem]:
        problems: list[ManifestProblem] = []
        foreign = KIND_ORDER.index(FOREIGN_POD)
        twins = {(foreign, key) for key in self._twins}
        for rank, key in sorted(self._invalid | twins):
            model = self._models[KIND_ORDER[rank]][key]
            problems.extend(model.problems)
            if rank == foreign and model.obj is not None and self._ours_too(key):
                meta = model.obj.metadata
                message = f"defined twice; keeping the one from {self._source}"
                problems.append(
                    ManifestProblem(
                        self._source, "Pod", meta.namespace or "", meta.name, "metadata.name", message
                    )
                )
        problems.extend(self._queue_problems)
        problems.extend(self._node_problems)
        problems.extend(problem for key in sorted(self._bad_groups) if (problem := self._templates[key][1]))
        for rank, key in sorted(self._pod_problems):
            outcome = self._pods[_POD_KINDS[rank]][key].outcome
            assert outcome is not None and outcome.problem is not None  # as noted
            problems.append(outcome.problem)
        return problems


def _still_assumed(model: ObjectModel | None, uid: str) -> bool:
    """Whether a pod assumed bound is still the same pod and still shows no node."""
    pod = None if model is None else model.obj
    return isinstance(pod, Pod) and pod.metadata.uid == uid and not pod.spec.node_name


def _changed_keys(before: Mapping[Key, object], after: Mapping[Key, object]) -> set[Key]:
    """Keys whose value differs between the two maps (added, removed or changed)."""
    return {key for key in before.keys() | after.keys() if before.get(key) != after.get(key)}


def _mark(noted: set[NotedT], item: NotedT, present: bool) -> None:
    if present:
        noted.add(item)
    else:
        noted.discard(item)
