"""Workloads: the PodGroups and pods one submit (or one manifest workload) made, and their state.

A workload's state is derived, never stored: from its pods (bound, finished), its gang minimum
and the last cycle's typed reasons.  Two facts are remembered because objects do not carry them:
that a workload was evicted (until it runs again) and that it was cancelled (its objects are
gone).  Every change of a workload's view becomes an event in the `EventLog`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from google.protobuf.timestamp_pb2 import Timestamp

from kai_ray.api import Pod, PodGroup
from kai_ray.api.constants import DEFAULT_PODGROUP_PRIORITY, POD_GROUP_NAME_ANNOTATION
from kai_ray.convert.common import Invalid, epoch
from kai_ray.convert.podgroups import is_preemptible, subgroup_tree
from kai_ray.engine.plan import Plan
from kai_ray.engine.reasons import EvictionReason
from kai_ray.identity_cache import IdentityCache
from kai_ray.model.objects import SubGroupSetSpec
from kai_ray.rpc.backend import Backend, BackendView, CycleRecord
from kai_ray.rpc.errors import ErrorCode, ServiceError
from kai_ray.rpc.events import EventLog
from kai_ray.rpc.objects import (
    WORKLOAD_LABEL,
    add_amounts,
    min_node_gpu_memory,
    node_gpu_memory,
    pod_amounts,
    priority_values,
)
from kai_ray.v1 import scheduler_pb2 as pb

__all__ = [
    "PIPELINED_REASON",
    "Members",
    "WorkloadTracker",
    "derive",
    "gang_minimum",
    "index_workloads",
    "split_id",
]

KEEP_CANCELLED = 1000
"""Cancelled workloads stay visible (state CANCELLED) until this many newer ones were cancelled."""
CANCELLED_TTL_SECONDS = 3600.0
FINISHED = ("Succeeded", "Failed")
PIPELINED_REASON = "Pipelined"
"""A waiting workload's reason when the last cycle pipelined its pods; KAI's Event reason for such a pod."""


def split_id(workload_id: str, field_name: str = "id") -> tuple[str, str]:
    from kai_ray.rpc.errors import ErrorCode, ServiceError

    namespace, _, name = workload_id.partition("/")
    if not namespace or not name or "/" in name:
        raise ServiceError(
            ErrorCode.INVALID_ARGUMENT, f"expected NAMESPACE/NAME, got {workload_id!r}", field_name
        )
    return namespace, name


@dataclass
class Members:
    """The objects of one workload, by name in its namespace."""

    namespace: str
    name: str
    pod_groups: list[str] = field(default_factory=list)
    pods: list[str] = field(default_factory=list)

    @property
    def id(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass
class _Record:
    members: Members
    view: pb.Workload | None = None
    evicted: EvictionReason | None = None
    cancelled_at: float | None = None
    last_transition: float = 0.0
    inputs: tuple[object, ...] | None = None
    """`_inputs` the last cycle refresh derived `view` from (None: not known)."""


def gang_minimum(tree: SubGroupSetSpec) -> int:
    """Pods that must run together for the tree to count as started (§8)."""
    needs = sorted(
        [gang_minimum(child) for child in tree.subgroup_sets] + [p.min_available for p in tree.pod_sets]
    )
    count = len(needs) if tree.min_subgroups is None else min(tree.min_subgroups, len(needs))
    return sum(needs[:count])


def index_workloads(view: BackendView, *, by_owner: bool = False) -> dict[str, Members]:
    """Workloads as the objects say: PodGroups by their workload label (else each its own), pods
    by their `pod-group-name` annotation.

    `by_owner`: an unlabelled PodGroup with one owner (what the podgrouper makes for a RayJob,
    a Job, a bare pod) is named after that owner, as the RayJob's user knows it, not
    `pg-NAME-UID`; when two owners (or an owner and a labelled workload) would share a name in a
    namespace, those PodGroups keep their own names instead.
    """
    named: list[tuple[str, str, str]] = []
    owners: dict[tuple[str, str], set[tuple[str, str]]] = {}
    labelled: set[tuple[str, str]] = set()
    for (namespace, name), group in sorted(view.all("PodGroup").items()):
        if not isinstance(group, PodGroup):
            continue
        label = group.metadata.labels.get(WORKLOAD_LABEL)
        refs = group.metadata.owner_references
        if label:
            labelled.add((namespace, label))
            named.append((namespace, name, label))
        elif by_owner and len(refs) == 1 and refs[0].name:
            owners.setdefault((namespace, refs[0].name), set()).add((refs[0].kind, refs[0].uid or ""))
            named.append((namespace, name, ""))
        else:
            named.append((namespace, name, name))
    found: dict[str, Members] = {}
    owner: dict[tuple[str, str], Members] = {}
    for namespace, name, workload in named:
        if not workload:
            owned = view.get("PodGroup", namespace, name)
            assert isinstance(owned, PodGroup)
            candidate = owned.metadata.owner_references[0].name
            shared = len(owners[(namespace, candidate)]) > 1 or (namespace, candidate) in labelled
            workload = name if shared else candidate
        members = found.setdefault(f"{namespace}/{workload}", Members(namespace, workload))
        members.pod_groups.append(name)
        owner[(namespace, name)] = members
    for (namespace, name), pod in sorted(view.all("Pod").items()):
        if isinstance(pod, Pod):
            members_of = owner.get((namespace, pod.metadata.annotations.get(POD_GROUP_NAME_ANNOTATION, "")))
            if members_of is not None:
                members_of.pods.append(name)
    return found


class WorkloadTracker:
    """Every workload's current view, and the events between views.  Thread-safe."""

    def __init__(
        self,
        backend: Backend,
        log: EventLog,
        *,
        keep_cancelled: int = KEEP_CANCELLED,
        cancelled_ttl: float = CANCELLED_TTL_SECONDS,
    ) -> None:
        self._backend = backend
        self.log = log
        self._keep_cancelled = keep_cancelled
        self._cancelled_ttl = cancelled_ttl
        self.lock = threading.RLock()
        self._refreshing = threading.Lock()
        """Serialises change notifications, whose views are derived outside `lock` (below)."""
        self._records: dict[str, _Record] = {}
        self._by_pod_group: dict[str, str] = {}
        # A backend whose objects also change without this API (Kubernetes: controllers, kubectl)
        # says so; the tracker then re-reads which workloads exist from every view.  The
        # simulated cluster changes only through the API, so it is spared that pass.
        self._discovers = bool(getattr(backend, "changes_outside_api", False))
        view = _view_if_ready(backend)
        if view is not None:
            for members in index_workloads(view, by_owner=self._discovers).values():
                self._track(members)
            self._refresh(view, None, emit=False)
        backend.subscribe(self._on_change)

    # ------------------------------------------------------------------ reads
    def get(self, workload_id: str) -> pb.Workload | None:
        with self.lock:
            record = self._records.get(workload_id)
            return None if record is None or record.view is None else record.view

    def all(self) -> list[pb.Workload]:
        """Every workload, ordered by id."""
        with self.lock:
            return [self._records[i].view for i in sorted(self._records) if self._records[i].view is not None]  # type: ignore[misc]

    def members(self, workload_id: str) -> Members | None:
        with self.lock:
            record = self._records.get(workload_id)
            return None if record is None or record.cancelled_at is not None else record.members

    def evicted(self, workload_id: str) -> EvictionReason | None:
        with self.lock:
            record = self._records.get(workload_id)
            return None if record is None else record.evicted

    def workload_of(self, job_key: str) -> str | None:
        """The workload id a PodGroup ("NS/NAME", the engine's job key) belongs to."""
        with self.lock:
            return self._by_pod_group.get(job_key)

    def pod_group_owners(self) -> dict[str, str]:
        """Engine job key ("NS/PODGROUP") → workload id, for every live workload."""
        with self.lock:
            return dict(self._by_pod_group)

    def __contains__(self, workload_id: object) -> bool:
        """`id in tracker`: taken by a live workload (what a submit may not reuse)."""
        return isinstance(workload_id, str) and self.exists(workload_id)

    def exists(self, workload_id: str) -> bool:
        """Whether the id is taken by a live (not cancelled) workload."""
        with self.lock:
            record = self._records.get(workload_id)
            return record is not None and record.cancelled_at is None

    def snapshot(self, matches: Callable[[pb.Workload], bool]) -> tuple[list[pb.Workload], int]:
        """The matching workloads and the last event number, atomically: a watch resumes there."""
        with self.lock:
            return [w for w in self.all() if matches(w)], self.log.last_seq

    # ------------------------------------------------------------------ changes
    def add(self, members: Members) -> pb.Workload:
        """A workload just created in the backend: its first view, and an ADDED event."""
        with self.lock:
            view = self._backend.view()
            previous = self._records.get(members.id)
            if previous is not None and previous.cancelled_at is None and previous.view is not None:
                # Already found in the backend's objects (a change notification came first): one
                # ADDED event per workload, so this is a refresh of it.
                self._set_members(previous, members)
                self._refresh_one(previous, view, priority_values(view), emit=True)
                return previous.view
            self._records.pop(members.id, None)
            if previous is not None:
                self._untrack(previous.members)
            record = self._track(members)
            record.last_transition = view.now
            record.view = derive(record.members, view, priority_values(view), None, record.last_transition)
            self.log.append(pb.WorkloadEvent.ADDED, record.view)
            return record.view

    def cancel(self, workload_id: str, delete: Callable[[Members], None]) -> pb.Workload:
        """Mark cancelled, delete its objects through `delete`, emit MODIFIED (state CANCELLED)."""
        with self.lock:
            record = self._records[workload_id]
            now = self._backend.now()
            delete(record.members)  # a failed delete raises: the workload stays as it is
            record.cancelled_at = now
            self._untrack(record.members, keep_record=True)
            assert record.view is not None
            view = pb.Workload()
            view.CopyFrom(record.view)
            view.state = pb.CANCELLED
            view.pods_bound = 0
            view.allocated.clear()
            del view.placements[:]
            view.reason, view.message = "Cancelled", "cancelled by a CancelWorkload call"
            view.last_transition.CopyFrom(_timestamp(now))
            record.view, record.last_transition = view, now
            self.log.append(pb.WorkloadEvent.MODIFIED, view)
            self._prune(now)
            return view

    def _on_change(self, record: CycleRecord | None) -> None:
        """Re-derive every live workload after a change, in three steps: take the records to
        refresh (under `lock`), derive their views (outside it), commit the views that are still
        current (under it again).

        Why: deriving a thousand workloads takes a few hundred milliseconds, and a submit or a
        read waiting for that after every cycle was the API's worst latency.  A record that a
        submit or a cancel changed in between is skipped: that call derived it from a view as
        new as this one.  Notifications never overlap (`_refreshing`), so an older view's
        derivation cannot be committed over a newer one's.
        """
        if record is None and not self._discovers:
            return
        with self._refreshing:
            view = _view_if_ready(self._backend)
            if view is None:
                return
            with self.lock:
                if self._discovers:
                    self._discover(view)
                if record is not None:
                    for eviction in record.plan.evictions:
                        workload_id = self._by_pod_group.get(eviction.job)
                        if workload_id is not None:
                            self._records[workload_id].evicted = eviction.reason
                due = [
                    (self._records[i], self._records[i].view)
                    for i in sorted(self._records)
                    if self._records[i].cancelled_at is None
                ]
            priorities = priority_values(view)
            derived = []
            for r, before in due:
                inputs = _inputs(r.members, view)
                if before is not None and before.state in _SETTLED and _same(r.inputs, inputs):
                    continue
                candidate = derive(r.members, view, priorities, r.evicted, r.last_transition)
                derived.append((r, before, inputs, candidate))
            with self.lock:
                for r, before, inputs, candidate in derived:
                    current = self._records.get(r.members.id) is r and r.cancelled_at is None
                    if current and r.view is before:
                        self._commit(r, candidate, view.now, emit=True, inputs=inputs)
                self._prune(view.now if record is None else record.at)

    def _discover(self, view: BackendView) -> None:
        """Follow the objects: new workloads are tracked (ADDED on the refresh that follows), members
        follow their objects, and a workload whose objects are all gone is DELETED.

        A cancelled workload is left alone while its objects are still on their way out.
        """
        found = index_workloads(view, by_owner=True)
        for workload_id, members in found.items():
            record = self._records.get(workload_id)
            if record is None:
                self._track(members).last_transition = view.now
            elif record.cancelled_at is None and (
                set(record.members.pod_groups) != set(members.pod_groups)
                or set(record.members.pods) != set(members.pods)
            ):
                self._set_members(record, members)
        for workload_id in [i for i, r in self._records.items() if r.cancelled_at is None and i not in found]:
            gone = self._records[workload_id]
            self._untrack(gone.members)
            if gone.view is not None:
                self.log.append(pb.WorkloadEvent.DELETED, gone.view)

    # ------------------------------------------------------------------ internals
    def _set_members(self, record: _Record, members: Members) -> None:
        """Replace a live record's members, keeping the order of those that stay (views compare
        equal when nothing but the order of discovery differs)."""
        self._untrack(record.members, keep_record=True)
        groups = [g for g in record.members.pod_groups if g in members.pod_groups]
        groups += [g for g in members.pod_groups if g not in groups]
        pods = [p for p in record.members.pods if p in set(members.pods)]
        pods += [p for p in members.pods if p not in set(pods)]
        record.members = Members(members.namespace, members.name, groups, pods)
        for group in groups:
            self._by_pod_group[f"{members.namespace}/{group}"] = members.id

    def _track(self, members: Members) -> _Record:
        record = _Record(members)
        self._records[members.id] = record
        for group in members.pod_groups:
            self._by_pod_group[f"{members.namespace}/{group}"] = members.id
        return record

    def _untrack(self, members: Members, keep_record: bool = False) -> None:
        for group in members.pod_groups:
            self._by_pod_group.pop(f"{members.namespace}/{group}", None)
        if not keep_record:
            self._records.pop(members.id, None)

    def _refresh(self, view: BackendView, cycle: CycleRecord | None, *, emit: bool) -> None:
        priorities = priority_values(view)
        for workload_id in sorted(self._records):
            record = self._records[workload_id]
            if record.cancelled_at is not None:
                continue
            self._refresh_one(record, view, priorities, emit=emit)

    def _refresh_one(
        self, record: _Record, view: BackendView, priorities: dict[str, int], *, emit: bool
    ) -> None:
        candidate = derive(record.members, view, priorities, record.evicted, record.last_transition)
        self._commit(record, candidate, view.now, emit=emit)

    def _commit(
        self,
        record: _Record,
        candidate: pb.Workload,
        now: float,
        *,
        emit: bool,
        inputs: tuple[object, ...] | None = None,
    ) -> None:
        """Make ``candidate`` the record's view, with an event when it differs; under `lock`.
        ``inputs``: what it was derived from, when a cycle refresh derived it."""
        record.inputs = inputs
        before = record.view
        if before is not None and candidate.state != before.state:
            record.last_transition = now
            candidate.last_transition.CopyFrom(_timestamp(now))
        if before is not None and candidate == before:
            return
        if candidate.state == pb.RUNNING:
            record.evicted = None
        record.view = candidate
        if emit:
            self.log.append(
                pb.WorkloadEvent.ADDED if before is None else pb.WorkloadEvent.MODIFIED, candidate
            )

    def _prune(self, now: float) -> None:
        """Forget cancelled workloads past their time or beyond the count kept, with a DELETED event."""
        cancelled = sorted(
            (r.cancelled_at, i) for i, r in self._records.items() if r.cancelled_at is not None
        )
        excess = len(cancelled) - self._keep_cancelled
        for index, (at, workload_id) in enumerate(cancelled):
            if index < excess or now - at > self._cancelled_ttl:
                record = self._records.pop(workload_id)
                if record.view is not None:
                    self.log.append(pb.WorkloadEvent.DELETED, record.view)


