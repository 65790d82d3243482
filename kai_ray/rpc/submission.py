"""What every way of submitting shares: the `Submission` it builds, and the checks of names,
queues and priority classes whose failures name the request field at fault."""

from __future__ import annotations

import re
from collections.abc import Container
from dataclasses import dataclass, field
from typing import Any

from kai_ray.api import (
    ApiObject,
)
from kai_ray.rpc.backend import BackendView
from kai_ray.rpc.errors import ErrorCode, ServiceError
from kai_ray.rpc.objects import priority_values, queues_of
from kai_ray.rpc.workloads import Members

__all__ = [
    "MAX_NAME",
    "MAX_PODS",
    "Submission",
    "check_name",
    "check_priority_class",
    "check_queue",
    "generated_name",
    "invalid",
]

MAX_PODS = 10_000
"""Pods one workload may have; more is RESOURCE_EXHAUSTED (a typo like 100000 replicas)."""
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
MAX_NAME = 63


@dataclass
class Submission:
    """What one submit creates, in creation order (PodGroups before their pods).

    `checked`: the objects whose conversion stands for all of them (None: every object).  A pod
    set's replicas differ from its first pod only in the name, and every problem conversion can
    find in a pod is found in each replica alike, so converting the first is enough; at four
    pods a workload that was half of a submit's time.
    """

    members: Members
    objects: list[ApiObject] = field(default_factory=list)
    checked: list[ApiObject] | None = None


def invalid(field_path: str, message: str) -> ServiceError:
    return ServiceError(ErrorCode.INVALID_ARGUMENT, message, field_path)


def check_name(value: str, field_path: str) -> None:
    if len(value) > MAX_NAME or not _NAME.match(value):
        raise invalid(
            field_path,
            f"must be a DNS label (lower-case letters, digits, '-'; at most {MAX_NAME}), got {value!r}",
        )


def generated_name(namespace: str, base: str, taken: Container[str]) -> str:
    """BASE-N with the smallest N not in use: deterministic for the same sequence of submits."""
    used = taken
    base = base[: MAX_NAME - 7]
    number = 1
    while f"{namespace}/{base}-{number}" in used:
        number += 1
    return f"{base}-{number}"


def check_queue(queue: str, view: BackendView, at: str) -> None:
    if not queue:
        raise invalid(at, "required: the leaf queue to charge")
    queues = queues_of(view)
    if queue not in queues:
        known = ", ".join(sorted(n for n in queues if not _has_children(n, queues))) or "none"
        raise ServiceError(
            ErrorCode.FAILED_PRECONDITION, f"queue {queue!r} does not exist (leaf queues: {known})", at
        )
    if _has_children(queue, queues):
        raise ServiceError(
            ErrorCode.FAILED_PRECONDITION,
            f"queue {queue!r} is a parent queue; submit to one of its leaves",
            at,
        )


def _has_children(name: str, queues: dict[str, Any]) -> bool:
    return any(q.spec.parent_queue == name for q in queues.values())


def check_priority_class(name: str, view: BackendView, at: str) -> None:
    if name and name not in priority_values(view):
        known = ", ".join(sorted(priority_values(view)))
        raise ServiceError(
            ErrorCode.FAILED_PRECONDITION, f"priority class {name!r} does not exist ({known})", at
        )
