"""Telling the cluster why: PodGroup scheduling conditions, Events, and Queue status.

The engine explains every pending job in ``Plan.pending_reasons``; this module
turns those explanations into the objects KAI users already read
(spec/kubernetes-api.md §13): ``PodGroup.status.schedulingConditions`` (an
``UnschedulableOnNodePool`` entry per node pool, the current one last), Events
on PodGroups and pods, the ``PodScheduled=False/Unschedulable`` pod condition,
and ``Queue.status.{allocated,requested}`` (§2.2; KAI's queue-controller writes
those, kai-ray has none, so the scheduler does).

Writing is the expensive part of a cycle on a big cluster, so everything here
is "write only on change": conditions are compared with what the PodGroup
holds, Events with the last message sent for the same object, queue status
with what was written last.  The memory lives in a `StatusWriter` (one per
scheduler process); after a restart the first cycle re-sends one Event per
object, which is harmless.

The Events themselves are written by `kai_ray.cluster.kube.events`, and the API-call helpers
every writer shares live in `kai_ray.cluster.kube.calls`.
"""

from __future__ import annotations

import datetime as _dt
import functools
import logging
import threading
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from kai_ray.api.constants import (
    DEFAULT_NAMESPACE,
    DEFAULT_NODE_POOL,
    SCHEDULER_NAME,
)
from kai_ray.cluster.kube.calls import (
    PODGROUP_VERSION,
    PODGROUPS,
    QUEUE_VERSION,
    QUEUES,
    STRATEGIC_MERGE_PATCH,
    CustomObjects,
    OperationError,
    api_error_message,
    discard,
    now_utc,
    rfc3339,
    run_bounded,
    split_job_key,
)
from kai_ray.cluster.kube.events import EventWriter, ObjectRef
from kai_ray.cluster.kube.queue_usage import quantity
from kai_ray.engine.plan import Plan
from kai_ray.engine.reasons import PendingReason
from kai_ray.model.objects import ACTIVE_ALLOCATED, TaskStatus

__all__ = [
    "CONDITION_UNSCHEDULABLE_ON_NODE_POOL",
    "REASON_UNSCHEDULABLE",
    "PodGroupRef",
    "StatusResult",
    "StatusWriter",
    "desired_conditions",
    "mark_pod_unschedulable",
    "write_podgroup_status",
    "write_queue_status",
]

log = logging.getLogger(__name__)

CONDITION_UNSCHEDULABLE_ON_NODE_POOL = "UnschedulableOnNodePool"
"""The only `schedulingConditions[].type` KAI writes (§13.2)."""
REASON_UNSCHEDULABLE = "Unschedulable"
"""Deprecated-but-written `reason` of a scheduling condition, and the Event reason for pending jobs."""


#: Task statuses after which a job counts as placed for condition purposes: its BindRequest
#: exists or it runs.  Pipelined pods still wait for capacity, so a job with one keeps its condition.
_PLACED = frozenset({TaskStatus.ALLOCATED, TaskStatus.BINDING, TaskStatus.BOUND, TaskStatus.RUNNING})
_WAITING = frozenset({TaskStatus.PENDING, TaskStatus.GATED, TaskStatus.PIPELINED})


# --------------------------------------------------------------------------------------------
# PodGroup conditions


@dataclass(frozen=True)
class PodGroupRef:
    """What the status writer needs to know about one PodGroup (normally from the informer cache).

    ``scheduling_conditions`` is ``status.schedulingConditions`` exactly as stored (wire
    form), so the writer can skip unchanged PodGroups without a GET.  ``pod_uids`` (pod name
    → uid) lets pod Events show in ``kubectl describe``; missing pods get Events without uid.
    """

    namespace: str
    name: str
    uid: str = ""
    node_pool: str = DEFAULT_NODE_POOL
    scheduling_conditions: tuple[Mapping[str, Any], ...] = ()
    mark_unschedulable: bool = True
    pod_uids: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_object(
        cls, obj: Mapping[str, Any], node_pool_label: str = "kai.scheduler/node-pool"
    ) -> PodGroupRef:
        """Build from a PodGroup as the API returns it (a dict)."""
        meta = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        status = obj.get("status") or {}
        labels = meta.get("labels") or {}
        mark = spec.get("markUnschedulable")
        return cls(
            namespace=str(meta.get("namespace") or DEFAULT_NAMESPACE),
            name=str(meta.get("name")),
            uid=str(meta.get("uid") or ""),
            node_pool=str(labels.get(node_pool_label) or DEFAULT_NODE_POOL),
            scheduling_conditions=tuple(status.get("schedulingConditions") or ()),
            mark_unschedulable=True if mark is None else bool(mark),
        )


