"""What the service layer needs from a cluster, so one set of operations serves every backend.

The embedded simulated cluster (`sim_backend`) implements it today; the Kubernetes backend will
implement it over the informer cache and the API server.  The service never mutates an object it
reads: backends replace an object when it changes, so a `BackendView` is a consistent picture that
can be read without holding any lock.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from kai_ray.api import ApiObject, ManifestProblem, SourcedObject
from kai_ray.api.config import SchedulerConfig
from kai_ray.engine.plan import Plan
from kai_ray.engine.session import Session
from kai_ray.model.objects import ClusterState

__all__ = [
    "Backend",
    "BackendView",
    "CycleRecord",
    "Grouper",
    "NamespacedName",
    "ObjectKey",
    "PreparedObjects",
    "object_key",
]

ObjectKey = tuple[str, str, str]
"""(kind, namespace, name); namespace "" for cluster-scoped kinds."""


def object_key(obj: ApiObject) -> ObjectKey:
    return obj.kind, obj.metadata.namespace or "", obj.metadata.name


@dataclass(frozen=True)
class CycleRecord:
    """One scheduling cycle as the service reads it afterwards (status, explain, queues).

    `session` is the engine's end state: Explain and ListQueues read its queue accounting and node
    table instead of compiling a new snapshot, which keeps them cheap.
    """

    number: int
    at: float
    state: ClusterState
    session: Session
    plan: Plan
    problems: list[ManifestProblem] = field(default_factory=list)


NamespacedName = tuple[str, str]


@dataclass(frozen=True)
class BackendView:
    """The current objects by kind, and the last cycle (None before the first).

    `generation` grows with every change, so a reader can tell whether anything moved.  A
    view's tables never change once handed out (backends copy on write or build new ones), so
    a reader may remember what it computed from a table for as long as it gets that very table.
    """

    generation: int
    kinds: Mapping[str, Mapping[NamespacedName, ApiObject]]
    last_cycle: CycleRecord | None
    now: float

    def get(self, kind: str, namespace: str, name: str) -> ApiObject | None:
        return self.kinds.get(kind, {}).get((namespace, name))

    def all(self, kind: str) -> Mapping[NamespacedName, ApiObject]:
        return self.kinds.get(kind, {})

    def objects(self) -> list[ApiObject]:
        return [obj for by_name in self.kinds.values() for obj in by_name.values()]


Listener = Callable[[CycleRecord | None], None]
"""Called after every change: with the cycle that caused it, or None for a create or delete."""


class Backend(Protocol):
    """A cluster the API operates on."""

    @property
    def config(self) -> SchedulerConfig: ...

    def view(self) -> BackendView: ...

    def create(self, objects: Sequence[ApiObject]) -> None:
        """Create every object or none; ServiceError ALREADY_EXISTS when one exists already."""

    def delete(self, keys: Sequence[ObjectKey]) -> None:
        """Delete the objects that exist; missing ones are ignored (deletion is idempotent)."""

    def subscribe(self, listener: Listener) -> None: ...

    def now(self) -> float: ...


class PreparedObjects(Protocol):
    """What the podgrouper's in-memory pass returns (`kai_ray_operators.manifests.PreparedManifests`)."""

    @property
    def documents(self) -> list[SourcedObject]: ...

    @property
    def problems(self) -> list[ManifestProblem]: ...

    @property
    def made_for(self) -> dict[tuple[str, str], tuple[str, str, str]]: ...


Grouper = Callable[[Sequence[SourcedObject]], PreparedObjects]
"""Expands workloads (RayJob, PyTorchJob, Job...) into pods and groups them into PodGroups.

Injected (`kai_ray_operators.manifests.prepare_manifests`) because `kai_ray` never imports the
operators package; without one, only bare pods and PodGroups are accepted as manifests.
"""