_SETTLED = (pb.RUNNING, pb.SUCCEEDED, pb.FAILED)
"""States a workload's view takes from its objects alone: the cycle's pending reasons and
evictions do not enter it (an eviction changes the pods)."""


def _inputs(members: Members, view: BackendView) -> tuple[object, ...]:
    """Everything `derive` reads for a workload in a settled state: its objects, the node table
    and the priority classes.  Objects are never mutated, so the very same objects (`_same`)
    give the same view, and a cycle refresh skips deriving a running workload that nothing
    touched (most of them, on a busy cluster).  The objects themselves are kept, not their ids,
    which a newer object could reuse.  A backend that hands out new objects for unchanged ones
    only loses the shortcut."""
    ns = members.namespace
    return (
        view.all("Node"),
        view.all("PriorityClass"),
        *(view.get("PodGroup", ns, name) for name in members.pod_groups),
        *(view.get("Pod", ns, name) for name in members.pods),
    )


def _same(before: tuple[object, ...] | None, now: tuple[object, ...]) -> bool:
    if before is None or len(before) != len(now):
        return False
    return all(a is b for a, b in zip(before, now, strict=True))


def _view_if_ready(backend: Backend) -> BackendView | None:
    """The backend's view, or None while it cannot give one yet (UNAVAILABLE: a Kubernetes cache
    still listing the cluster); the next notification tries again."""
    try:
        return backend.view()
    except ServiceError as error:
        if error.code != ErrorCode.UNAVAILABLE:
            raise
        return None


