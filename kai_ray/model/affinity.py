"""Whether a pod's placement constraints admit a node: selector, required affinity, volumes' node
affinity, taints.

Pure functions of the pod spec and the node spec, so any process holding
node specs (the engine, a node shard) decides the same way.
"""

from __future__ import annotations

from kai_ray.model.labels import value_in
from kai_ray.model.objects import (
    AffinityRequirement,
    NodeSelectorTerm,
    NodeSelectorTerms,
    NodeSpec,
    Taint,
    TaskSpec,
    Toleration,
)


def matches_node(spec: TaskSpec, node: NodeSpec) -> bool:
    return matches_affinity(spec, node) and tolerates(spec, node)


def matches_affinity(spec: TaskSpec, node: NodeSpec) -> bool:
    """`nodeSelector`, required node affinity and the volumes' node selectors (kube-scheduler's
    NodeAffinity and VolumeBinding filters), without taints."""
    labels = node.labels
    if any(labels.get(k) != v for k, v in spec.node_selector.items()):
        return False
    if spec.node_affinity and not selector_holds(spec.node_affinity, node):
        return False
    return all(selector_holds(terms, node) for terms in spec.volume_node_affinity)


def tolerates(spec: TaskSpec, node: NodeSpec) -> bool:
    """Whether the pod tolerates every NoSchedule/NoExecute taint of the node."""
    return all(_tolerated(taint, spec.tolerations) for taint in node.taints)


def selector_holds(terms: NodeSelectorTerms, node: NodeSpec) -> bool:
    """A required node selector: any of its terms matches (terms are ORed)."""
    return any(term_matches(term, node) for term in terms)


def term_matches(term: NodeSelectorTerm, node: NodeSpec) -> bool:
    """Every expression on the node's labels and every field (`metadata.name`) holds; a term with
    neither matches nothing, as Kubernetes' node selector says."""
    if not term.expressions and not term.fields:
        return False
    labels = node.labels
    if not all(_requirement_holds(req, labels) for req in term.expressions):
        return False
    fields = {"metadata.name": node.name}
    return all(_requirement_holds(req, fields) for req in term.fields)


def _requirement_holds(req: AffinityRequirement, labels: dict[str, str]) -> bool:
    value = labels.get(req.key)
    if req.operator in ("Gt", "Lt"):
        return _numeric_compare(value, req)
    return value_in(req.operator, req.values, value)


def _numeric_compare(value: str | None, req: AffinityRequirement) -> bool:
    try:
        left, right = int(value or ""), int(req.values[0])
    except (ValueError, IndexError):
        return False
    return left > right if req.operator == "Gt" else left < right


def _tolerated(taint: Taint, tolerations: tuple[Toleration, ...]) -> bool:
    if taint.effect == "PreferNoSchedule":
        return True
    for toleration in tolerations:
        if toleration.effect and toleration.effect != taint.effect:
            continue
        if toleration.operator == "Exists" and (not toleration.key or toleration.key == taint.key):
            return True
        if toleration.key == taint.key and toleration.value == taint.value:
            return True
    return False
