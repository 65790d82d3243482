"""What the workload tests share: their custom resources, and how they read PodGroups and pods.

Used by tests/kube/test_workloads_real_operators.py (KubeRay and the training-operator run for
real) and tests/kube/test_workloads_without_their_controller.py (Argo and mpi-operator v2 pods
made by the test).  Both create custom resources (RayClusters, PyTorchJobs, Workflows,
MPIJobs, ...) in the test's namespace, read the PodGroups serve makes for them, and delete
them at the end themselves: the dev cluster runs no garbage collector or namespace controller.
"""

from __future__ import annotations

import contextlib
from typing import Any

from kube_serve import wait_until
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kai_ray.api.constants import POD_GROUP_NAME_ANNOTATION

Resource = tuple[str, str, str]
"""(group, version, plural) of a namespaced custom resource."""

PODGROUPS: Resource = ("scheduling.run.ai", "v2alpha2", "podgroups")
TIMEOUT = 90.0
"""Seconds to wait for anything: operators, serve, etcd and the API server share two cores."""


class CustomObjects:
    """The custom resources one test creates in its namespace, deleted (newest first) by `close`.

    Nothing else deletes them (no garbage collector runs).  Each deletion is waited for, because
    a real operator may hold the object with a finalizer (KubeRay's on a RayJob) until it has
    cleaned up: that operator's fixture closes this before it stops the operator, or the object
    would never go.  Without a controller the object is gone at once and the wait is one read.
    """

    def __init__(self, api: Any, namespace: str) -> None:
        self.custom = client.CustomObjectsApi(api)
        self.namespace = namespace
        self.created: list[tuple[Resource, str]] = []

    def create(self, resource: Resource, body: dict[str, Any]) -> dict[str, Any]:
        """Create `body`, remembered for `close`; returns it as the server stored it."""
        group, version, plural = resource
        made: dict[str, Any] = self.custom.create_namespaced_custom_object(
            group, version, self.namespace, plural, body
        )
        self.created.append((resource, made["metadata"]["name"]))
        return made

    def get(self, resource: Resource, name: str) -> dict[str, Any] | None:
        """The object, or None while it does not exist (yet, or any more)."""
        group, version, plural = resource
        try:
            found: dict[str, Any] = self.custom.get_namespaced_custom_object(
                group, version, self.namespace, plural, name
            )
        except ApiException as error:
            if error.status == 404:
                return None
            raise
        return found

    def delete(self, resource: Resource, name: str) -> None:
        """Delete and wait until it is gone (an operator's finalizer must be removed first)."""
        group, version, plural = resource
        try:
            self.custom.delete_namespaced_custom_object(group, version, self.namespace, plural, name)
        except ApiException as error:
            if error.status != 404:
                raise
        wait_until(lambda: self.get(resource, name) is None, TIMEOUT, f"{plural} {name} deleted")
        with contextlib.suppress(ValueError):
            self.created.remove((resource, name))

    def close(self) -> None:
        """Delete every object still recorded, newest first (an owner after what it owns).

        One that fails to go does not keep the others from being deleted; the failures are
        raised together at the end, so a teardown that leaves something behind is reported.
        """
        failures: list[Exception] = []
        for resource, name in reversed(list(self.created)):
            try:
                self.delete(resource, name)
            except Exception as error:  # an API error, or the wait timed out (AssertionError)
                failures.append(error)
        if failures:
            raise ExceptionGroup(f"custom resources left in {self.namespace}", failures)


def linked(pod: client.V1Pod) -> str | None:
    """The PodGroup a pod was linked to (the podgrouper's annotation), None before it is."""
    return (pod.metadata.annotations or {}).get(POD_GROUP_NAME_ANNOTATION)


def unschedulable(group: dict[str, Any] | None) -> bool:
    """Whether serve said why the PodGroup waits: "nothing bound" is only checked after that."""
    conditions = ((group or {}).get("status") or {}).get("schedulingConditions") or []
    return any(c.get("type") == "UnschedulableOnNodePool" and c.get("status") == "True" for c in conditions)


def owner_of(obj: dict[str, Any]) -> dict[str, str]:
    """The owner reference a PodGroup made for `obj` carries (no `controller` flag)."""
    meta = obj["metadata"]
    return {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "name": meta["name"], "uid": meta["uid"]}


def container(name: str, gpus: int = 0, **extra: Any) -> dict[str, Any]:
    """A small busybox container (`extra` adds or replaces fields), asking for `gpus` whole GPUs."""
    limits = {"cpu": "100m", "memory": "100Mi", **({"nvidia.com/gpu": str(gpus)} if gpus else {})}
    resources = {"requests": {"cpu": "100m", "memory": "100Mi"}, "limits": limits}
    return {"name": name, "image": "busybox", "resources": resources, **extra}
