"""Who is calling, as far as the service layer cares: the namespaces the caller may act in."""

from __future__ import annotations

from dataclasses import dataclass

from kai_ray.rpc.errors import ErrorCode, ServiceError

__all__ = ["ANYONE", "Caller"]


@dataclass(frozen=True)
class Caller:
    """``namespaces`` None means every namespace (a ``*`` token, or no authentication at all).

    Cluster-wide reads (queues, nodes) are open to every authenticated caller, as a queue's
    quota is not a secret of one namespace; workloads are visible only in allowed namespaces.
    """

    namespaces: frozenset[str] | None = None
    name: str = "anonymous"

    def may_use(self, namespace: str) -> bool:
        return self.namespaces is None or namespace in self.namespaces

    def require(self, namespace: str) -> None:
        """Raise PERMISSION_DENIED unless the caller may act in ``namespace``."""
        if not self.may_use(namespace):
            raise ServiceError(
                ErrorCode.PERMISSION_DENIED, f"the caller may not use namespace {namespace!r}", "namespace"
            )


ANYONE = Caller()
"""The caller of an unauthenticated server, and of the CLI's offline mode."""
