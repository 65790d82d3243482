"""The podgrouper's settings, with the defaults of KAI's podgrouper binary.

These are the flags that change grouping results (spec/integrations.md §1,
conformance FORMAT.md "config"); anything about watching or writing belongs
to the controller that runs the grouper, not here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kai_ray.api.constants import NODE_POOL_LABEL, QUEUE_LABEL

__all__ = ["ConfigMapRef", "GroupingConfig", "GroupingConfigError"]


class GroupingConfigError(ValueError):
    """A grouping configuration that names an unknown setting or has a value of the wrong type."""


@dataclass(frozen=True)
class ConfigMapRef:
    name: str
    namespace: str


@dataclass(frozen=True)
class GroupingConfig:
    queue_label_key: str = QUEUE_LABEL
    node_pool_label_key: str = NODE_POOL_LABEL
    defaults_config_map: ConfigMapRef | None = None
    """The defaults-per-workload-type ConfigMap; KAI reads it only when both name and namespace are set."""
    search_for_legacy_pod_groups: bool = True
    """Reuse PodGroups named the pre-0.10 way (batch Job, RunaiJob) so running pods are not re-grouped."""
    gang_schedule_knative: bool = True
    """One PodGroup per Knative Revision (min-scale gang) instead of one per pod."""
    karta_fallback: bool = True
    """Let a `Karta` object describe a workload type no built-in plugin knows."""

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> GroupingConfig:
        """Read the conformance format's camelCase `config` block; absent keys keep KAI's defaults."""
        unknown = set(data) - set(_KEYS)
        if unknown:
            raise GroupingConfigError(f"unknown grouping setting(s): {', '.join(sorted(unknown))}")
        values: dict[str, Any] = {}
        for key, (attribute, kind) in _KEYS.items():
            if key not in data:
                continue
            value = data[key]
            if key == "defaultsConfigMap":
                value = _config_map_ref(value)
            elif not isinstance(value, kind):
                raise GroupingConfigError(f"{key}: expected {kind.__name__}, got {value!r}")
            values[attribute] = value
        return cls(**values)


_KEYS: dict[str, tuple[str, type]] = {
    "queueLabelKey": ("queue_label_key", str),
    "nodePoolLabelKey": ("node_pool_label_key", str),
    "defaultsConfigMap": ("defaults_config_map", dict),
    "searchForLegacyPodGroups": ("search_for_legacy_pod_groups", bool),
    "gangScheduleKnative": ("gang_schedule_knative", bool),
    "kartaFallback": ("karta_fallback", bool),
}


def _config_map_ref(value: Any) -> ConfigMapRef | None:
    """`{name, namespace}`; an empty name or namespace means "not configured", as in KAI."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise GroupingConfigError(f"defaultsConfigMap: expected {{name, namespace}}, got {value!r}")
    name, namespace = value.get("name") or "", value.get("namespace") or ""
    if not isinstance(name, str) or not isinstance(namespace, str):
        raise GroupingConfigError(f"defaultsConfigMap: name and namespace must be strings, got {value!r}")
    return ConfigMapRef(name, namespace) if name and namespace else None
