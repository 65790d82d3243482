"""Top-down fair share over the queue hierarchy (spec §6.2 first paragraph, Example 4).

Each level only redistributes what its parent was found to deserve, so a department's fair share bounds
its projects' shares, and reclaim between projects of different departments is judged at department level.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from kai_ray.fairshare.constants import FAIRNESS_RESOURCES
from kai_ray.fairshare.division import QueueDemand, divide

_Children = dict[str | None, list["QueueNode"]]


@dataclass(frozen=True)
class QueueNode:
    """One queue of the hierarchy with per-resource settings keyed by "cpu", "memory", "gpu".

    A missing resource key means 0, the CRD default (for `limit` that is a hard cap of nothing).
    `request` is the queue's own (leaf) demand; inner queues' demand is aggregated from their subtree.
    `parent` None or "" marks a top-level queue.
    """

    name: str
    parent: str | None
    priority: int
    created: float
    deserved: Mapping[str, float]
    limit: Mapping[str, float]
    over_quota_weight: Mapping[str, float]
    request: Mapping[str, float]
    usage: Mapping[str, float] = field(default_factory=dict)


def fair_shares(
    queues: Sequence[QueueNode], totals: Mapping[str, float], k_value: float = 1.0
) -> dict[str, dict[str, float]]:
    """Fair share per queue name and resource.

    Top-level queues divide `totals`; each queue's children divide that queue's fair share. Raises
    ValueError for duplicate names, unknown parents and cycles: dropping orphans is the snapshot
    builder's job (KAI prunes them before fairness runs), and silently skipping them here would hide it.
    """
    children = _children_by_parent(queues)
    top_down = _top_down_order(children, len(queues))
    requests = _aggregated_requests(top_down, children)
    shares: dict[str, dict[str, float]] = {node.name: {} for node in top_down}
    for parent in [None, *(node.name for node in top_down)]:
        budget = totals if parent is None else shares[parent]
        for resource in FAIRNESS_RESOURCES:
            demands = [_demand(node, resource, requests[node.name]) for node in children.get(parent, [])]
            for name, share in divide(budget.get(resource, 0.0), demands, k_value).items():
                shares[name][resource] = share
    return shares


def _children_by_parent(queues: Sequence[QueueNode]) -> _Children:
    """Sibling lists in (created, name) order, the same tie-break the division uses."""
    names = {node.name for node in queues}
    if len(names) != len(queues):
        raise ValueError("queue names must be unique")
    children: _Children = {}
    for node in sorted(queues, key=lambda node: (node.created, node.name)):
        parent = node.parent or None
        if parent is not None and parent not in names:
            raise ValueError(f"queue {node.name!r} names unknown parent {parent!r}")
        children.setdefault(parent, []).append(node)
    return children


def _top_down_order(children: _Children, count: int) -> list[QueueNode]:
    """Breadth-first from the top level; a queue never reached sits on a parent cycle."""
    order = list(children.get(None, []))
    for node in order:
        order.extend(children.get(node.name, []))
    if len(order) != count:
        unreached = {node.name for kids in children.values() for node in kids} - {node.name for node in order}
        raise ValueError(f"queue parent cycle involving {sorted(unreached)}")
    return order


def _aggregated_requests(top_down: list[QueueNode], children: _Children) -> dict[str, dict[str, float]]:
    """A parent asks for what its subtree asks for, so its share is capped by its descendants' demand."""
    requests: dict[str, dict[str, float]] = {}
    for node in reversed(top_down):
        requests[node.name] = {
            resource: node.request.get(resource, 0.0)
            + sum(requests[child.name][resource] for child in children.get(node.name, []))
            for resource in FAIRNESS_RESOURCES
        }
    return requests


def _demand(node: QueueNode, resource: str, request: Mapping[str, float]) -> QueueDemand:
    return QueueDemand(
        name=node.name,
        deserved=node.deserved.get(resource, 0.0),
        limit=node.limit.get(resource, 0.0),
        over_quota_weight=node.over_quota_weight.get(resource, 0.0),
        priority=node.priority,
        request=request[resource],
        created=node.created,
        usage=node.usage.get(resource, 0.0),
    )
