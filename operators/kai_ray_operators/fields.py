"""Reading plain-dict Kubernetes objects the way Go's `unstructured` helpers do.

Workloads are arbitrary CRDs, so the grouper sees them as nested dicts. A
missing field is normal (it has a default); a field of the wrong type is bad
input and becomes an `InvalidWorkload` naming the object and the field path,
never a `KeyError` or `TypeError`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kai_ray_operators.errors import InvalidWorkload

__all__ = [
    "GroupVersionKind",
    "KubeObject",
    "Step",
    "annotations_of",
    "bool_field",
    "describe",
    "field",
    "field_path",
    "has_field",
    "int_field",
    "labels_of",
    "list_field",
    "map_field",
    "name",
    "namespace",
    "parse_int",
    "str_field",
    "uid",
]

KubeObject = Mapping[str, Any]
"""A Kubernetes object as the API server returns it (apiVersion, kind, metadata, spec, status)."""


@dataclass(frozen=True, order=True)
class GroupVersionKind:
    """An object's type; the core group is the empty string, as in Kubernetes."""

    group: str
    version: str
    kind: str

    @classmethod
    def of(cls, obj: KubeObject) -> GroupVersionKind:
        api_version = str(obj.get("apiVersion") or "")
        group, _, version = api_version.rpartition("/")
        return cls(group, version, str(obj.get("kind") or ""))

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def group_kind(self) -> str:
        """`Kind.group`, or `Kind` for the core group: the key of KAI's defaults ConfigMap."""
        return f"{self.kind}.{self.group}" if self.group else self.kind

    def __str__(self) -> str:
        return f"{self.api_version} {self.kind}"


def _metadata(obj: KubeObject) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _string_map(obj: KubeObject, key: str) -> dict[str, str]:
    value = _metadata(obj).get(key)
    if not isinstance(value, Mapping):
        return {}
    return {str(k): "" if v is None else str(v) for k, v in value.items()}


def labels_of(obj: KubeObject) -> dict[str, str]:
    """A copy of the object's labels (empty when it has none)."""
    return _string_map(obj, "labels")


def annotations_of(obj: KubeObject) -> dict[str, str]:
    """A copy of the object's annotations (empty when it has none)."""
    return _string_map(obj, "annotations")


def name(obj: KubeObject) -> str:
    return str(_metadata(obj).get("name") or "")


def namespace(obj: KubeObject) -> str:
    return str(_metadata(obj).get("namespace") or "")


def uid(obj: KubeObject) -> str:
    return str(_metadata(obj).get("uid") or "")


def describe(obj: KubeObject) -> str:
    """`Kind namespace/name`, the subject of error messages."""
    kind = str(obj.get("kind") or "object")
    where = f"{namespace(obj)}/{name(obj)}" if namespace(obj) else name(obj)
    return f"{kind} {where or '<unnamed>'}"


Step = str | int
"""A map key, or an index into a list."""


def field(obj: Any, *path: Step) -> Any:
    """The value at `path`, or None when any step is missing or of the wrong shape."""
    current = obj
    for step in path:
        if isinstance(step, int):
            if not isinstance(current, list) or not 0 <= step < len(current):
                return None
        elif not isinstance(current, Mapping) or step not in current:
            return None
        current = current[step]
    return current


def has_field(obj: Any, *path: Step) -> bool:
    """True when `path` exists, even with a null or empty value (Go's `found`)."""
    parent = field(obj, *path[:-1])
    return isinstance(parent, Mapping) and path[-1] in parent


def field_path(path: tuple[Step, ...]) -> str:
    """`spec.workerGroupSpecs[1].replicas`: a path as error messages show it."""
    text = ""
    for step in path:
        text += f"[{step}]" if isinstance(step, int) else (f".{step}" if text else step)
    return text


def _typed(obj: KubeObject, path: tuple[Step, ...], kind: type, what: str) -> Any:
    value = field(obj, *path)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, kind):
        raise InvalidWorkload(describe(obj), f"expected {what}, got {value!r}", field_path(path))
    return value


def int_field(obj: KubeObject, *path: Step) -> int | None:
    value: int | None = _typed(obj, path, int, "an integer")
    return value


def str_field(obj: KubeObject, *path: Step) -> str | None:
    value: str | None = _typed(obj, path, str, "a string")
    return value


def map_field(obj: KubeObject, *path: Step) -> Mapping[str, Any] | None:
    value: Mapping[str, Any] | None = _typed(obj, path, Mapping, "an object")
    return value


def list_field(obj: KubeObject, *path: Step) -> list[Any] | None:
    value: list[Any] | None = _typed(obj, path, list, "a list")
    return value


def bool_field(obj: KubeObject, *path: Step) -> bool | None:
    value = field(obj, *path)
    if value is None or isinstance(value, bool):
        return value
    raise InvalidWorkload(describe(obj), f"expected true or false, got {value!r}", field_path(path))


_DECIMAL = re.compile(r"[+-]?[0-9]+")


def parse_int(text: str) -> int | None:
    """A decimal integer as Go's `strconv.Atoi` reads it (no spaces, no `_`), else None."""
    return int(text) if _DECIMAL.fullmatch(text) else None