def derive(
    members: Members,
    view: BackendView,
    priorities: dict[str, int],
    evicted: EvictionReason | None,
    last_transition: float,
) -> pb.Workload:
    """A workload's view from its objects and the view's last cycle."""
    ns = members.namespace
    groups = [g for g in (view.get("PodGroup", ns, n) for n in members.pod_groups) if isinstance(g, PodGroup)]
    pods = [p for p in (view.get("Pod", ns, n) for n in members.pods) if isinstance(p, Pod)]
    first = groups[0] if groups else None
    class_name = first.spec.priority_class_name if first else ""
    priority = priorities.get(class_name, DEFAULT_PODGROUP_PRIORITY)
    out = pb.Workload(
        id=members.id,
        namespace=ns,
        name=members.name,
        queue=first.spec.queue if first else "",
        priority_class=class_name,
        priority=priority,
        preemptible=is_preemptible(first.spec.preemptibility if first else None, priority),
        min_available=sum(_group_minimum(g) for g in groups),
        pods=len(pods),
    )
    out.pod_groups.extend(members.pod_groups)
    constraint = first.spec.topology_constraint if first else None
    if constraint is not None and constraint.topology:
        out.topology.CopyFrom(
            pb.TopologyConstraint(
                topology=constraint.topology,
                required_level=constraint.required_topology_level,
                preferred_level=constraint.preferred_topology_level,
            )
        )
    min_gpu_memory = min_node_gpu_memory(view.all("Node"))
    requested: dict[str, float] = {}
    allocated: dict[str, float] = {}
    bound = finished_ok = failed = 0
    for pod in sorted(pods, key=lambda p: p.metadata.name):
        amounts = pod_amounts(pod)
        node = pod.spec.node_name
        on_node = bool(node) and pod.status.phase not in FINISHED
        memory = node_gpu_memory(view.get("Node", "", node)) if on_node else min_gpu_memory  # type: ignore[arg-type]
        add_amounts(requested, amounts.as_map(memory))
        if on_node:
            bound += 1
            add_amounts(allocated, amounts.as_map(memory))
        finished_ok += pod.status.phase == "Succeeded"
        failed += pod.status.phase == "Failed"
        out.placements.add(pod=pod.metadata.name, node=node if on_node else "")
    out.pods_bound = bound
    out.requested.update(requested)
    out.allocated.update(allocated)
    out.state = _state(out, finished_ok, failed, evicted)
    out.reason, out.message = _reason(out.state, members, evicted, view.last_cycle)
    created = epoch(first.metadata.creation_timestamp) if first else None
    out.created.CopyFrom(_timestamp(created or 0.0))
    out.last_transition.CopyFrom(_timestamp(last_transition))
    return out


