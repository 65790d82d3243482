"""PodGroup warnings as conditions: said on the object while they hold, removed once fixed.

A warning (a `ManifestProblem` with `warning` set, such as a PriorityClass that does not
exist) skips nothing: the PodGroup is scheduled all the same, so it must not get the
`UnschedulableOnNodePool` scheduling condition that says why a PodGroup waits.  It gets an
entry in `status.conditions` instead (a field KAI's CRD has and no KAI component writes), of
the warning's own type (`PriorityClassNotFound`, status `True`), next to the Warning Event
the reporter writes.  Conditions of those types are this module's: it removes them from
PodGroups that no longer have the warning (the reporter finds those from the cache's
changes), so a fix made while the scheduler was down is cleared too.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from kai_ray.api import ManifestProblem
from kai_ray.cluster.kube.calls import (
    PODGROUP_VERSION,
    PODGROUPS,
    CustomObjects,
    api_error_message,
    now_utc,
    rfc3339,
)
from kai_ray.convert.jobs import WARNING_REASONS

__all__ = ["Conditions", "WarningConditions", "carries_warning", "stored_conditions"]

log = logging.getLogger(__name__)

Key = tuple[str, str]
Conditions = tuple[dict[str, Any], ...]


class WarningConditions:
    """Keeps each PodGroup's warning conditions equal to its current warnings.

    Which PodGroups carry one of ours is the reporter's to follow (`carries_warning` over the
    cache's changes, in the one table it keeps of PodGroups), so a PodGroup is parsed once.
    """

    def __init__(self, custom: CustomObjects) -> None:
        self._custom = custom

    def write(
        self,
        warnings: Mapping[Key, list[ManifestProblem]],
        carried: Mapping[Key, Conditions],
        read: Callable[[Key], Conditions | None],
    ) -> None:
        """Set the conditions of `warnings` ((namespace, name) → its warnings) and clear ours
        from every other PodGroup.  `carried`: the stored conditions of the PodGroups that carry
        one of ours; `read`: any other PodGroup's (None when it is gone).  API failures are
        logged and retried on the next call."""
        for key in sorted(set(carried) | set(warnings)):
            current = carried[key] if key in carried else read(key)
            if current is None:
                continue  # deleted since the snapshot
            wanted = _wanted(current, warnings.get(key, []))
            if [_compared(c) for c in wanted] != [_compared(c) for c in current]:
                self._patch(key, wanted)

    def _patch(self, key: Key, conditions: list[dict[str, Any]]) -> None:
        namespace, name = key
        body = {"status": {"conditions": conditions or None}}
        try:
            self._custom.patch_status(PODGROUPS, PODGROUP_VERSION, namespace, name, body)
        except Exception as error:  # the next cycle tries again
            reason = api_error_message(error)
            log.warning("cannot set conditions of PodGroup %s/%s: %s", namespace, name, reason)


def carries_warning(conditions: Conditions) -> bool:
    """Whether one of these stored conditions is a warning condition of ours."""
    return any(_is_ours(c) for c in conditions)


def _wanted(current: Conditions, warnings: list[ManifestProblem]) -> list[dict[str, Any]]:
    """The stored conditions with ours replaced by one per current warning (a condition whose
    words did not change keeps its transition time)."""
    kept = [dict(c) for c in current if not _is_ours(c)]
    previous = {c.get("type"): c for c in current if _is_ours(c)}
    for warning in sorted(warnings, key=lambda w: w.reason):
        message = warning.detail()
        before = previous.get(warning.reason)
        when = before.get("lastTransitionTime") if before and before.get("message") == message else None
        kept.append(
            {
                "type": warning.reason,
                "status": "True",
                "reason": warning.reason,
                "message": message,
                "lastTransitionTime": when or rfc3339(now_utc()),
            }
        )
    return kept


def _compared(condition: Mapping[str, Any]) -> tuple[Any, ...]:
    return tuple(condition.get(field) for field in ("type", "status", "reason", "message"))


def _is_ours(condition: Mapping[str, Any]) -> bool:
    return condition.get("type") in WARNING_REASONS


def stored_conditions(group: Mapping[str, Any]) -> Conditions:
    """A PodGroup's `status.conditions`, as stored."""
    status = group.get("status") or {}
    return tuple(dict(c) for c in (status.get("conditions") or ()) if isinstance(c, dict))
