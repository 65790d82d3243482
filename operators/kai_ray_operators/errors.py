"""Why a pod could not be grouped, as typed exceptions with one-line messages.

The podgrouper must never crash on a workload it cannot read, nor group a pod
under a guessed PodGroup: either it returns metadata or it raises one of these.
Each message names the object and, where there is one, the field, so the line
can go unchanged into a pod Event, a log line or the CLI's stderr.
"""

from __future__ import annotations

__all__ = [
    "Forbidden",
    "GroupingError",
    "InvalidWorkload",
    "NotFound",
    "OwnerChainError",
    "ReadError",
    "UnsupportedWorkload",
]


class GroupingError(Exception):
    """Base class: `subject` is the object ("RayCluster ml/rc"), `field` the offending field, if any."""

    def __init__(self, subject: str, problem: str, field: str | None = None) -> None:
        self.subject = subject
        self.field = field
        self.problem = problem
        where = f"{subject}: {field}" if field else subject
        super().__init__(f"{where}: {problem}")


class InvalidWorkload(GroupingError):
    """A workload, pod or ConfigMap field holds a value the grouper cannot use."""


class UnsupportedWorkload(GroupingError):
    """The workload asks for a grouping this implementation does not provide."""


class OwnerChainError(GroupingError):
    """The pod's owner chain cannot be followed: an owner replaced, shared, unreadable, or a cycle."""


class ReadError(GroupingError):
    """An object the grouper needs could not be read."""


class NotFound(ReadError):
    """The object does not exist (HTTP 404)."""


class Forbidden(ReadError):
    """The grouper may not read the object (HTTP 403); owner resolution stops at the last readable owner."""
