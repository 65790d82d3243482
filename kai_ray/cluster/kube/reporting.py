"""Tell users, on their own objects, why the scheduler skipped them.

The snapshot turns every Queue, PodGroup or Pod it cannot interpret into a
`ManifestProblem` and leaves it out (issue 5, "Bad input and faults"). A log
line in the scheduler's pod is invisible to whoever wrote the object, so each
problem becomes a Warning Event `InvalidObject` on that object (`kubectl
describe` shows it; Queues are cluster-scoped, so theirs land in `default`)
and, for a PodGroup, an `UnschedulableOnNodePool` scheduling condition
(spec/kubernetes-api.md §13.2), where KAI's tools look for "why pending".
Its `reasons[]` say `QueueDoesNotExist` (KAI's own reason) for a missing
queue and `InvalidObject` otherwise; those two reasons mark the condition as
this reporter's, and it removes such conditions once the PodGroup is fixed
(the engine never sees a skipped PodGroup, so the plan's status writer
would not clear them).

The scheduler re-reads the same broken objects every cycle, so nothing is
written twice: Events are remembered by (object uid, message) for as long as
the problem persists (one that goes away and comes back is reported again),
and a condition is only patched when the PodGroup does not already say it.

The Event and condition plumbing is `status.py`'s, shared with the applier.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from kubernetes import client

from kai_ray.api import ManifestProblem
from kai_ray.api.constants import DEFAULT_NAMESPACE, NODE_POOL_LABEL
from kai_ray.cluster.kube.cache import RESOURCES, ClusterCache
from kai_ray.cluster.kube.derived import DerivedTable
from kai_ray.cluster.kube.status import (
    PODGROUP_VERSION,
    PODGROUPS,
    CustomObjects,
    EventWriter,
    ObjectRef,
    PodGroupRef,
    api_error_message,
    desired_conditions,
    mark_pod_unschedulable,
    now_utc,
)
from kai_ray.cluster.kube.warning_conditions import WarningConditions
from kai_ray.convert.jobs import WARNING_REASONS
from kai_ray.engine.reasons import PendingCause, PendingReason

__all__ = [
    "INVALID_OBJECT",
    "OWN_REASONS",
    "QUEUE_DOES_NOT_EXIST",
    "REPORTED_KINDS",
    "ProblemReporter",
    "object_ref",
]

log = logging.getLogger(__name__)

INVALID_OBJECT: Final = PendingCause.INVALID.value
"""Event reason for an object the scheduler cannot interpret and therefore skips."""
QUEUE_DOES_NOT_EXIST: Final = PendingCause.QUEUE_DOES_NOT_EXIST.value
"""KAI's condition reason for a PodGroup whose queue is missing (§13.2)."""
OWN_REASONS: Final = frozenset({INVALID_OBJECT, QUEUE_DOES_NOT_EXIST})
"""Condition reasons only this reporter writes; conditions made of them are its to clear."""
REPORTED_KINDS: Final = frozenset({"Pod", "PodGroup", "Queue"})

_Key = tuple[str, str, str, str, str]
"""(kind, namespace, name, uid, message)."""


def object_ref(obj: dict[str, Any]) -> ObjectRef:
    """The Event target for a cached object; cluster-scoped objects' Events go to `default`."""
    meta = obj.get("metadata") or {}
    kind = str(obj.get("kind"))
    return ObjectRef(
        kind=kind,
        namespace=str(meta.get("namespace") or DEFAULT_NAMESPACE),
        name=str(meta.get("name")),
        uid=str(meta.get("uid") or ""),
        api_version=str(obj.get("apiVersion") or RESOURCES[kind].api_version),
    )


@dataclass(frozen=True)
class _Target:
    kind: str
    namespace: str
    name: str


