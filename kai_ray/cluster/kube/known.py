"""What the steps after planning need of pods, PodGroups and queues, kept from the cache's changes.

The applier needs pod uids, the status writer each PodGroup's stored conditions (to skip
unchanged ones without a GET) and its pods' uids (so pod Events show in `kubectl describe`),
metrics the queues' display names, and the memory pruning which objects still exist.  Each is
derived once per object version (`DerivedTable`), so none of them reads the whole cache per cycle.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterator, Mapping
from typing import Any

from kai_ray.api.constants import DEFAULT_NAMESPACE
from kai_ray.cluster.kube.cache import ClusterCache
from kai_ray.cluster.kube.derived import DerivedTable
from kai_ray.cluster.kube.status import PodGroupRef

__all__ = ["KnownObjects"]

Key = tuple[str, str]


def _uid(pod: Mapping[str, Any]) -> str:
    return str((pod.get("metadata") or {}).get("uid") or "")


def _display_name(queue: Mapping[str, Any]) -> str:
    return str((queue.get("spec") or {}).get("displayName") or "")


class _NamespacePods(Mapping[str, str]):
    """Pod name → uid of one namespace, read live from the table (never stale, never copied)."""

    def __init__(self, by_namespace: dict[str, dict[str, str]], namespace: str) -> None:
        self._by_namespace = by_namespace
        self._namespace = namespace

    def __getitem__(self, name: str) -> str:
        return self._by_namespace.get(self._namespace, {})[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._by_namespace.get(self._namespace, {}))

    def __len__(self) -> int:
        return len(self._by_namespace.get(self._namespace, {}))


class KnownObjects:
    """Pods, PodGroups and Queues as the loop's writers need them.  One reader (the loop).

    Also answers, for `EventWriter.forget`, whether a (kind, namespace, name) Event target still
    exists.
    """

    def __init__(self, node_pool_label: str) -> None:
        self._pods = DerivedTable("Pod", _uid)
        self._podgroups = DerivedTable(
            "PodGroup", functools.partial(PodGroupRef.from_object, node_pool_label=node_pool_label)
        )
        self._queues = DerivedTable("Queue", _display_name)
        self._by_namespace: dict[str, dict[str, str]] = {}
        self._refs: dict[str, PodGroupRef] = {}

    def refresh(self, cache: ClusterCache) -> KnownObjects:
        uids = self._pods.refresh(cache)
        for namespace, name in self._pods.changed:
            members = self._by_namespace.setdefault(namespace, {})
            uid = uids.get((namespace, name))
            if uid is None:
                members.pop(name, None)
                if not members:
                    del self._by_namespace[namespace]
            else:
                members[name] = uid
        groups = self._podgroups.refresh(cache)
        for namespace, name in self._podgroups.changed:
            base = groups.get((namespace, name))
            key = f"{namespace or DEFAULT_NAMESPACE}/{name}"
            if base is None:
                self._refs.pop(key, None)
            else:
                pods = _NamespacePods(self._by_namespace, base.namespace)
                self._refs[f"{base.namespace}/{base.name}"] = dataclasses.replace(base, pod_uids=pods)
        self._queues.refresh(cache)
        return self

    @property
    def pod_uids(self) -> Mapping[Key, str]:
        """(namespace, pod) → uid of every pod of this scheduler."""
        return self._pods.values

    def podgroup_refs(self) -> Mapping[str, PodGroupRef]:
        """Job key ("namespace/name") → what the status writer needs to know of the PodGroup."""
        return self._refs

    @property
    def podgroups(self) -> Mapping[Key, PodGroupRef]:
        return self._podgroups.values

    def queue_names(self) -> set[str]:
        return {name for _, name in self._queues.values}

    @property
    def display_names(self) -> dict[str, str]:
        """Queue name → its display name, for queues that have one."""
        return {name: display for (_, name), display in self._queues.values.items() if display}

    def __contains__(self, target: object) -> bool:
        if not isinstance(target, tuple) or len(target) != 3:
            return False
        kind, namespace, name = target
        if kind == "Pod":
            return (namespace, name) in self._pods.values
        if kind == "PodGroup":
            return (namespace, name) in self._podgroups.values
        if kind == "Queue":  # cluster-scoped: their Events go to the default namespace
            return namespace == DEFAULT_NAMESPACE and ("", name) in self._queues.values
        return False
