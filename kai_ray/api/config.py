"""Scheduler configuration: which actions and plugins run, with their arguments.

Mirrors KAI's scheduler config (spec §19) closely enough that a KAI config's
knobs map one to one, while staying a typed pydantic model so a bad value is
rejected with the field named.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from kai_ray.api.usage_db import UsageDBConfig

ActionName = Literal["allocate", "consolidation", "reclaim", "preempt", "stalegangeviction"]
PlacementStrategy = Literal["binpack", "spread"]

DEFAULT_ACTIONS: tuple[ActionName, ...] = (
    "allocate",
    "consolidation",
    "reclaim",
    "preempt",
    "stalegangeviction",
)

DEFAULT_PLUGINS: tuple[str, ...] = (
    "predicates",
    "proportion",
    "priority",
    "elastic",
    "kubeflow",
    "ray",
    "nodeavailability",
    "gpusharingorder",
    "gpupack",
    "resourcetype",
    "subgrouporder",
    "taskorder",
    "nominatednode",
    "dynamicresources",
    "nodeplacement",
    "minruntime",
    "topology",
    "snapshot",
    "sg-nodelocalgreedy",
    "sg-multinodegang",
)

KNOWN_PLUGINS: frozenset[str] = frozenset(
    {
        *DEFAULT_PLUGINS,
        "gpuspread",
        "podaffinity",
    }
)
"""Every plugin name the engine accepts; a config naming any other plugin has it skipped.

Listed here rather than read from the engine's plugin registry because this
package imports nothing else of kai-ray; a unit test keeps the two in step.
"""


class PluginSpec(BaseModel):
    """One enabled plugin; arguments are strings, as in KAI's config file."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    arguments: dict[str, str] = Field(default_factory=dict)


class SchedulerConfig(BaseModel):
    """Everything a session needs to know besides the cluster itself."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    actions: tuple[ActionName, ...] = DEFAULT_ACTIONS
    plugins: tuple[PluginSpec, ...] = tuple(PluginSpec(name=n) for n in DEFAULT_PLUGINS)
    default_staleness_grace_seconds: float = 60.0
    max_consolidation_preemptees: int = 16
    allow_consolidating_reclaim: bool = True
    """KAI's --allow-consolidating-reclaim: victims the simulation re-placed do not count as reclaimed."""
    k_value: float = 1.0
    usage_db: UsageDBConfig | None = None
    """KAI's usageDBConfig: time-based fair share is on when set (spec §7)."""
    search_budget_scenarios: int = 2000

    def has_plugin(self, name: str) -> bool:
        return any(p.name == name for p in self.plugins)

    def plugin_arguments(self, name: str) -> dict[str, str]:
        for plugin in self.plugins:
            if plugin.name == name:
                return plugin.arguments
        return {}
