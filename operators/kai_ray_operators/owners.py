"""Owner-chain resolution: from a pod to its top owner (spec/integrations.md §1.2).

Only the pod's first owner reference is followed, each owner read in the
pod's namespace. An owner with two owners is ambiguous and an error; one
whose uid differs from the reference was replaced and is an error; a 403
stops the walk at the last owner read (or the pod itself), because a grouper
without access to a wrapper kind should still group by what it can see.
A chain that comes back to an owner already visited is an error, not a hang.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kai_ray_operators.errors import Forbidden, OwnerChainError, ReadError
from kai_ray_operators.fields import GroupVersionKind, KubeObject, describe, field, namespace, uid
from kai_ray_operators.reader import ObjectReader

__all__ = ["OwnerChain", "as_pod", "resolve_owners"]


@dataclass(frozen=True)
class OwnerChain:
    top_owner: KubeObject
    """The object the plugin is chosen by: the last owner read, or the pod when it has none."""
    owners: tuple[KubeObject, ...]
    """Every owner read, nearest first; empty for a pod without owners."""
    forbidden: str | None = None
    """The owner the walk was not allowed to read ("RayJob rj"), when a 403 ended it early."""


def as_pod(pod: KubeObject) -> KubeObject:
    """The pod with its type filled in: objects from a list response carry no apiVersion or kind."""
    return {**pod, "apiVersion": pod.get("apiVersion") or "v1", "kind": pod.get("kind") or "Pod"}


def _reference(owner: KubeObject, index: int = 0) -> Mapping[str, Any]:
    """The `index`th owner reference, checked to name a type and an object."""
    ref = field(owner, "metadata", "ownerReferences", index)
    if not isinstance(ref, Mapping) or not all(
        isinstance(ref.get(key), str) for key in ("apiVersion", "kind", "name")
    ):
        raise OwnerChainError(
            describe(owner),
            f"owner reference {ref!r} lacks apiVersion, kind or name",
            "metadata.ownerReferences",
        )
    return ref


def resolve_owners(reader: ObjectReader, pod: KubeObject) -> OwnerChain:
    pod = as_pod(pod)
    if not field(pod, "metadata", "ownerReferences"):
        return OwnerChain(pod, ())
    ref, child = _reference(pod), pod
    owners: list[KubeObject] = []
    seen: set[tuple[str, str, str]] = set()
    while True:
        gvk = GroupVersionKind.of(ref)
        key = (gvk.group, gvk.kind, str(ref["name"]))
        if key in seen:
            raise OwnerChainError(describe(pod), f"owner references form a cycle at {gvk.kind} {ref['name']}")
        seen.add(key)
        try:
            owner = reader.get(str(ref["apiVersion"]), gvk.kind, namespace(pod), str(ref["name"]))
        except Forbidden:
            return OwnerChain(owners[-1] if owners else pod, tuple(owners), f"{gvk.kind} {ref['name']}")
        except ReadError as error:
            raise OwnerChainError(
                describe(child), f"cannot read its owner {gvk.kind} {ref['name']}: {error.problem}"
            ) from error
        if uid(owner) != str(ref.get("uid") or ""):
            raise OwnerChainError(
                describe(child),
                f"its owner {gvk.kind} {ref['name']} was replaced "
                f"(uid {uid(owner)!r}, not {ref.get('uid')!r})",
            )
        owners.append(owner)
        references = field(owner, "metadata", "ownerReferences") or []
        if not isinstance(references, list) or len(references) > 1:
            raise OwnerChainError(describe(owner), "has more than one owner", "metadata.ownerReferences")
        if not references:
            return OwnerChain(owner, tuple(owners))
        ref, child = _reference(owner), owner
