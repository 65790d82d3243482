"""How a grouper reads the cluster: GET one object, LIST by labels, nothing else.

Grouping is a pure function of the objects it may read, so the reader is the
only seam to the outside: `serve` passes one over its informer cache, the CLI
and the tests one over a list of manifests (`InMemoryReader`). Failures are
typed (`NotFound`, `Forbidden`) because owner resolution treats a 403 as "stop
here" and a 404 as an error.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Protocol

from kai_ray_operators import fields
from kai_ray_operators.errors import NotFound
from kai_ray_operators.fields import GroupVersionKind, KubeObject

__all__ = ["InMemoryReader", "ObjectReader"]


class ObjectReader(Protocol):
    """Read access to the cluster; an empty namespace means a cluster-scoped object."""

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> KubeObject:
        """The object, or `NotFound` / `Forbidden`."""
        ...

    def list(
        self, api_version: str, kind: str, namespace: str | None, selector: Mapping[str, str]
    ) -> list[KubeObject]:
        """Objects of that type whose labels include `selector`; `namespace` None means all namespaces."""
        ...


class InMemoryReader:
    """A reader over a fixed list of objects, as an API server would serve them.

    Objects match by API group and kind, not version: the API server serves one
    object under every version of its group, and workloads name their
    children's versions loosely (a RayJob of `ray.io/v1` reads its RayCluster
    as `ray.io/v1`, whatever version created it).
    """

    def __init__(self, objects: Iterable[KubeObject]) -> None:
        self._objects = [obj for obj in objects if isinstance(obj, Mapping)]

    def _of_type(self, api_version: str, kind: str) -> list[KubeObject]:
        group = GroupVersionKind.of({"apiVersion": api_version, "kind": kind}).group
        return [
            obj
            for obj in self._objects
            if (gvk := GroupVersionKind.of(obj)).group == group and gvk.kind == kind
        ]

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> KubeObject:
        for obj in self._of_type(api_version, kind):
            if fields.namespace(obj) == namespace and fields.name(obj) == name:
                return obj
        raise NotFound(f"{kind} {namespace}/{name}" if namespace else f"{kind} {name}", "not found")

    def list(
        self, api_version: str, kind: str, namespace: str | None, selector: Mapping[str, str]
    ) -> list[KubeObject]:
        return [
            obj
            for obj in self._of_type(api_version, kind)
            if (namespace is None or fields.namespace(obj) == namespace)
            and all(fields.labels_of(obj).get(key) == value for key, value in selector.items())
        ]
