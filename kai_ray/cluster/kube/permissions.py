"""Exactly what `kai-ray serve` and `kai-ray podgrouper` may do on the API server, and a
start-up check that they can.

The lists are the single source for four things that must agree: the RBAC
manifests shipped in `examples/rbac/` (a test holds that they grant these and
nothing more), the Helm chart's ClusterRoles (tests/helm/test_chart_rbac.py), the
table in docs/kubernetes.md, and the
check `serve` runs before it starts, so a missing rule is one clear line at
start-up instead of a 403 on every cycle.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from kubernetes import client

__all__ = [
    "API_PERMISSIONS",
    "CLUSTER_PERMISSIONS",
    "LEASE_PERMISSIONS",
    "OWNER_READ_PERMISSIONS",
    "PODGROUPER_PERMISSIONS",
    "SCHEDULER_PERMISSIONS",
    "USAGE_PERMISSIONS",
    "Permission",
    "missing_permissions",
]


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

SCHEDULER_PERMISSIONS: tuple[Permission, ...] = (
    # Pods: the cache (ours and other schedulers' on nodes), node-pool and GPU-group labels, the binder.
    *_each("", "pods", ("get", "list", "watch", "patch")),
    *_each("", "pods", ("create",), "binding"),
    *_each("", "pods", ("create",), "eviction"),
    *_each("", "pods", ("patch",), "status"),
    *_each("", "nodes", ("get", "list", "watch")),
    # Namespaces: their labels, which inter-pod affinity terms' namespaceSelectors match.
    *_each("", "namespaces", ("list", "watch")),
    *_each("", "events", ("create",)),
    *_each("scheduling.k8s.io", "priorityclasses", ("list", "watch")),
    *_each("kai.scheduler", "topologies", ("list", "watch")),
    # What pods' volumes and environment name (where a pod may run, what it waits for); a delayed
    # claim is annotated with its pod's node before the pod is bound.
    *_each("", "persistentvolumeclaims", ("list", "watch", "patch")),
    *_each("", "persistentvolumes", ("list", "watch")),
    *_each("storage.k8s.io", "storageclasses", ("list", "watch")),
    *_each("", "configmaps", ("list", "watch")),
    *_each(_SCHEDULING, "queues", ("list", "watch")),
    *_each(_SCHEDULING, "queues", ("patch",), "status"),
    *_each(_SCHEDULING, "podgroups", ("get", "list", "watch", "patch")),
    *_each(_SCHEDULING, "podgroups", ("patch",), "status"),
    *_each(_SCHEDULING, "bindrequests", ("get", "list", "watch", "create", "delete")),
    *_each(_SCHEDULING, "bindrequests", ("patch",), "status"),
)
"""The scheduling loop alone (`serve --no-podgrouper`), granted cluster-wide (a ClusterRole)."""

PODGROUPER_PERMISSIONS: tuple[Permission, ...] = (
    # Pods: its cache, and the patch linking each pod to its PodGroup.
    *_each("", "pods", ("get", "list", "watch", "patch")),
    *_each("", "events", ("create",)),
    *_each("scheduling.k8s.io", "priorityclasses", ("list", "watch")),
    *_each(_SCHEDULING, "podgroups", ("get", "list", "watch", "create", "update")),
)
"""The podgrouper (in `serve`, or alone as `kai-ray podgrouper`), granted cluster-wide."""

_OWNER_KINDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("", ("replicationcontrollers",)),
    ("apps", ("deployments", "replicasets", "statefulsets")),
    ("batch", ("jobs", "cronjobs")),
    ("ray.io", ("rayclusters", "rayjobs", "rayservices")),
    (
        "kubeflow.org",
        ("pytorchjobs", "mpijobs", "tfjobs", "xgboostjobs", "jaxjobs", "notebooks", "scheduledworkflows"),
    ),
    ("trainer.kubeflow.org", ("trainjobs",)),
    ("argoproj.io", ("workflows",)),
    ("jobset.x-k8s.io", ("jobsets",)),
    ("leaderworkerset.x-k8s.io", ("leaderworkersets",)),
    ("serving.knative.dev", ("services", "configurations", "revisions")),
    ("grove.io", ("podcliquesets", "podgangsets", "podcliques", "podcliquescalinggroups")),
    ("scheduler.grove.io", ("podgangs",)),
    ("tekton.dev", ("pipelineruns", "taskruns")),
    ("machinelearning.seldon.io", ("seldondeployments",)),
    ("kubevirt.io", ("virtualmachines", "virtualmachineinstances")),
    ("workspace.devfile.io", ("devworkspaces",)),
    ("amlarc.azureml.com", ("amljobs",)),
    ("egx.nvidia.io", ("spotrequests",)),
    (
        "run.ai",
        (
            "runaijobs",
            "trainingworkloads",
            "interactiveworkloads",
            "distributedworkloads",
            "inferenceworkloads",
            "distributedinferenceworkloads",
            "kartas",
        ),
    ),
)

OWNER_READ_PERMISSIONS: tuple[Permission, ...] = tuple(
    permission
    for group, resources in _OWNER_KINDS
    for resource in resources
    for permission in _each(group, resource, ("get", "list"))
)
"""What the podgrouper reads to find a pod's workload (KAI's owner kinds).  Optional: without
one, the owner chain stops at the last readable owner (spec/integrations.md §1.2), so that
kind's pods are grouped by what is below it; start-up says which kinds it cannot read."""