class ProblemReporter:
    """Turns each cycle's problems into Events and PodGroup conditions, once per distinct problem.

    One per scheduler process (the memory of what was reported lives here).
    """

    def __init__(self, api: Any, cache: ClusterCache, recorder: EventWriter | None = None) -> None:
        self._cache = cache
        self._custom = CustomObjects(api)
        self._recorder = recorder or EventWriter(api, component=cache.scheduler_name)
        self._reported: set[_Key] = set()
        self._conditions: dict[tuple[str, str], str] = {}
        self._with_own = DerivedTable("PodGroup", _with_own_conditions)
        """PodGroups as the cache holds them, those carrying a condition of ours as their ref."""
        self._flagged: set[tuple[str, str]] = set()
        """(namespace, name) of the PodGroups that carry one: what `_clear_fixed` looks at."""
        self._warnings = WarningConditions(self._custom)
        self._core = client.CoreV1Api(api)

    def report(self, problems: Iterable[ManifestProblem]) -> int:
        """Write what is new since the last call; returns how many Events were written.

        API failures are logged and retried on the next call, never raised.
        """
        by_target: dict[_Target, list[ManifestProblem]] = {}
        for problem in problems:
            if problem.kind in REPORTED_KINDS and problem.name:
                target = _Target(problem.kind, problem.namespace, problem.name)
                by_target.setdefault(target, []).append(problem)
            else:
                log.warning("skipped: %s", problem)
        current: set[_Key] = set()
        troubled: set[tuple[str, str]] = set()
        warned: dict[tuple[str, str], list[ManifestProblem]] = {}
        written = 0
        for target, found in by_target.items():
            obj = self._cache.get(target.kind, target.namespace, target.name)
            if obj is None:  # deleted since the snapshot
                continue
            ref = object_ref(obj)
            for problem in {(p.reason, p.detail()): p for p in found}.values():
                key = (target.kind, target.namespace, target.name, ref.uid, problem.detail())
                current.add(key)
                if key not in self._reported and self._tell(ref, obj, problem):
                    self._reported.add(key)
                    written += 1
            errors = [p for p in found if not p.warning]
            if target.kind == "PodGroup" and errors:
                troubled.add((target.namespace, target.name))
                self._condition(obj, errors)
            if target.kind == "PodGroup":
                warned[(target.namespace, target.name)] = [p for p in found if p.reason in WARNING_REASONS]
        self._reported &= current
        self._conditions = {k: v for k, v in self._conditions.items() if k in troubled}
        self._clear_fixed(troubled)
        self._warnings.write(self._cache, {key: found for key, found in warned.items() if found})
        return written

    def tracked(self) -> dict[str, int]:
        """What the reporter remembers per object; pruned on every `report` to current problems."""
        return {
            "reported_problems": len(self._reported),
            "problem_conditions": len(self._conditions),
            **self._warnings.tracked(),
        }

    def _tell(self, ref: ObjectRef, obj: Mapping[str, Any], problem: ManifestProblem) -> bool:
        """A Warning Event (`InvalidObject`, or the warning's own reason); a pod of ours left
        waiting by the problem (its PodGroup's queue is missing, say) also gets
        `PodScheduled=False` with the problem's words, as a pod the engine could not place does.
        False when the API refused (the next cycle tries again)."""
        text = problem.detail()
        try:
            self._recorder.record(ref, "Warning", problem.reason or INVALID_OBJECT, text)
            if not problem.warning and _waiting_pod_of(obj, self._cache.scheduler_name):
                mark_pod_unschedulable(self._core, ref.namespace, ref.name, text, now_utc())
        except Exception as error:  # the next cycle tries again
            log.warning("cannot report on %s: %s", ref, api_error_message(error))
            return False
        return True

    def _condition(self, group: dict[str, Any], problems: list[ManifestProblem]) -> None:
        ref = PodGroupRef.from_object(group, NODE_POOL_LABEL)
        key = (ref.namespace, ref.name)
        reasons = list({p.detail(): _reason(p) for p in problems}.values())
        message = "; ".join(r.message for r in reasons)
        if self._conditions.get(key) == message:
            return  # written already; the cache may just not have seen our patch yet
        conditions = desired_conditions(ref.scheduling_conditions, ref.node_pool, reasons, now_utc())
        if conditions is not None and not self._patch(ref, conditions):
            return
        self._conditions[key] = message

    def _clear_fixed(self, troubled: set[tuple[str, str]]) -> None:
        """Drop our conditions from PodGroups that no longer have a problem.

        Only PodGroups that carry one are looked at, found from the cache's changes rather than
        by reading every PodGroup each cycle."""
        refs = self._with_own.refresh(self._cache)
        for key in self._with_own.changed:
            if refs.get(key) is not None:
                self._flagged.add(key)
            else:
                self._flagged.discard(key)
        for key in sorted(self._flagged):
            ref = refs[key]
            assert ref is not None  # flagged: it carries a condition of ours
            if (ref.namespace, ref.name) in troubled:
                continue
            kept = [c for c in ref.scheduling_conditions if not _is_own(c)]
            self._patch(ref, [dict(c) for c in kept] or None)

    def _patch(self, ref: PodGroupRef, conditions: list[dict[str, Any]] | None) -> bool:
        """Merge-patch `status.schedulingConditions`; False when the API refused (logged, retried)."""
        body = {"status": {"schedulingConditions": conditions}}
        try:
            self._custom.patch_status(PODGROUPS, PODGROUP_VERSION, ref.namespace, ref.name, body)
        except Exception as error:  # the next cycle tries again
            log.warning(
                "cannot set conditions of PodGroup %s/%s: %s",
                ref.namespace,
                ref.name,
                api_error_message(error),
            )
            return False
        return True


def _waiting_pod_of(obj: Mapping[str, Any], scheduler_name: str) -> bool:
    """A pod of this scheduler that no node holds yet."""
    if obj.get("kind") != "Pod":
        return False
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    ours = spec.get("schedulerName") == scheduler_name
    return ours and not spec.get("nodeName") and status.get("phase", "Pending") == "Pending"


def _reason(problem: ManifestProblem) -> PendingReason:
    missing_queue = problem.field == "spec.queue"
    cause = PendingCause.QUEUE_DOES_NOT_EXIST if missing_queue else PendingCause.INVALID
    return PendingReason(cause, problem.detail())


def _with_own_conditions(group: Mapping[str, Any]) -> PodGroupRef | None:
    ref = PodGroupRef.from_object(group, NODE_POOL_LABEL)
    return ref if any(_is_own(c) for c in ref.scheduling_conditions) else None


def _is_own(condition: Any) -> bool:
    reasons = condition.get("reasons") or []
    return bool(reasons) and all(r.get("reason") in OWN_REASONS for r in reasons)
