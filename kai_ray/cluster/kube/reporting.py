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
from typing import Any, Final, NamedTuple

from kubernetes import client

from kai_ray.api import ManifestProblem
from kai_ray.api.constants import DEFAULT_NAMESPACE, NODE_POOL_LABEL
from kai_ray.cluster.kube.cache import ClusterCache
from kai_ray.cluster.kube.calls import PODGROUP_VERSION, PODGROUPS, CustomObjects, api_error_message, now_utc
from kai_ray.cluster.kube.derived import DerivedTable
from kai_ray.cluster.kube.events import EventWriter, ObjectRef
from kai_ray.cluster.kube.resources import RESOURCES
from kai_ray.cluster.kube.status import PodGroupRef, desired_conditions, mark_pod_unschedulable
from kai_ray.cluster.kube.warning_conditions import (
    Conditions,
    WarningConditions,
    carries_warning,
    stored_conditions,
)
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
_Named = tuple[str, str]
"""(namespace, name) of a PodGroup."""


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
        self._carried = DerivedTable("PodGroup", _carried)
        """PodGroups as the cache holds them, with what each carries of this reporter's."""
        self._flagged: set[_Named] = set()
        """(namespace, name) of the PodGroups that carry a scheduling condition of ours: what
        `_clear_fixed` looks at."""
        self._warned: set[_Named] = set()
        """Those that carry a warning condition of ours."""
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
        troubled: set[_Named] = set()
        warned: dict[_Named, list[ManifestProblem]] = {}
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
            if target.kind != "PodGroup":
                continue
            named = (target.namespace, target.name)
            errors = [p for p in found if not p.warning]
            if errors:
                troubled.add(named)
                self._condition(obj, errors)
            warnings = [p for p in found if p.reason in WARNING_REASONS]
            if warnings:
                warned[named] = warnings
        self._reported &= current
        self._conditions = {k: v for k, v in self._conditions.items() if k in troubled}
        carried = self._follow_carried()
        self._clear_fixed(troubled, carried)
        self._warnings.write(
            warned,
            {key: held.conditions for key in self._warned if (held := carried[key]) and held.conditions},
            self._stored_conditions,
        )
        return written

    def tracked(self) -> dict[str, int]:
        """What the reporter remembers per object; pruned on every `report` to current problems."""
        return {
            "reported_problems": len(self._reported),
            "problem_conditions": len(self._conditions),
            "warned_podgroups": len(self._warned),
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

    def _follow_carried(self) -> Mapping[_Named, _Carried | None]:
        """The PodGroups carrying a condition of ours, followed from the cache's changes rather
        than by reading every PodGroup each cycle; the table as of now."""
        carried = self._carried.refresh(self._cache)
        for key in self._carried.changed:
            found = carried.get(key)
            for flagged, present in (
                (self._flagged, found is not None and found.scheduling is not None),
                (self._warned, found is not None and found.conditions is not None),
            ):
                if present:
                    flagged.add(key)
                else:
                    flagged.discard(key)
        return carried

    def _clear_fixed(self, troubled: set[_Named], carried: Mapping[_Named, _Carried | None]) -> None:
        """Drop our scheduling conditions from PodGroups that no longer have a problem."""
        for key in sorted(self._flagged):
            found = carried[key]
            ref = None if found is None else found.scheduling
            assert ref is not None  # flagged: it carries a condition of ours
            if (ref.namespace, ref.name) in troubled:
                continue
            kept = [c for c in ref.scheduling_conditions if not _is_own(c)]
            self._patch(ref, [dict(c) for c in kept] or None)

    def _stored_conditions(self, key: tuple[str, str]) -> Conditions | None:
        group = self._cache.get("PodGroup", *key)
        return None if group is None else stored_conditions(group)

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


class _Carried(NamedTuple):
    """What a PodGroup carries of this reporter's: its ref when one of its scheduling conditions
    is ours, its stored conditions when one of them is a warning condition of ours."""

    scheduling: PodGroupRef | None
    conditions: Conditions | None


def _carried(group: Mapping[str, Any]) -> _Carried | None:
    ref = PodGroupRef.from_object(group, NODE_POOL_LABEL)
    scheduling = ref if any(_is_own(c) for c in ref.scheduling_conditions) else None
    conditions = stored_conditions(group)
    warned = conditions if carries_warning(conditions) else None
    return None if scheduling is None and warned is None else _Carried(scheduling, warned)


def _is_own(condition: Any) -> bool:
    reasons = condition.get("reasons") or []
    return bool(reasons) and all(r.get("reason") in OWN_REASONS for r in reasons)
