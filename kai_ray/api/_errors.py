"""Turn pydantic validation errors into one-line `field: message` pairs a user can act on.

Pydantic's raw messages name Python internals ("Extra inputs are not
permitted"); users of KAI manifests think in field paths and typos, so this
module names the path kubectl-style and suggests the field they probably meant.
"""

from __future__ import annotations

import difflib
import types
from collections.abc import Iterable, Sequence
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from kai_ray.api._base import ERROR_PREFIX

_MAX_SHOWN = 60


def format_path(loc: Sequence[str | int]) -> str:
    """`('spec', 'containers', 0, 'resources')` → `spec.containers[0].resources`.

    Keys that contain dots or slashes (labels, resource names) are bracketed
    so the path stays unambiguous.
    """
    path = ""
    for part in loc:
        if isinstance(part, int) or "." in part or "/" in part:
            path += f"[{part}]"
        else:
            path += f".{part}" if path else part
    return path


def suggest(word: str, options: Iterable[str]) -> str:
    """A " (did you mean 'x'?)" hint, or nothing when no option is close."""
    close = difflib.get_close_matches(word, list(options), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def describe_errors(error: ValidationError, model: type[BaseModel]) -> list[tuple[str, str]]:
    """Every error of one validation as `(field path, message)`."""
    return [(format_path(detail["loc"]), _message(detail, model)) for detail in error.errors()]


def _message(detail: ErrorDetails, model: type[BaseModel]) -> str:
    kind = detail["type"]
    if kind == "missing":
        return "required field is missing"
    if kind == "extra_forbidden":
        known = _field_names(model, detail["loc"][:-1])
        return "unknown field" + suggest(str(detail["loc"][-1]), known)
    if kind.startswith(ERROR_PREFIX):
        return detail["msg"]
    text = detail["msg"]
    return f"{text[:1].lower()}{text[1:]}, got {_shown(detail['input'])}"


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= _MAX_SHOWN else text[: _MAX_SHOWN - 3] + "..."


def _field_names(model: type[BaseModel], loc: Sequence[str | int]) -> list[str]:
    """Wire names of the model found by walking `loc` down from `model` (empty if lost)."""
    current: type[BaseModel] | None = model
    for part in loc:
        if current is None:
            return []
        if isinstance(part, str):
            current = _nested_model(_wire_fields(current).get(part))
    return list(_wire_fields(current)) if current else []


def _wire_fields(model: type[BaseModel]) -> dict[str, Any]:
    return {info.alias or name: info.annotation for name, info in model.model_fields.items()}


def _nested_model(annotation: Any) -> type[BaseModel] | None:
    """The model inside `X`, `X | None`, `list[X]` (first one found)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if get_origin(annotation) in (Union, types.UnionType, list):
        for arg in get_args(annotation):
            found = _nested_model(arg)
            if found is not None:
                return found
    return None
