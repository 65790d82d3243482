"""kai-ray's workload adapters: how pods of each workload kind become PodGroups, as KAI's podgrouper does.

The core (`kai_ray`) never imports this package; the CLI and the server wire
it in. Everything here is pure over plain-dict Kubernetes objects and an
`ObjectReader` (spec/integrations.md §1-§9):

- `group_pod` / `plan_pod`: a pod (and what it may read) to its PodGroup metadata,
  and to what the podgrouper writes;
- `build_pod_group` / `merge_pod_group` / `pod_patch`: that metadata on the wire;
- `plugin_id`, `PLUGINS`, `HUB_TABLE`: which plugin groups which workload type;
- `GroupingError` and its subclasses: why a pod could not be grouped.
"""

from kai_ray_operators.config import ConfigMapRef, GroupingConfig, GroupingConfigError
from kai_ray_operators.context import Grouper, GroupingContext
from kai_ray_operators.errors import (
    Forbidden,
    GroupingError,
    InvalidWorkload,
    NotFound,
    OwnerChainError,
    ReadError,
    UnsupportedWorkload,
)
from kai_ray_operators.fields import GroupVersionKind, KubeObject
from kai_ray_operators.hub import HUB_TABLE, PLUGINS, grouping_context, plugin_id
from kai_ray_operators.metadata import OwnerReference, PodGroupMetadata, SubGroupMetadata, TopologyConstraint
from kai_ray_operators.owners import OwnerChain, resolve_owners
from kai_ray_operators.pipeline import PodPlan, group_pod, plan_pod
from kai_ray_operators.reader import InMemoryReader, ObjectReader
from kai_ray_operators.wire import PodGroupUpdate, build_pod_group, merge_pod_group, pod_patch

__all__ = [
    "HUB_TABLE",
    "PLUGINS",
    "ConfigMapRef",
    "Forbidden",
    "GroupVersionKind",
    "Grouper",
    "GroupingConfig",
    "GroupingConfigError",
    "GroupingContext",
    "GroupingError",
    "InMemoryReader",
    "InvalidWorkload",
    "KubeObject",
    "NotFound",
    "ObjectReader",
    "OwnerChain",
    "OwnerChainError",
    "OwnerReference",
    "PodGroupMetadata",
    "PodGroupUpdate",
    "PodPlan",
    "ReadError",
    "SubGroupMetadata",
    "TopologyConstraint",
    "UnsupportedWorkload",
    "build_pod_group",
    "group_pod",
    "grouping_context",
    "merge_pod_group",
    "plan_pod",
    "plugin_id",
    "pod_patch",
    "resolve_owners",
]
