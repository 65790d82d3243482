"""Cluster objects → the engine's `ClusterState`: the one translation every backend uses.

Manifests for `kai-ray simulate` (their pods grouped first, by the same
podgrouper as on a cluster) and the informer cache of `kai-ray serve` read
Queues, PodGroups, Pods, Nodes, PriorityClasses and BindRequests through this
module (Topologies too, and the claims, volumes, StorageClasses and ConfigMaps pods
name: `volumes`), so a directory of manifests and a live
cluster mean the same thing to the scheduler.  Bad content never raises: each
broken object is reported as a `ManifestProblem` and skipped, and everything
else is still converted, so one typo does not hide the rest of the cluster.
A skipped pod that sits on a node still occupies it (see `jobs`).

Choices where KAI's behaviour cannot be reproduced from objects alone:
- The shipped `default-queue`/`default-parent-queue` are not created
  implicitly; a pod relying on them needs them in the objects.
- Objects without `creationTimestamp` are "created" at their order of
  appearance (0, 1, 2 ... seconds); the cluster's `now` is the latest time any
  object mentions, unless the backend gives its clock.
- Namespace objects lend their labels to inter-pod affinity terms' `namespaceSelector`; a
  namespace that pods are in without a Namespace object (manifests often leave it out; a
  cluster has every one) carries only the name label the API server gives every namespace.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kai_ray.api import (
    ApiObject,
    BindRequest,
    Manifest,
    ManifestProblem,
    ManifestSet,
    Namespace,
    Node,
    Pod,
    PodGroup,
    PriorityClass,
    Queue,
    Topology,
    load_manifests,
)
from kai_ray.api.constants import NAMESPACE_NAME_LABEL, SCHEDULER_NAME
from kai_ray.convert.common import convert_each, latest_time
from kai_ray.convert.jobs import JobAssembler
from kai_ray.convert.nodes import node_spec
from kai_ray.convert.podgroups import Priorities
from kai_ray.convert.pods import PodContext
from kai_ray.convert.queues import QueueIndex, convert_queues
from kai_ray.convert.topologies import convert_topologies
from kai_ray.convert.volumes import storage_from_manifests
from kai_ray.model.objects import ClusterState

__all__ = [
    "JobContext",
    "cluster_from_manifest_set",
    "cluster_from_manifests",
    "job_problems",
    "namespace_labels",
    "occupancy_only",
]


def cluster_from_manifests(path: str | Path) -> tuple[ClusterState, list[ManifestProblem]]:
    """Load a YAML file or directory and convert it; problems are returned, never raised."""
    return cluster_from_manifest_set(load_manifests(path))


def cluster_from_manifest_set(
    loaded: ManifestSet,
    *,
    now: float | None = None,
    scheduler_name: str = SCHEDULER_NAME,
    occupants: Iterable[Manifest[Pod]] = (),
) -> tuple[ClusterState, list[ManifestProblem]]:
    """Convert already loaded manifests; the result's problems include the loader's.

    A live backend passes its wall clock as `now` (manifests alone only know
    their latest timestamp), its configured `scheduler_name`, and `occupants`:
    pods already reported as problems that only hold their node.
    """
    problems = list(loaded.problems)
    now = latest_time(loaded) if now is None else now
    queues, queue_index = convert_queues(loaded.of_type(Queue), problems)
    nodes = convert_each(loaded.of_type(Node), node_spec, problems)
    node_names = frozenset(node.name for node in nodes)
    held = list(occupants)
    namespaces = namespace_labels(
        (manifest.obj for manifest in loaded.of_type(Namespace)),
        (manifest.obj.metadata.namespace or "" for manifest in [*loaded.of_type(Pod), *held]),
    )
    pods = PodContext(
        now, node_names, *bind_requests_by_pod(loaded.of_type(BindRequest), node_names), namespaces
    )
    assembler = JobAssembler(
        queue_index,
        Priorities.from_manifests(loaded.of_type(PriorityClass)),
        pods,
        problems,
        scheduler_name,
        storage_from_manifests(loaded),
    )
    assembler.add_podgroups(loaded.of_type(PodGroup))
    assembler.add_pods(loaded.of_type(Pod))
    assembler.add_occupants(held)
    state = ClusterState(
        nodes=nodes,
        queues=queues,
        jobs=assembler.jobs,
        now=now,
        held=assembler.held,
        topologies=convert_topologies(loaded.of_type(Topology)),
    )
    return state, problems


@dataclass(frozen=True)
class JobContext:
    """What PodGroups and their pods are converted against, besides nodes: the queue tree and
    the priority classes.  Apart so that a submit, which converts only its own few objects
    before creating them, builds it once per change of those objects, not once per submit."""

    queues: QueueIndex
    priorities: Priorities

    @classmethod
    def of(cls, queues: Iterable[Queue], classes: Iterable[PriorityClass]) -> JobContext:
        """Their own problems (a queue in a cycle) are the cluster's, reported by its cycles."""
        _, index = convert_queues([Manifest("<cluster>", 0, i, q) for i, q in enumerate(queues)], [])
        named = [Manifest("<cluster>", 0, i, c) for i, c in enumerate(classes)]
        return cls(index, Priorities.from_manifests(named))


