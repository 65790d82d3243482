"""Build the simulator's `ClusterState` from KAI-style Kubernetes manifests.

This is how a user's real objects (Queues, PodGroups, Pods, Nodes,
PriorityClasses, BindRequests) reach the engine without a cluster. Bad
content never raises: each broken object is reported as a `ManifestProblem`
and skipped, and everything else is still converted, so one typo does not
hide the rest of the cluster.

Choices where KAI's behaviour cannot be reproduced from manifests alone:
- Only pods with `schedulerName: kai-scheduler` are included. Pods of other
  schedulers would only consume node capacity, which `NodeSpec` cannot carry.
- The shipped `default-queue`/`default-parent-queue` are not created
  implicitly; a pod relying on them needs them in the manifests.
- Objects without `creationTimestamp` are "created" at their order of
  appearance (0, 1, 2 ... seconds); the cluster's `now` is the latest time any
  object mentions.
- Topology and Namespace objects are accepted but carry nothing the
  `ClusterState` holds.
"""

from __future__ import annotations

from pathlib import Path

from kai_ray.api import (
    BindRequest,
    ManifestProblem,
    ManifestSet,
    Node,
    Pod,
    PodGroup,
    PriorityClass,
    Queue,
    load_manifests,
)
from kai_ray.api.constants import SCHEDULER_NAME
from kai_ray.cluster.sim._convert_common import convert_each, latest_time
from kai_ray.cluster.sim._convert_jobs import JobAssembler
from kai_ray.cluster.sim._convert_nodes import node_spec
from kai_ray.cluster.sim._convert_podgroups import Priorities
from kai_ray.cluster.sim._convert_pods import PodContext
from kai_ray.cluster.sim._convert_queues import convert_queues
from kai_ray.model.objects import ClusterState

__all__ = ["cluster_from_manifest_set", "cluster_from_manifests"]


def cluster_from_manifests(path: str | Path) -> tuple[ClusterState, list[ManifestProblem]]:
    """Load a YAML file or directory and convert it; problems are returned, never raised."""
    return cluster_from_manifest_set(load_manifests(path))


def cluster_from_manifest_set(
    loaded: ManifestSet, *, now: float | None = None, scheduler_name: str = SCHEDULER_NAME
) -> tuple[ClusterState, list[ManifestProblem]]:
    """Convert already loaded manifests; the result's problems include the loader's.

    A live backend passes its wall clock as `now` (manifests alone only know
    their latest timestamp) and its configured `scheduler_name`.
    """
    problems = list(loaded.problems)
    now = latest_time(loaded) if now is None else now
    queues, queue_index = convert_queues(loaded.of_type(Queue), problems)
    nodes = convert_each(loaded.of_type(Node), node_spec, problems)
    node_names = frozenset(node.name for node in nodes)
    pods = PodContext(now, node_names, _binding(loaded, node_names), _selected_groups(loaded))
    assembler = JobAssembler(
        queue_index, Priorities.from_manifests(loaded.of_type(PriorityClass)), pods, problems, scheduler_name
    )
    assembler.add_podgroups(loaded.of_type(PodGroup))
    assembler.add_pods(loaded.of_type(Pod))
    return ClusterState(nodes=nodes, queues=queues, jobs=assembler.jobs, now=now), problems


def _selected_groups(loaded: ManifestSet) -> dict[tuple[str, str], tuple[str, ...]]:
    return {
        (m.obj.metadata.namespace or "", m.obj.spec.pod_name): tuple(m.obj.spec.selected_gpu_groups)
        for m in loaded.of_type(BindRequest)
        if not m.obj.failed and m.obj.spec.selected_gpu_groups
    }


def _binding(loaded: ManifestSet, nodes: frozenset[str]) -> dict[tuple[str, str], str]:
    """Pods with a live BindRequest: KAI ignores failed requests and those naming vanished nodes."""
    binding: dict[tuple[str, str], str] = {}
    for manifest in loaded.of_type(BindRequest):
        request = manifest.obj
        if not request.failed and request.spec.selected_node in nodes:
            binding[(request.metadata.namespace or "", request.spec.pod_name)] = request.spec.selected_node
    return binding
