"""What every grouping plugin is given: the reader, the settings, and how to find another plugin.

A plugin is a function `(context, top_owner, pod, all_owners) -> metadata or
None`, KAI's `GetPodGroupMetadata`. `all_owners` runs from the pod's nearest
owner to the top owner; it is empty when the caller has no chain (a bare pod,
or a direct call), and the default grouper then uses `[top_owner]`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeAlias

from kai_ray.api.constants import PODGROUP_API_VERSION, PRIORITYCLASS_API_VERSION
from kai_ray_operators.config import GroupingConfig
from kai_ray_operators.errors import NotFound, ReadError
from kai_ray_operators.fields import GroupVersionKind, KubeObject
from kai_ray_operators.metadata import PodGroupMetadata
from kai_ray_operators.reader import ObjectReader
from kai_ray_operators.type_defaults import TypeDefaults, load_type_defaults

__all__ = ["Grouper", "GroupingContext"]


@dataclass(frozen=True)
class GroupingContext:
    reader: ObjectReader
    config: GroupingConfig
    exact_grouper: Callable[[GroupVersionKind], Grouper]
    """The plugin registered for exactly this type, else the default grouper: no version
    wildcard, no Karta. Skip-top-owner dispatches the owner below the skipped one with it."""

    def priority_class_exists(self, name: str) -> bool:
        """KAI only accepts a label-given priority class that exists; any read failure counts as absent."""
        if not name:
            return False
        try:
            self.reader.get(PRIORITYCLASS_API_VERSION, "PriorityClass", "", name)
        except ReadError:
            return False
        return True

    def existing_pod_group(self, namespace: str, name: str) -> KubeObject | None:
        """The PodGroup if it exists; plugins keep the shape of PodGroups made by older versions."""
        try:
            return self.reader.get(PODGROUP_API_VERSION, "PodGroup", namespace, name)
        except NotFound:
            return None

    def type_defaults(self) -> TypeDefaults:
        return load_type_defaults(self.reader, self.config.defaults_config_map)


Grouper: TypeAlias = Callable[
    [GroupingContext, KubeObject, KubeObject, Sequence[KubeObject]], PodGroupMetadata | None
]
"""`(context, top_owner, pod, all_owners)`: the PodGroup of `pod`, or None for "leave it ungrouped"."""
