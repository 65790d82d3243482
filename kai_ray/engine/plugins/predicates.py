"""The Kubernetes-style node filter (§16.1) as array masks.

Masks that depend only on a task's constraints (affinity, selector,
tolerations, GPU-memory sync) are computed once per constraint signature
per node table (every session over it shares them); a thousand identical
pods cost one evaluation.
"""

from __future__ import annotations

import numpy as np

from kai_ray.engine.jobs import Task
from kai_ray.engine.plugins.base import NodeFilter, Plugin
from kai_ray.engine.reasons import NodeFilterCause
from kai_ray.identity_cache import IdentityCache
from kai_ray.model.affinity import matches_affinity, tolerates
from kai_ray.model.objects import TaskSpec
from kai_ray.model.snapshot import NodeTable

SignatureKey = tuple[object, ...]


class PredicatesPlugin(Plugin):
    name = "predicates"

    def on_session_open(self) -> None:
        memo = table_memo(self.session.nodes.table)
        self._static = memo.static
        self._max_allocatable = memo.max_allocatable
        self._too_big = memo.too_big

    def pre_predicate(self, task: Task) -> str | None:
        blockers = task.spec.blockers
        if blockers:
            return f"pod {task.name}: " + "; ".join(blocker.message for blocker in blockers)
        request = task.request.tobytes()
        too_big = self._too_big.get(request)
        if too_big is None:
            too_big = self._too_big[request] = bool((task.request > self._max_allocatable + 1e-9).any())
        return "the pod requests more than the largest node in the pool offers" if too_big else None

    def node_filter(self, task: Task) -> NodeFilter:
        key = static_signature(task.spec)
        cached = self._static.get(key)
        if cached is None:
            cached = self._static_filter(task.spec)
            self._static[key] = cached
        return cached

    def _static_filter(self, spec: TaskSpec) -> NodeFilter:
        rows = {cause: mask for cause, mask, _ in static_rows(self.session.nodes.table, spec)}
        placement = rows[NodeFilterCause.NODE_AFFINITY] & rows[NodeFilterCause.TAINTS]
        stages = [(rows[NodeFilterCause.UNSCHEDULABLE], "unschedulable or not ready")]
        stages.append((placement, "fail node affinity/taints"))
        if NodeFilterCause.GPU_MEMORY_UNKNOWN in rows:
            stages.append((rows[NodeFilterCause.GPU_MEMORY_UNKNOWN], "do not publish GPU memory"))
        mask = np.ones(len(self.session.nodes.table), dtype=bool)
        reasons = []
        for stage_mask, words in stages:
            turned_away = int(np.count_nonzero(mask & ~stage_mask))
            if turned_away:
                reasons.append(f"{turned_away} {words}")
            mask &= stage_mask
        mask.flags.writeable = False  # shared by every session over the table (`table_memo`)
        return NodeFilter(mask, ", ".join(reasons))


def static_rows(table: NodeTable, spec: TaskSpec) -> list[tuple[NodeFilterCause, np.ndarray, str]]:
    """Per static cause, the rows it admits and its words: schedulable, node affinity (selector,
    required terms, volumes' node selectors), taints, and GPU memory published when the pod asks
    for GPU memory. The node filter and explanations both read these."""
    causes = [
        (NodeFilterCause.UNSCHEDULABLE, table.schedulable, "unschedulable, not ready or under pressure"),
        (
            NodeFilterCause.NODE_AFFINITY,
            np.array([matches_affinity(spec, node) for node in table.specs], dtype=bool),
            "node selector, required node affinity or a volume's node affinity does not match",
        ),
        (
            NodeFilterCause.TAINTS,
            np.array([tolerates(spec, node) for node in table.specs], dtype=bool),
            "a taint the pod does not tolerate",
        ),
    ]
    if spec.gpu_memory_mib > 0:
        causes.append(
            (NodeFilterCause.GPU_MEMORY_UNKNOWN, table.gpu_memory_synced, "no nvidia.com/gpu.memory label")
        )
    return causes


def explained_rows(table: NodeTable, spec: TaskSpec) -> list[tuple[NodeFilterCause, np.ndarray, str]]:
    """`static_rows`, kept per constraint signature while the table lives: an explanation is asked
    for every pod that finds no node and for every Explain call, most of them alike. Kept apart from
    the node filters so placing pods, which reads only the ANDed mask, holds no more arrays.
    Callers must not change the arrays (some are the table's own)."""
    memo = table_memo(table)
    key = static_signature(spec)
    rows = memo.explained.get(key)
    if rows is None:
        rows = memo.explained[key] = static_rows(table, spec)
    return rows


class TableMemo:
    """What the plugin's answers read of a node table alone, kept for as long as the table lives.

    A table is never changed once compiled, and a scheduler's sessions (every cycle of a bench,
    every split part's what-ifs) open over one table many times: the filters (a `matches_node`
    call per node and signature) and the largest allocatable were worked out again each time.
    """

    def __init__(self, table: NodeTable) -> None:
        self.static: dict[SignatureKey, NodeFilter] = {}
        """Constraint signature → the node filter of `_static_filter`."""
        self.explained: dict[SignatureKey, list[tuple[NodeFilterCause, np.ndarray, str]]] = {}
        """Constraint signature → `static_rows`, filled only by explanations (`explained_rows`)."""
        self.max_allocatable: np.ndarray = table.allocatable.max(axis=0, initial=0.0)
        self.too_big: dict[bytes, bool] = {}
        """Request (its bytes) → whether it is larger than any node: it reads only the request and
        the table's allocatable, and is asked before every placement; alike pods share one answer."""


table_memo: IdentityCache[NodeTable, TableMemo] = IdentityCache(TableMemo)


def static_signature(spec: TaskSpec) -> SignatureKey:
    """What the static filters read of a pod: pods alike in it share their rows."""
    return (
        spec.node_affinity,
        spec.volume_node_affinity,
        tuple(sorted(spec.node_selector.items())),
        spec.tolerations,
        spec.gpu_memory_mib > 0,
    )
