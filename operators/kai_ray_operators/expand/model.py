"""The records of an expansion, and what every workload expander is given and returns.

An expander is a function `(context, workload) -> Expanded`: the objects the
workload's controller creates directly (a Deployment's ReplicaSet, not its
pods) and, for RayJob and RayService, the workload with the status the
controller fills in. The engine expands each child in turn, so an expander
only knows its own controller.

A child copies parts of its parent (a ReplicaSet's `spec.template` is the
Deployment's), so a bad field is often only read while expanding the child.
`Child.sources` says where the child's fields came from, and the engine uses
it to name the field the user wrote (`spec.jobTemplate.spec.parallelism`,
not the generated Job's `spec.parallelism`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from kai_ray_operators.expand.objects import ObjectKey, object_key
from kai_ray_operators.fields import KubeObject, describe
from kai_ray_operators.reader import InMemoryReader

__all__ = [
    "Child",
    "Expanded",
    "Expander",
    "Expansion",
    "ExpansionContext",
    "ExpansionError",
    "ExpansionProblem",
    "Source",
]


@dataclass(frozen=True)
class ExpansionProblem:
    """Why a workload created nothing: the input object at fault and the field, as the user wrote them."""

    kind: str
    namespace: str
    name: str
    field: str
    """The field path (`spec.workerGroupSpecs[0].replicas`), or "" when no single field is at fault."""
    message: str

    def __str__(self) -> str:
        subject = (
            f"{self.kind} {self.namespace}/{self.name}" if self.namespace else f"{self.kind} {self.name}"
        )
        return f"{subject}: {self.field}: {self.message}" if self.field else f"{subject}: {self.message}"


@dataclass
class Expansion:
    children: list[dict[str, Any]] = field(default_factory=list)
    """Every object the controllers create, intermediates and pods, parents before their children."""
    updated: list[dict[str, Any]] = field(default_factory=list)
    """Copies of input workloads with the status a controller fills in; they replace the originals."""
    problems: list[ExpansionProblem] = field(default_factory=list)
    consumed: set[tuple[str, str, str, str]] = field(default_factory=set)
    """(API group, kind, namespace, name) of every input object the expansion recognised (workloads,
    expanded or not, and the Trainer runtimes they read), which the caller's loader need not read."""


@dataclass(frozen=True)
class Source:
    """Where a part of a child came from: `path` of `obj` (the parent, unless the controller copied it
    from another object, as the Trainer copies a runtime's JobSet template)."""

    path: str
    obj: KubeObject | None = None


@dataclass(frozen=True)
class Child:
    obj: dict[str, Any]
    sources: Mapping[str, Source] = field(default_factory=dict)
    """A field path prefix of the child -> where its value came from."""


@dataclass(frozen=True)
class Expanded:
    children: list[Child] = field(default_factory=list)
    status: dict[str, Any] | None = None
    """A copy of the workload with its status filled in, when the controller writes one we need."""


class ExpansionError(Exception):
    """A field of `obj` the expansion cannot use: it becomes one `ExpansionProblem`."""

    def __init__(self, obj: KubeObject, field: str | None, message: str) -> None:
        self.obj = obj
        self.field = field
        self.message = message
        super().__init__(f"{describe(obj)}: {field}: {message}" if field else f"{describe(obj)}: {message}")


@dataclass(frozen=True)
class ExpansionContext:
    scheduler_name: str
    """The scheduler KubeRay's KAI integration writes into the pods it makes."""
    inputs: InMemoryReader
    """Every input object, for what a controller reads besides its workload (a Trainer runtime)."""
    owned_inputs: Mapping[ObjectKey, tuple[KubeObject, ...]]
    """(group, kind, namespace, name) of an owner -> the input objects whose owner references name it."""

    def owned(self, owner: KubeObject) -> tuple[KubeObject, ...]:
        """The input objects `owner` already has: a controller does not create them again."""
        return self.owned_inputs.get(object_key(owner), ())


Expander: TypeAlias = Callable[[ExpansionContext, KubeObject], Expanded]
