"""Why nodes refuse a pod, per cause, from the engine's own filters.

One answer for every reader (the gRPC `Explain`, `kai-ray explain`, the pending reason, PodGroup
conditions): each cause counts the nodes it refuses on its own, over all nodes, so a new filter in
the engine shows up in every explanation without the readers knowing it. Worked out only when asked.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from kai_ray.engine.jobs import Task
from kai_ray.engine.plugins.predicates import explained_rows
from kai_ray.engine.reasons import NodeFilterCause, NodeRefusal
from kai_ray.engine.session import Session
from kai_ray.model.resources import CPU, EPSILON, GPU, MEMORY, PODS

__all__ = ["admitted_rows", "node_refusals"]

_RESOURCES = (
    (CPU, "cpu", 1000.0),
    (MEMORY, "memory", 1.0),
    (GPU, "nvidia.com/gpu", 1.0),
    (PODS, "pods", 1.0),
)
"""Node vector columns as Kubernetes names them, with the divisor from the engine's units."""

_CAUSE_ORDER = {cause: position for position, cause in enumerate(NodeFilterCause)}
"""Causes in the order the enum lists them (the filters' order): refusals are sorted by it, then
by message, so a plan that carries them is the same whatever order the rules ran in."""


def node_refusals(
    session: Session, task: Task, rules: Sequence[NodeRefusal] | None = None
) -> list[NodeRefusal]:
    """Every cause that refuses the pod some node, with how many: the static filters, the rules
    that read other pods, then resources among the nodes that pass the rest.

    `rules`: the pod rules' refusals (`PodConstraints.refusals`) when the caller has them already;
    naming the pods a rule refuses for is most of an explanation's cost."""
    static = _static(session, task)
    refusals = [
        NodeRefusal(cause, int(np.count_nonzero(~rows)), words)
        for cause, rows, words in static
        if not rows.all()
    ]
    eligible, ruled = _admitted(session, task, static)
    if ruled and session.pod_constraints is not None:
        refusals.extend(session.pod_constraints.refusals(task) if rules is None else rules)
    available = session.nodes.idle + session.nodes.releasing
    for column, name, unit in _RESOURCES:
        count = int(np.count_nonzero(eligible & (task.request[column] > available[:, column] + EPSILON)))
        if count:
            amount = float(task.request[column]) / unit
            words = f"insufficient {name} (the pod asks {amount:g})"
            refusals.append(NodeRefusal(NodeFilterCause.INSUFFICIENT_RESOURCES, count, words))
    refusals.sort(key=lambda refusal: (_CAUSE_ORDER[refusal.cause], refusal.message))
    return refusals


def admitted_rows(session: Session, task: Task) -> np.ndarray:
    """Rows every filter but the node-vector resource fit admits the pod to: the static filters
    (when the `predicates` plugin runs them) and the rules that read other pods. A new array."""
    return _admitted(session, task, _static(session, task))[0]


def _admitted(
    session: Session, task: Task, static: list[tuple[NodeFilterCause, np.ndarray, str]]
) -> tuple[np.ndarray, bool]:
    """`admitted_rows`, and whether a rule reading other pods concerns the pod at all."""
    admitted = np.ones(len(session.nodes.table), dtype=bool)
    for _, rows, _ in static:
        admitted &= rows
    constraints = session.pod_constraints
    verdict = None if constraints is None else constraints.verdict(task)
    if verdict is not None:
        admitted &= verdict.admits
    return admitted, verdict is not None


def _static(session: Session, task: Task) -> list[tuple[NodeFilterCause, np.ndarray, str]]:
    """The static filters' rows, none when no plugin runs them (KAI's `k8sPredicates: false`)."""
    if not session.predicates_enabled:
        return []
    return explained_rows(session.nodes.table, task.spec)