def job_problems(
    manifests: Sequence[Manifest[ApiObject]],
    context: JobContext,
    *,
    now: float,
    scheduler_name: str = SCHEDULER_NAME,
) -> list[ManifestProblem]:
    """What converting these PodGroups and pods (not yet on any node) would report; other kinds
    are ignored."""
    problems: list[ManifestProblem] = []
    assembler = JobAssembler(
        context.queues, context.priorities, PodContext(now, frozenset(), {}), problems, scheduler_name
    )
    objects = ManifestSet(manifests=list(manifests))
    assembler.add_podgroups(objects.of_type(PodGroup))
    assembler.add_pods(objects.of_type(Pod))
    return problems


OCCUPANCY_FIELDS = {
    "metadata": (
        "name",
        "namespace",
        "uid",
        "resourceVersion",
        "deletionTimestamp",
        "creationTimestamp",
        "labels",
        "annotations",
    ),
    "spec": (
        "schedulerName",
        "nodeName",
        "containers",
        "initContainers",
        "overhead",
        "affinity",
        "hostNetwork",
    ),
    "status": ("phase",),
}
_CONSTRAINTS = {"spec": ("affinity", "hostNetwork"), "container": ("ports",)}
"""What of an occupant binds the pods placed beside it rather than what it holds."""


def occupancy_only(pod: Mapping[str, Any], *, constraints: bool = True) -> dict[str, Any]:
    """The parts of a pod that say what it holds on its node, with containers cut to their requests,
    and, unless `constraints` is false, what binds the pods placed beside it (its pod
    (anti-)affinity, its containers' host ports; its labels are kept either way).

    What is kept of pods that are only counted, never scheduled: other schedulers'
    pods, and pods the models reject (a smaller object is also one with less to reject; without
    `constraints`, nothing is left to reject but requests).
    """
    reduced: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod"}
    for section, keys in OCCUPANCY_FIELDS.items():
        part = pod.get(section)
        if isinstance(part, dict):
            kept = keys if constraints else tuple(k for k in keys if k not in _CONSTRAINTS.get(section, ()))
            reduced[section] = {key: part[key] for key in kept if key in part}
    spec = reduced.setdefault("spec", {})
    container_keys = ("restartPolicy", *_CONSTRAINTS["container"]) if constraints else ("restartPolicy",)
    for key in ("containers", "initContainers"):
        containers = spec.get(key)
        if isinstance(containers, list):
            spec[key] = [
                {"name": c.get("name", ""), "resources": c.get("resources") or {}}
                | {kept: c[kept] for kept in container_keys if kept in c}
                for c in containers
                if isinstance(c, dict)
            ]
    return reduced


def namespace_labels(declared: Iterable[Namespace], used: Iterable[str]) -> dict[str, dict[str, str]]:
    """Namespace → labels for every namespace a `namespaceSelector` can select: the Namespace
    objects, and the namespaces `used` by pods without one, each with its name label."""
    labels = {name: {NAMESPACE_NAME_LABEL: name} for name in used}
    for namespace in declared:
        name = namespace.metadata.name
        labels[name] = {**namespace.metadata.labels, NAMESPACE_NAME_LABEL: name}
    return labels


def bind_requests_by_pod(
    requests: Iterable[Manifest[BindRequest]], nodes: frozenset[str]
) -> tuple[dict[tuple[str, str], str], dict[tuple[str, str], tuple[str, ...]]]:
    """(namespace, pod) → the node a live BindRequest selected, and → the shared GPU groups it
    selected.  KAI ignores failed requests, and for the node those naming vanished nodes."""
    binding: dict[tuple[str, str], str] = {}
    groups: dict[tuple[str, str], tuple[str, ...]] = {}
    for manifest in requests:
        request = manifest.obj
        if request.failed:
            continue
        pod = (request.metadata.namespace or "", request.spec.pod_name)
        if request.spec.selected_node in nodes:
            binding[pod] = request.spec.selected_node
        if request.spec.selected_gpu_groups:
            groups[pod] = tuple(request.spec.selected_gpu_groups)
    return binding, groups