def _group_minimum(group: PodGroup) -> int:
    try:
        return gang_minimum(subgroup_tree(group.spec))
    except Invalid:
        return 0


def _state(out: pb.Workload, succeeded: int, failed: int, evicted: EvictionReason | None) -> pb.WorkloadState:
    if out.pods and succeeded == out.pods:
        return pb.SUCCEEDED
    if failed:
        return pb.FAILED
    if out.pods_bound and out.pods_bound >= out.min_available:
        return pb.RUNNING
    if evicted is not None:
        return pb.EVICTED
    return pb.PENDING


def _reason(
    state: pb.WorkloadState,
    members: Members,
    evicted: EvictionReason | None,
    cycle: CycleRecord | None,
) -> tuple[str, str]:
    if state == pb.EVICTED and evicted is not None:
        return evicted.cause.value, evicted.message
    if state != pb.PENDING:
        return "", ""
    if cycle is None:
        return "NotScheduledYet", "waiting for the first scheduling cycle"
    pipelined = _pipelined_nodes(cycle.plan)
    keys = (f"{members.namespace}/{group}" for group in members.pod_groups)
    nodes = [node for key in keys for node in pipelined.get(key, ())]
    if nodes:
        return PIPELINED_REASON, (
            f"{len(nodes)} pod(s) pipelined to {', '.join(sorted(set(nodes)))}: they wait for resources "
            "still being released and are bound in a later cycle"
        )
    for group in members.pod_groups:
        reason = cycle.plan.pending_reasons.get(f"{members.namespace}/{group}")
        if reason is not None:
            return reason.cause.value, reason.message
    return "NotScheduledYet", "submitted after the last scheduling cycle"


def _pipelined_by_job(plan: Plan) -> dict[str, list[str]]:
    """Job key → the node of each of its pods the plan pipelined.  A pipelined workload is
    PENDING with no pod bound and no pending reason, like one the cycle never reached: this is
    what tells them apart."""
    nodes: dict[str, list[str]] = {}
    for pipelined in plan.pipelined:
        nodes.setdefault(pipelined.job, []).append(pipelined.node)
    return nodes


_pipelined_nodes: IdentityCache[Plan, dict[str, list[str]]] = IdentityCache(_pipelined_by_job)


def _timestamp(moment: float) -> Timestamp:
    stamp = Timestamp()
    stamp.FromNanoseconds(round(moment * 1e9))
    return stamp


def workload_ids(views: Iterable[pb.Workload]) -> list[str]:
    return [view.id for view in views]