@dataclass
class Tally:
    """A result that worker threads add to; API failures are collected in `errors`, never raised."""

    errors: list[OperationError] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    @property
    def ok(self) -> bool:
        return not self.errors

    def add(self, attr: str, value: Any) -> None:
        """Thread-safe append to a list field or increment of a counter field."""
        with self._lock:
            current = getattr(self, attr)
            if isinstance(current, list):
                current.append(value)
            else:
                setattr(self, attr, current + value)


@dataclass
class StatusResult(Tally):
    """What one status write did; API failures are collected, never raised."""

    conditions_set: list[str] = field(default_factory=list)
    conditions_cleared: list[str] = field(default_factory=list)
    events: int = 0
    pods_marked: int = 0
    queues_written: list[str] = field(default_factory=list)
    left: int = 0
    """Jobs with something to write left for the next call (beyond its `max_jobs`)."""


def _condition_equal(a: Mapping[str, Any] | None, b: Mapping[str, Any]) -> bool:
    """KAI's equality: type, node pool, reason, message and status (not time or transition id)."""
    if a is None:
        return False
    return all(a.get(k) == b.get(k) for k in ("type", "nodePool", "reason", "message", "status"))


def _explanations(reason: PendingReason) -> list[dict[str, str]]:
    """KAI's `UnschedulableExplanation`s for one reason: its own, then its node refusals' (KAI
    writes none of those, and clients tolerate reasons they do not know, §13.2)."""
    own = {"reason": reason.cause.kai_reason, "message": reason.message}
    return [own, *({"reason": r.cause.value, "message": str(r)} for r in reason.refusals)]


def desired_conditions(
    current: Sequence[Mapping[str, Any]],
    node_pool: str,
    reasons: Sequence[PendingReason],
    now: _dt.datetime,
) -> list[dict[str, Any]] | None:
    """The new ``schedulingConditions`` list, or None when the stored one already says this.

    Mirrors KAI's updater: one entry per node pool; the updated pool's entry moves to the end
    (consumers read the last entry as current); ``transitionID`` is the last entry's id + 1.
    ``reasons[]`` carries one machine-readable explanation per reason, from its cause (never
    from the message text), each followed by one per node refusal it carries, whose reason is the
    refusing filter's name (``InterPodAntiAffinity``, ``NodePorts``...) and whose message counts
    its nodes; ``message`` joins the messages.
    """
    message = "; ".join(dict.fromkeys(reason.message for reason in reasons))
    condition: dict[str, Any] = {
        "type": CONDITION_UNSCHEDULABLE_ON_NODE_POOL,
        "nodePool": node_pool,
        "reason": REASON_UNSCHEDULABLE,
        "message": message,
        "reasons": [entry for reason in reasons for entry in _explanations(reason)],
        "status": "True",
    }
    last = current[-1] if current else None
    if _condition_equal(last, condition):
        return None
    try:
        last_id = int(str(last.get("transitionID", "0"))) if last is not None else 0
    except ValueError:
        last_id = 0
    condition["transitionID"] = str(max(last_id, 0) + 1)
    condition["lastTransitionTime"] = rfc3339(now)
    kept = [dict(c) for c in current if c.get("nodePool") != node_pool]
    return [*kept, condition]


def mark_pod_unschedulable(
    core: client.CoreV1Api, namespace: str, pod: str, message: str, now: _dt.datetime
) -> bool:
    """Set the pod's ``PodScheduled=False/Unschedulable`` condition, which ``kubectl get pods``
    and ``describe`` show; False when the pod is gone.  The API server sets it True on binding."""
    condition = {
        "type": "PodScheduled",
        "status": "False",
        "reason": REASON_UNSCHEDULABLE,
        "message": message,
        "lastTransitionTime": rfc3339(now),
    }
    body = {"status": {"conditions": [condition]}}
    try:
        discard(
            core.patch_namespaced_pod_status(
                pod, namespace, body, _content_type=STRATEGIC_MERGE_PATCH, _preload_content=False
            )
        )
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return True


