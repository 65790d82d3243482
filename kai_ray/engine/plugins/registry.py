"""Plugins by name, as a scheduler config names them.

Names KAI knows but whose behaviour kai-ray does not model yet (for
example `dynamicresources`) map to the no-op base plugin, so a KAI config
loads unchanged; truly unknown names are reported and skipped, like KAI.
"""

from __future__ import annotations

from kai_ray.engine.plugins.base import Plugin
from kai_ray.engine.plugins.ordering import (
    ElasticPlugin,
    KubeflowPlugin,
    PriorityPlugin,
    RayPlugin,
    SubGroupOrderPlugin,
    TaskOrderPlugin,
)
from kai_ray.engine.plugins.predicates import PredicatesPlugin
from kai_ray.engine.plugins.proportion import ProportionPlugin
from kai_ray.engine.plugins.scoring import (
    GpuPackPlugin,
    GpuSharingOrderPlugin,
    GpuSpreadPlugin,
    NodeAvailabilityPlugin,
    NodePlacementPlugin,
    ResourceTypePlugin,
)
from kai_ray.engine.plugins.topology import TopologyPlugin

PLUGINS: dict[str, type[Plugin]] = {
    plugin.name: plugin
    for plugin in (
        PredicatesPlugin,
        ProportionPlugin,
        PriorityPlugin,
        ElasticPlugin,
        KubeflowPlugin,
        RayPlugin,
        TaskOrderPlugin,
        SubGroupOrderPlugin,
        NodeAvailabilityPlugin,
        GpuSharingOrderPlugin,
        ResourceTypePlugin,
        NodePlacementPlugin,
        GpuPackPlugin,
        GpuSpreadPlugin,
        TopologyPlugin,
    )
}

ACCEPTED_WITHOUT_BEHAVIOUR = frozenset(
    {
        "nominatednode",
        "dynamicresources",
        "minruntime",
        "snapshot",
        "sg-nodelocalgreedy",
        "sg-multinodegang",
        "podaffinity",
    }
)


def plugin_class(name: str) -> type[Plugin] | None:
    if name in PLUGINS:
        return PLUGINS[name]
    if name in ACCEPTED_WITHOUT_BEHAVIOUR:
        return Plugin
    return None


def register(plugin: type[Plugin]) -> None:
    """Add or replace a plugin implementation (how a deployment swaps one in)."""
    PLUGINS[plugin.name] = plugin
