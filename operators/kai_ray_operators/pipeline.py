"""From a pod to its PodGroup: resolve the owners, pick the plugin, group; and what to write.

`group_pod` is KAI's `GetPodOwners` + `GetPGMetadata`: pure, given a reader.
`plan_pod` adds the reconcile rules around it (spec/integrations.md §1.1):
which pods to leave alone, the node-pool label a PodGroup inherits from its
pod, and the patch that links the pod to its PodGroup. A controller then only
has to apply the plan (`wire.build_pod_group`, `wire.merge_pod_group`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from kai_ray.api.constants import POD_GROUP_NAME_ANNOTATION, SKIP_PODGROUPER_ANNOTATION
from kai_ray_operators.config import GroupingConfig
from kai_ray_operators.fields import GroupVersionKind, KubeObject, annotations_of, describe, field, labels_of
from kai_ray_operators.hub import PLUGINS, grouping_context, plugin_id
from kai_ray_operators.metadata import PodGroupMetadata
from kai_ray_operators.owners import OwnerChain, resolve_owners
from kai_ray_operators.reader import ObjectReader
from kai_ray_operators.wire import pod_patch

__all__ = ["PodPlan", "group_pod", "plan_pod"]


@dataclass(frozen=True)
class PodPlan:
    metadata: PodGroupMetadata
    pod_patch: dict[str, Any] | None
    """Merge patch linking the pod to its PodGroup (and leaf SubGroup); None when it already is."""
    notices: tuple[str, ...] = ()
    """What the user should know although KAI groups the pod anyway: an owner it may not read
    (the PodGroup then stands for the owner below it), a queue label the top owner's overrides."""


def _group(
    reader: ObjectReader, config: GroupingConfig, pod: KubeObject, chain: OwnerChain
) -> PodGroupMetadata | None:
    plugin = PLUGINS[plugin_id(GroupVersionKind.of(chain.top_owner), reader, config)]
    return plugin(grouping_context(reader, config), chain.top_owner, pod, chain.owners)


def group_pod(reader: ObjectReader, config: GroupingConfig, pod: KubeObject) -> PodGroupMetadata | None:
    """The pod's PodGroup, or None when its plugin leaves it ungrouped; `GroupingError` when it cannot say."""
    return _group(reader, config, pod, resolve_owners(reader, pod))


def _opted_out(obj: KubeObject) -> bool:
    return annotations_of(obj).get(SKIP_PODGROUPER_ANNOTATION) == "true"


def plan_pod(reader: ObjectReader, config: GroupingConfig, pod: KubeObject) -> PodPlan | None:
    """What the podgrouper does for one pod of ours; None means "leave it alone"."""
    if _opted_out(pod):
        return None
    if not field(pod, "metadata", "ownerReferences") and POD_GROUP_NAME_ANNOTATION in annotations_of(pod):
        return None  # a bare pod that names its PodGroup is grouped by its author
    chain = resolve_owners(reader, pod)
    if any(_opted_out(owner) for owner in chain.owners):
        return None
    metadata = _group(reader, config, pod, chain)
    if metadata is None:
        return None
    node_pool = labels_of(pod).get(config.node_pool_label_key)
    if node_pool is not None and config.node_pool_label_key not in metadata.labels:
        metadata = dataclasses.replace(
            metadata, labels={**metadata.labels, config.node_pool_label_key: node_pool}
        )
    return PodPlan(metadata, pod_patch(pod, metadata), _notices(config, chain, pod))


def _notices(config: GroupingConfig, chain: OwnerChain, pod: KubeObject) -> tuple[str, ...]:
    notices = []
    if chain.forbidden is not None:
        notices.append(
            f"may not read its owner {chain.forbidden} (403): grouped by {describe(chain.top_owner)} instead"
        )
    key = config.queue_label_key
    own, top = labels_of(pod).get(key), labels_of(chain.top_owner).get(key)
    if own is not None and top is not None and own != top and chain.owners:
        owner = describe(chain.top_owner)
        notices.append(f"its {key} label {own!r} differs from {top!r} on {owner}, which is the one used")
    return tuple(notices)