class StatusWriter:
    """Writes PodGroup conditions, Events and Queue status; remembers what it wrote.

    One per scheduler process.  ``mark_pods`` also gives each pending pod of an
    unschedulable job a Warning ``Unschedulable`` Event and the
    ``PodScheduled=False/Unschedulable`` condition, as KAI does when the PodGroup's
    ``markUnschedulable`` is true (its default) — so ``kubectl describe pod`` explains too.
    """

    def __init__(
        self,
        api: ApiClient,
        *,
        scheduler_name: str = SCHEDULER_NAME,
        concurrency: int = 16,
        mark_pods: bool = True,
        recorder: EventWriter | None = None,
        clock: Callable[[], _dt.datetime] = now_utc,
    ) -> None:
        self.core = client.CoreV1Api(api)
        self.custom = CustomObjects(api)
        self.recorder = recorder or EventWriter(api, component=scheduler_name)
        self.concurrency = concurrency
        self.mark_pods = mark_pods
        self.clock = clock
        self._pod_conditions: dict[tuple[str, str], str] = {}
        self._queue_status: dict[str, dict[str, dict[str, str]]] = {}
        self._left_off = ""
        """The last job written by a call that left jobs for the next: where the next starts."""
        self._lock = threading.Lock()

    # ---- PodGroups ----------------------------------------------------------------------

    def write_podgroup_status(
        self,
        plan: Plan,
        podgroups: Mapping[str, PodGroupRef] | None = None,
        blocked: Mapping[str, PendingReason] | None = None,
        max_jobs: int | None = None,
    ) -> StatusResult:
        """Explain pending jobs and clear the explanation of placed ones, for at most `max_jobs`
        jobs with something to write (in key order from where the last call left off, so a job
        whose write keeps failing never holds up the others; the rest are `left` for the next).

        ``podgroups`` maps job key (``"ns/name"``) to what the cache knows about that
        PodGroup; keys missing from it are skipped (the PodGroup does not exist).  Without it
        every job of the plan is read with a GET first — fine for tests and small clusters.
        ``blocked`` explains jobs whose placement could not be carried out (an eviction they
        needed was refused): they get that reason and its condition even though the plan
        placed them, since nothing will run until the budget allows it.

        Why a bound: a burst makes thousands of jobs pending at once, each wanting its condition
        and its pods' marks written (two patches per one-pod job); written in one cycle, they held
        up the binds of the cycles after it for minutes.  A job already explained as the plan
        explains it is left out before any call, so a cycle's calls are the jobs that changed.
        """
        result = StatusResult()
        blocked = blocked or {}
        jobs = _plan_jobs(plan)
        for key in blocked:
            jobs.setdefault(key, {})
        due: list[tuple[str, Callable[[], None]]] = []
        for key, statuses in sorted(jobs.items()):
            reason = blocked.get(key) or plan.pending_reasons.get(key)
            forced = key in blocked
            if _may_need_writing(key, reason, podgroups) and not self._written(
                podgroups, key, reason, statuses, forced
            ):
                write = functools.partial(
                    self._write_job, key, statuses, reason, podgroups, result, forced=forced
                )
                due.append((key, write))
        if max_jobs is not None and len(due) > max_jobs:
            turn = next((i for i, (key, _) in enumerate(due) if key > self._left_off), 0)
            due = [*due[turn:], *due[:turn]]
            result.left = len(due) - max_jobs
            del due[max_jobs:]
            self._left_off = due[-1][0]
        run_bounded([write for _, write in due], self.concurrency)
        return result

    def _written(
        self,
        podgroups: Mapping[str, PodGroupRef] | None,
        key: str,
        reason: PendingReason | None,
        statuses: dict[str, TaskStatus],
        forced: bool,
    ) -> bool:
        """Whether the pending job `key` is explained as `reason` says already: its Event sent,
        its condition stored, its pending pods marked (`_explain` would write nothing)."""
        ref = None if podgroups is None else podgroups.get(key)
        if ref is None or reason is None:
            return False
        event = ObjectRef.podgroup(ref.namespace, ref.name, ref.uid)
        if not self.recorder.is_duplicate(event, "Normal", REASON_UNSCHEDULABLE, reason.message):
            return False
        if self._condition_update(ref, reason, statuses, forced) is not None:
            return False
        pending = [pod for pod, status in statuses.items() if status == TaskStatus.PENDING]
        return not self.mark_pods or all(self._pod_marked(ref, pod, reason.message) for pod in pending)

    def _write_job(
        self,
        key: str,
        statuses: dict[str, TaskStatus],
        reason: PendingReason | None,
        podgroups: Mapping[str, PodGroupRef] | None,
        result: StatusResult,
        *,
        forced: bool = False,
    ) -> None:
        namespace, name = split_job_key(key)
        obj = f"PodGroup {namespace}/{name}"
        try:
            if podgroups is None:
                try:
                    ref = PodGroupRef.from_object(
                        self.custom.get(PODGROUPS, PODGROUP_VERSION, namespace, name)
                    )
                except ApiException as exc:
                    if exc.status == 404:
                        return  # a job without a PodGroup object (not ours to explain)
                    raise
            else:
                found = podgroups.get(key)
                if found is None:
                    return
                ref = found
            if reason is not None:
                self._explain(ref, reason, statuses, result, forced=forced)
            elif ref.scheduling_conditions and not any(s in _WAITING for s in statuses.values()):
                self.custom.patch_status(
                    PODGROUPS, PODGROUP_VERSION, namespace, name, {"status": {"schedulingConditions": None}}
                )
                result.add("conditions_cleared", key)
        except Exception as exc:  # collected, never raised: one PodGroup must not stop the rest
            result.add("errors", OperationError("write status of", obj, api_error_message(exc)))

    def _explain(
        self,
        ref: PodGroupRef,
        reason: PendingReason,
        statuses: dict[str, TaskStatus],
        result: StatusResult,
        *,
        forced: bool = False,
    ) -> None:
        key = f"{ref.namespace}/{ref.name}"
        if self.recorder.record(
            ObjectRef.podgroup(ref.namespace, ref.name, ref.uid),
            "Normal",
            REASON_UNSCHEDULABLE,
            reason.message,
            dedupe=True,
        ):
            result.add("events", 1)
        conditions = self._condition_update(ref, reason, statuses, forced)
        if conditions is not None:
            self.custom.patch_status(
                PODGROUPS,
                PODGROUP_VERSION,
                ref.namespace,
                ref.name,
                {"status": {"schedulingConditions": conditions}},
            )
            result.add("conditions_set", key)
        if self.mark_pods:
            for pod, status in sorted(statuses.items()):
                if status == TaskStatus.PENDING:
                    self._mark_pod(ref, pod, reason.message, result)

    def _condition_update(
        self, ref: PodGroupRef, reason: PendingReason, statuses: dict[str, TaskStatus], forced: bool
    ) -> list[dict[str, Any]] | None:
        """The PodGroup's new conditions for `reason`, or None when they stay as stored."""
        # KAI records the Event on every pending job but leaves the condition alone while any
        # of its pods holds resources (an elastic job that got part of what it asked for).
        if not forced and any(s in ACTIVE_ALLOCATED for s in statuses.values()):
            return None
        return desired_conditions(ref.scheduling_conditions, ref.node_pool, [reason], self.clock())

    def _pod_marked(self, ref: PodGroupRef, pod: str, message: str) -> bool:
        """Whether the pending pod's Event and (if the PodGroup asks for it) condition say `message`."""
        pod_ref = ObjectRef.pod(ref.namespace, pod, ref.pod_uids.get(pod, ""))
        if not self.recorder.is_duplicate(pod_ref, "Warning", REASON_UNSCHEDULABLE, message):
            return False
        with self._lock:
            return not ref.mark_unschedulable or self._pod_conditions.get((ref.namespace, pod)) == message

    def _mark_pod(self, ref: PodGroupRef, pod: str, message: str, result: StatusResult) -> None:
        pod_ref = ObjectRef.pod(ref.namespace, pod, ref.pod_uids.get(pod, ""))
        if self.recorder.record(pod_ref, "Warning", REASON_UNSCHEDULABLE, message, dedupe=True):
            result.add("events", 1)
        if not ref.mark_unschedulable:
            return
        key = (ref.namespace, pod)
        with self._lock:
            if self._pod_conditions.get(key) == message:
                return
        if not mark_pod_unschedulable(self.core, ref.namespace, pod, message, self.clock()):
            return  # the pod went away meanwhile
        with self._lock:
            self._pod_conditions[key] = message
        result.add("pods_marked", 1)

    # ---- memory -------------------------------------------------------------------------

    def forget(self, pods: Collection[tuple[str, str]], queues: Collection[str]) -> None:
        """Drop what is remembered about pods ((namespace, name)) and queues that no longer exist.

        Called every cycle with what the cache holds: the memory stays bounded by what
        exists.  A pod or queue created again under the same name is simply written again.
        """
        with self._lock:
            for key in [k for k in self._pod_conditions if k not in pods]:
                del self._pod_conditions[key]
            for name in [n for n in self._queue_status if n not in queues]:
                del self._queue_status[name]

    def tracked(self) -> dict[str, int]:
        with self._lock:
            return {"pod_conditions": len(self._pod_conditions), "queue_status": len(self._queue_status)}

    # ---- Queues -------------------------------------------------------------------------

    def write_queue_status(self, queues: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> StatusResult:
        """Patch ``status.allocated`` / ``requested`` (/ ``allocatedNonPreemptible``) per queue.

        ``queues`` maps queue name to ``{"allocated": ResourceList, "requested": ResourceList,
        optionally "allocatedNonPreemptible": ResourceList}``; values may be numbers or
        quantity strings.  A merge patch merges maps key by key, so resources this writer
        wrote before and no longer reports are removed explicitly (set to null).  Unchanged
        queues are not written at all.
        """
        result = StatusResult()
        calls = [
            functools.partial(self._write_queue, name, usage, result)
            for name, usage in sorted(queues.items())
        ]
        run_bounded(calls, self.concurrency)
        return result

    def _write_queue(self, name: str, usage: Mapping[str, Mapping[str, Any]], result: StatusResult) -> None:
        try:
            desired = {
                section: {str(k): quantity(v) for k, v in values.items()}
                for section, values in usage.items()
                if section in ("allocated", "requested", "allocatedNonPreemptible")
            }
        except TypeError as exc:
            result.add("errors", OperationError("write status of", f"Queue {name}", str(exc)))
            return
        with self._lock:
            previous = self._queue_status.get(name)
        if previous == desired:
            return
        patch: dict[str, Any] = {}
        for section, values in desired.items():
            section_patch: dict[str, Any] = dict(values)
            for gone in set((previous or {}).get(section, {})) - set(values):
                section_patch[gone] = None
            patch[section] = section_patch
        try:
            self.custom.patch_status(QUEUES, QUEUE_VERSION, None, name, {"status": patch})
        except Exception as exc:
            result.add("errors", OperationError("write status of", f"Queue {name}", api_error_message(exc)))
            return
        with self._lock:
            self._queue_status[name] = desired
        result.add("queues_written", name)


def _may_need_writing(
    key: str, reason: PendingReason | None, podgroups: Mapping[str, PodGroupRef] | None
) -> bool:
    """False for a job `_write_job` would leave alone: placed, known, and carrying no condition.

    The plan names every job, running ones included, so on a busy cluster this keeps a cycle
    from queueing thousands of calls that do nothing.
    """
    if reason is not None or podgroups is None:
        return True
    ref = podgroups.get(key)
    return ref is not None and bool(ref.scheduling_conditions)


def _plan_jobs(plan: Plan) -> dict[str, dict[str, TaskStatus]]:
    """Job key → {pod name → status at the end of the cycle}, including jobs with no tasks."""
    jobs: dict[str, dict[str, TaskStatus]] = {}
    for (job, task), state in plan.tasks.items():
        jobs.setdefault(job, {})[task] = state.status
    for job in plan.pending_reasons:
        jobs.setdefault(job, {})
    return jobs


# --------------------------------------------------------------------------------------------
# Module-level conveniences


def write_podgroup_status(
    api: ApiClient,
    plan: Plan,
    podgroups: Mapping[str, PodGroupRef] | None = None,
    *,
    scheduler_name: str = SCHEDULER_NAME,
    concurrency: int = 16,
    mark_pods: bool = True,
) -> StatusResult:
    """One-shot `StatusWriter.write_podgroup_status` (no Event dedupe across calls)."""
    writer = StatusWriter(api, scheduler_name=scheduler_name, concurrency=concurrency, mark_pods=mark_pods)
    return writer.write_podgroup_status(plan, podgroups)


def write_queue_status(
    api: ApiClient, queues: Mapping[str, Mapping[str, Mapping[str, Any]]], *, concurrency: int = 16
) -> StatusResult:
    """One-shot `StatusWriter.write_queue_status` (writes every queue given)."""
    return StatusWriter(api, concurrency=concurrency).write_queue_status(queues)