CLUSTER_PERMISSIONS: tuple[Permission, ...] = tuple(
    dict.fromkeys((*SCHEDULER_PERMISSIONS, *PODGROUPER_PERMISSIONS, *OWNER_READ_PERMISSIONS))
)
"""`kai-ray serve` with its in-process podgrouper (the default): the three sets above."""

API_PERMISSIONS: tuple[Permission, ...] = (
    *_each("", "pods", ("get", "create", "delete")),
    *_each(_SCHEDULING, "podgroups", ("get", "create", "delete")),
)
"""The gRPC API (`serve --grpc-address`), on top of the sets above, granted cluster-wide: exactly
what its Kubernetes backend (`kai_ray/rpc/kube_backend.py`) calls.  SubmitWorkload creates
PodGroups and pods, CancelWorkload deletes them, and a submit that failed half-way reads back
(`get`) and deletes what it may have made.  Its reads of the cluster come from the scheduler's
own cache, so it lists and watches nothing of its own."""

LEASE_PERMISSIONS: tuple[Permission, ...] = tuple(
    _each("coordination.k8s.io", "leases", ("get", "create", "update"))
)
"""Granted in the lease namespace only (a Role)."""

USAGE_PERMISSIONS: tuple[Permission, ...] = tuple(_each("", "configmaps", ("get", "create", "update")))
"""Time-based fair share with `clientType: embedded` keeps its recorded usage in a ConfigMap in the
lease namespace.  Optional: without them the history lives in memory only (start-up says so)."""


def missing_permissions(
    api: Any,
    cluster: Iterable[Permission],
    lease_namespace: str | None = None,
    namespaced: Iterable[Permission] = LEASE_PERMISSIONS,
) -> list[Permission]:
    """The permissions this identity lacks, asked of the API server (SelfSubjectAccessReview):
    `cluster` in every namespace, and `namespaced` (the Lease rules) in `lease_namespace` when given.

    `api` must not be fenced: these reviews are POSTs made before leadership exists.
    """
    review: Callable[..., Any] = client.AuthorizationV1Api(api).create_self_subject_access_review
    missing = []
    checks: list[tuple[Permission, str | None]] = [(p, None) for p in cluster]
    if lease_namespace is not None:
        checks += [(p, lease_namespace) for p in namespaced]
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
