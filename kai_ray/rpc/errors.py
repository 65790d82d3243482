"""Typed failures of the API's operations, so every transport reports them the same way.

The service layer knows nothing of gRPC; the gRPC server maps `ErrorCode` to its status code of
the same name and the CLI maps it to an exit status.  Meaning is never recovered from message
text: a client switches on the code and, for bad input, on `field`.
"""

from __future__ import annotations

import enum

__all__ = ["ErrorCode", "ServiceError"]


class ErrorCode(enum.StrEnum):
    """The gRPC status codes the API uses, by the same names."""

    INVALID_ARGUMENT = "INVALID_ARGUMENT"
    NOT_FOUND = "NOT_FOUND"
    ALREADY_EXISTS = "ALREADY_EXISTS"
    FAILED_PRECONDITION = "FAILED_PRECONDITION"
    PERMISSION_DENIED = "PERMISSION_DENIED"
    UNAUTHENTICATED = "UNAUTHENTICATED"
    OUT_OF_RANGE = "OUT_OF_RANGE"
    RESOURCE_EXHAUSTED = "RESOURCE_EXHAUSTED"
    UNAVAILABLE = "UNAVAILABLE"
    DEADLINE_EXCEEDED = "DEADLINE_EXCEEDED"


class ServiceError(Exception):
    """An operation refused or failed; ``field`` is the request field at fault (bad input only),
    spelled as a path into the request (``workload.pod_sets[0].replicas``)."""

    def __init__(self, code: ErrorCode, message: str, field: str | None = None) -> None:
        super().__init__(f"{field}: {message}" if field else message)
        self.code = code
        self.message = message
        self.field = field
