"""Queue manifests → `QueueSpec`s, dropping queues that cannot hang in one tree.

KAI removes a queue whose parent is missing together with its descendants
(spec/scheduling.md §1.1); a parent cycle has no root at all. Both are
reported per queue so the user sees every queue that went missing and why.
"""

from __future__ import annotations

from dataclasses import dataclass

from kai_ray.api import Manifest, ManifestProblem, Queue, QueueResource
from kai_ray.api.constants import NODE_POOL_LABEL
from kai_ray.convert.common import created, seconds
from kai_ray.model.objects import UNLIMITED, QueueSpec, ResourceQuota

MEGABYTE = 1_000_000
"""Queue memory is written in MB (10^6 bytes), not MiB (spec/kubernetes-api.md §2.1)."""
_PARENT_FIELD = "spec.parentQueue"


@dataclass(frozen=True)
class QueueIndex:
    """Which queue names exist after conversion, and which were dropped for a reported reason."""

    kept: frozenset[str]
    skipped: frozenset[str]

    def why_missing(self, name: str) -> str | None:
        """None when `name` is a usable queue, else the message for whoever names it."""
        if name in self.kept:
            return None
        if name in self.skipped:
            return f"queue {name!r} was skipped (see its own problem)"
        return f"queue {name!r} does not exist"


def convert_queues(
    manifests: list[Manifest[Queue]], problems: list[ManifestProblem]
) -> tuple[list[QueueSpec], QueueIndex]:
    parents = {m.obj.metadata.name: m.obj.spec.parent_queue for m in manifests}
    broken = _tree_errors(parents)
    for manifest in manifests:
        if manifest.obj.metadata.name in broken:
            problems.append(manifest.problem(_PARENT_FIELD, broken[manifest.obj.metadata.name]))
    queues = [_queue_spec(m) for m in manifests if m.obj.metadata.name not in broken]
    index = QueueIndex(frozenset(q.name for q in queues), frozenset(broken))
    return queues, index


def _tree_errors(parents: dict[str, str]) -> dict[str, str]:
    """Map each queue that cannot join the tree to the reason; `parents` maps name → parent ("" = root)."""
    errors: dict[str, str] = {}
    good: set[str] = set()
    for start in parents:
        trail = _walk_up(start, parents, good, errors)
        for name in reversed(trail):
            parent = parents[name]
            if name in errors or name in good:
                continue
            if parent in errors:
                errors[name] = f"parent queue {parent!r} was skipped"
            else:
                good.add(name)
    return errors


def _walk_up(start: str, parents: dict[str, str], good: set[str], errors: dict[str, str]) -> list[str]:
    """Follow parents from `start` until a settled queue, a root, a missing parent or a cycle.

    Records roots as good and missing parents and cycles as errors; returns the
    unsettled path so the caller can settle it from the top down.
    """
    trail: list[str] = []
    name = start
    while name not in good and name not in errors:
        if name in trail:
            cycle = trail[trail.index(name) :]
            text = " -> ".join([*cycle, name])
            errors.update(dict.fromkeys(cycle, f"parent chain forms a cycle: {text}"))
            break
        trail.append(name)
        parent = parents[name]
        if not parent:
            good.add(name)
            break
        if parent not in parents:
            errors[name] = f"queue {parent!r} does not exist"
            break
        name = parent
    return trail


def _queue_spec(manifest: Manifest[Queue]) -> QueueSpec:
    spec = manifest.obj.spec
    return QueueSpec(
        name=manifest.obj.metadata.name,
        parent=spec.parent_queue or None,
        priority=spec.priority,
        created=created(manifest),
        gpu=_quota(spec.resources.gpu, 1.0),
        cpu=_quota(spec.resources.cpu, 1.0),
        memory=_quota(spec.resources.memory, MEGABYTE),
        preempt_min_runtime=seconds(spec.preempt_min_runtime),
        reclaim_min_runtime=seconds(spec.reclaim_min_runtime),
        node_pool=manifest.obj.metadata.labels.get(NODE_POOL_LABEL, ""),
    )


def _quota(resource: QueueResource, unit: float) -> ResourceQuota:
    return ResourceQuota(
        _scaled(resource.quota, unit), _scaled(resource.limit, unit), resource.over_quota_weight
    )


def _scaled(amount: float, unit: float) -> float:
    return amount if amount == UNLIMITED else amount * unit
