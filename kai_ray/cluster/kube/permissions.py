"""Exactly what `kai-ray serve` may do on the API server, and a start-up check that it can.

The list is the single source for three things that must agree: the RBAC
manifest shipped in `examples/rbac/serve-rbac.yaml` (a test holds that it
grants these and nothing more), the table in docs/kubernetes.md, and the
check `serve` runs before it starts, so a missing rule is one clear line at
start-up instead of a 403 on every cycle.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from kubernetes import client

__all__ = ["CLUSTER_PERMISSIONS", "LEASE_PERMISSIONS", "Permission", "missing_permissions"]


@dataclass(frozen=True)
class Permission:
    group: str
    resource: str
    verb: str
    subresource: str = ""

    def __str__(self) -> str:
        resource = f"{self.resource}/{self.subresource}" if self.subresource else self.resource
        qualified = f"{resource}.{self.group}" if self.group else resource
        return f"{self.verb} {qualified}"


def _each(group: str, resource: str, verbs: Iterable[str], subresource: str = "") -> list[Permission]:
    return [Permission(group, resource, verb, subresource) for verb in verbs]


_SCHEDULING = "scheduling.run.ai"

CLUSTER_PERMISSIONS: tuple[Permission, ...] = (
    # Pods: the cache (ours and other schedulers' on nodes), the grouper's annotation, the binder.
    *_each("", "pods", ("get", "list", "watch", "patch")),
    *_each("", "pods", ("create",), "binding"),
    *_each("", "pods", ("create",), "eviction"),
    *_each("", "pods", ("patch",), "status"),
    *_each("", "nodes", ("get", "list", "watch")),
    *_each("", "events", ("create",)),
    *_each("scheduling.k8s.io", "priorityclasses", ("list", "watch")),
    *_each("kai.scheduler", "topologies", ("list", "watch")),
    *_each(_SCHEDULING, "queues", ("list", "watch")),
    *_each(_SCHEDULING, "queues", ("patch",), "status"),
    *_each(_SCHEDULING, "podgroups", ("get", "list", "watch", "create", "patch")),
    *_each(_SCHEDULING, "podgroups", ("patch",), "status"),
    *_each(_SCHEDULING, "bindrequests", ("get", "list", "watch", "create", "delete")),
    *_each(_SCHEDULING, "bindrequests", ("patch",), "status"),
)
"""Granted cluster-wide (a ClusterRole): the scheduler reads and writes in every namespace."""

LEASE_PERMISSIONS: tuple[Permission, ...] = tuple(
    _each("coordination.k8s.io", "leases", ("get", "create", "update"))
)
"""Granted in the lease namespace only (a Role)."""


def missing_permissions(api: Any, lease_namespace: str) -> list[Permission]:
    """The permissions this identity lacks, asked of the API server (SelfSubjectAccessReview).

    `api` must not be fenced: these reviews are POSTs made before leadership exists.
    """
    review: Callable[..., Any] = client.AuthorizationV1Api(api).create_self_subject_access_review
    missing = []
    checks = [(p, None) for p in CLUSTER_PERMISSIONS] + [(p, lease_namespace) for p in LEASE_PERMISSIONS]
    for permission, namespace in checks:
        body = client.V1SelfSubjectAccessReview(
            spec=client.V1SelfSubjectAccessReviewSpec(
                resource_attributes=client.V1ResourceAttributes(
                    group=permission.group,
                    resource=permission.resource,
                    subresource=permission.subresource or None,
                    verb=permission.verb,
                    namespace=namespace,
                )
            )
        )
        status = review(body).status
        if status is None or not status.allowed:
            missing.append(permission)
    return missing
