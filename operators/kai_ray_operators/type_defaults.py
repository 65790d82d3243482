"""KAI's defaults-per-workload-type ConfigMap: a priority class and preemptibility per kind.

An administrator can say "Deployments are `inference` and non-preemptible"
without touching workloads (spec/kubernetes-api.md §8). The ConfigMap's key
`types` holds a JSON list of `{typeName, group, priorityName, preemptibility}`;
entries are looked up by `Kind.group`, then by bare `Kind`, and the later of
two entries with the same key wins. KAI treats a missing or unreadable
ConfigMap as "no defaults" (and logs it); so do we: a bad ConfigMap must not
stop every pod of the cluster from being grouped.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass

from kai_ray_operators.config import ConfigMapRef
from kai_ray_operators.errors import ReadError
from kai_ray_operators.fields import GroupVersionKind, field
from kai_ray_operators.reader import ObjectReader

__all__ = ["TypeDefault", "TypeDefaults", "load_type_defaults"]

log = logging.getLogger(__name__)

TYPES_KEY = "types"


@dataclass(frozen=True)
class TypeDefault:
    priority_class_name: str = ""
    preemptibility: str = ""


class TypeDefaults:
    """The parsed ConfigMap, keyed like Go's `GroupKind.String()`."""

    def __init__(self, entries: Mapping[str, TypeDefault] | None = None) -> None:
        self._entries = dict(entries or {})

    def for_type(self, gvk: GroupVersionKind) -> TypeDefault | None:
        """The entry for `Kind.group`, else for `Kind`; a type without a kind has none."""
        if not gvk.kind:
            return None
        return self._entries.get(gvk.group_kind) or self._entries.get(gvk.kind)


def load_type_defaults(reader: ObjectReader, ref: ConfigMapRef | None) -> TypeDefaults:
    """Read and parse the ConfigMap; an unset, missing or malformed one gives no defaults."""
    if ref is None:
        return TypeDefaults()
    try:
        config_map = reader.get("v1", "ConfigMap", ref.namespace, ref.name)
    except ReadError as error:
        log.warning("defaults ConfigMap %s/%s: %s", ref.namespace, ref.name, error)
        return TypeDefaults()
    text = field(config_map, "data", TYPES_KEY)
    try:
        entries = json.loads(text) if isinstance(text, str) else None
    except ValueError as error:
        log.warning("defaults ConfigMap %s/%s: %s is not JSON: %s", ref.namespace, ref.name, TYPES_KEY, error)
        return TypeDefaults()
    if not isinstance(entries, list):
        log.warning("defaults ConfigMap %s/%s: %s must be a JSON list", ref.namespace, ref.name, TYPES_KEY)
        return TypeDefaults()
    parsed: dict[str, TypeDefault] = {}
    for entry in entries:
        if not isinstance(entry, Mapping):
            continue
        kind, group = str(entry.get("typeName") or ""), str(entry.get("group") or "")
        key = GroupVersionKind(group, "", kind).group_kind
        parsed[key] = TypeDefault(
            str(entry.get("priorityName") or ""), str(entry.get("preemptibility") or "")
        )
    return TypeDefaults(parsed)
