"""`kai-ray simulate` on manifests: workloads expanded, pods grouped, then the one conversion.

On a cluster, a RayJob becomes pods through its controller and the pods get
their PodGroup from the podgrouper before the scheduler ever sees them. The
simulator does the same in memory, with the same code: `expand` makes the
pods (and the objects between them and their workload) as the controllers
would, `plan_pod` groups them exactly as the live podgrouper does, and what is
left for `kai_ray.convert` is what a scheduler reads on a cluster: pods
linked to PodGroups, queues, nodes, priority classes.

Objects without a uid get a stable one (`identity.stable_uid`), so PodGroup
names (`pg-<owner>-<uid>`) and the plan are the same on every run. A pod that
cannot be grouped is a problem line naming it and why, and is not scheduled,
as on a cluster.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kai_ray.api import (
    ManifestProblem,
    SourcedObject,
    format_path,
    load_sourced_objects,
    read_manifest_documents,
)
from kai_ray.api.constants import (
    BUILTIN_PRIORITY_CLASSES,
    DEFAULT_NAMESPACE,
    DEFAULT_QUEUE,
    POD_GROUP_NAME_ANNOTATION,
    PRIORITYCLASS_API_VERSION,
    QUEUE_LABEL,
    SCHEDULER_NAME,
)
from kai_ray.api.manifests import MODEL_KINDS, NAMESPACED_MODEL_KINDS
from kai_ray.convert import cluster_from_manifest_set
from kai_ray.model.objects import ClusterState
from kai_ray_operators.config import GroupingConfig
from kai_ray_operators.errors import GroupingError
from kai_ray_operators.expand import expand_workloads
from kai_ray_operators.fields import GroupVersionKind, KubeObject
from kai_ray_operators.identity import generated_name, stable_uid
from kai_ray_operators.pipeline import plan_pod
from kai_ray_operators.reader import InMemoryReader
from kai_ray_operators.wire import build_pod_group, merge_pod_group

__all__ = [
    "PreparedManifests",
    "cluster_from_workload_documents",
    "cluster_from_workload_manifests",
    "prepare_manifests",
]

_CLUSTER_SCOPED_WORKLOAD_KINDS = frozenset({"ClusterTrainingRuntime"})
"""Kinds the expansion reads that have no namespace; every other workload kind has one."""

_Key = tuple[str, str, str, str]
"""(API group, kind, namespace, name): what names an object, whatever version it is written in."""


@dataclass
class PreparedManifests:
    documents: list[SourcedObject]
    """What the scheduler would read: pods linked to their PodGroups, and every non-workload object."""
    problems: list[ManifestProblem] = field(default_factory=list)
    made_for: dict[tuple[str, str], tuple[str, str, str]] = field(default_factory=dict)
    """(namespace, name) of each PodGroup the podgrouper made or brought up to date -> (kind,
    name) of the workload it stands for, about which its problems are said, and its queue."""
    linked: dict[tuple[str, str], str] = field(default_factory=dict)
    """(namespace, pod name) -> the PodGroup name each pod of ours was linked to."""


def cluster_from_workload_manifests(
    path: str | Path, config: GroupingConfig | None = None, scheduler_name: str = SCHEDULER_NAME
) -> tuple[ClusterState, list[ManifestProblem]]:
    """A directory (or file) of manifests, workloads included, as the scheduler would see that cluster."""
    documents, problems = read_manifest_documents(path)
    return cluster_from_workload_documents(documents, problems, config, scheduler_name)


def cluster_from_workload_documents(
    documents: Sequence[SourcedObject],
    problems: Sequence[ManifestProblem] = (),
    config: GroupingConfig | None = None,
    scheduler_name: str = SCHEDULER_NAME,
) -> tuple[ClusterState, list[ManifestProblem]]:
    """Parsed manifests (and the problems of reading them) as the scheduler would see that cluster."""
    prepared = prepare_manifests(documents, config, scheduler_name)
    loaded = load_sourced_objects(prepared.documents)
    loaded.problems[:0] = [*problems, *prepared.problems]
    state, found = cluster_from_manifest_set(loaded, scheduler_name=scheduler_name)
    return state, _attributed(found, prepared)


def _attributed(problems: list[ManifestProblem], prepared: PreparedManifests) -> list[ManifestProblem]:
    """A problem of a PodGroup the podgrouper made is said about the workload it stands for (the
    user wrote that, not the PodGroup), and its pods are not each reported again for it."""
    refused = {
        (p.namespace, p.name)
        for p in problems
        if p.kind == "PodGroup" and (p.namespace, p.name) in prepared.made_for
    }
    said = []
    for problem in problems:
        key = (problem.namespace, problem.name)
        if problem.kind == "PodGroup" and key in refused:
            kind, name, queue = prepared.made_for[key]
            field_path = (
                f"{problem.field} of its PodGroup {problem.name}"
                if problem.field
                else f"its PodGroup {problem.name}"
            )
            message = problem.message
            if problem.field == "spec.queue" and queue == DEFAULT_QUEUE:
                message += f" (a workload without a {QUEUE_LABEL} label goes to {DEFAULT_QUEUE})"
            problem = dataclasses.replace(problem, kind=kind, name=name, field=field_path, message=message)
        elif (
            problem.kind == "Pod"
            and problem.field == format_path(("metadata", "annotations", POD_GROUP_NAME_ANNOTATION))
            and (problem.namespace, prepared.linked.get(key)) in refused
        ):
            continue
        said.append(problem)
    return said


def prepare_manifests(
    documents: Sequence[SourcedObject],
    config: GroupingConfig | None = None,
    scheduler_name: str = SCHEDULER_NAME,
) -> PreparedManifests:
    """Expand the workloads and group every pod of `scheduler_name`, as controllers and podgrouper would."""
    config = config or GroupingConfig()
    inputs = [_with_identity(document, index) for index, document in enumerate(documents)]
    objects = [document.data for document in inputs if isinstance(document.data, Mapping)]
    expansion = expand_workloads(objects, scheduler_name)
    updated = {_key(obj): obj for obj in expansion.updated}
    inputs = [
        SourcedObject(d.file, d.line, updated.get(_key(d.data), d.data)) if isinstance(d.data, Mapping) else d
        for d in inputs
    ]
    origin = _Origins(inputs)
    children = [origin.place(child) for child in expansion.children]
    prepared = PreparedManifests(
        [], [origin.problem(p.kind, p.namespace, p.name, p.field, p.message) for p in expansion.problems]
    )
    everything = [*inputs, *children]
    grouped = _Grouping(everything, config, scheduler_name, prepared)
    grouped.run()
    generated = {_key(child.data) for child in children}
    for document in [*everything, *grouped.new_pod_groups]:
        data = document.data
        if not isinstance(data, Mapping):
            prepared.documents.append(document)
            continue
        key = _key(data)
        if key[1] == "Pod" or (key not in expansion.consumed and key not in generated):
            prepared.documents.append(grouped.replaced.get(key, document))
    return prepared


class _Grouping:
    """The podgrouper's pass over every pod of ours, in memory."""

    def __init__(
        self,
        documents: list[SourcedObject],
        config: GroupingConfig,
        scheduler_name: str,
        prepared: PreparedManifests,
    ) -> None:
        self._documents = documents
        self._config = config
        self._scheduler_name = scheduler_name
        self._prepared = prepared
        objects = [d.data for d in documents if isinstance(d.data, Mapping)]
        self._reader = InMemoryReader([*objects, *_builtin_priority_classes(objects)])
        self._existing = {
            _key(d.data): d
            for d in documents
            if isinstance(d.data, Mapping) and d.data.get("kind") == "PodGroup"
        }
        self.new_pod_groups: list[SourcedObject] = []
        self.replaced: dict[_Key, SourcedObject] = {}

    def run(self) -> None:
        desired: dict[_Key, tuple[SourcedObject, dict[str, Any]]] = {}
        for document in self._documents:
            pod = document.data
            if not self._ours(pod):
                continue
            try:
                plan = plan_pod(self._reader, self._config, pod)
            except GroupingError as error:
                self._prepared.problems.append(_problem_at(document, "", f"not grouped: {error}"))
                continue
            if plan is None:
                continue
            self._prepared.problems.extend(
                dataclasses.replace(_problem_at(document, "", notice), warning=True)
                for notice in plan.notices
            )
            body = build_pod_group(plan.metadata)
            # The last pod's plan wins, as on a cluster, where each pod's event re-applies its
            # plan: a LeaderWorkerSet's workers, planned after their leader, see the whole group.
            first = desired.get(_key(body), (document, body))[0]
            desired[_key(body)] = (first, body)
            if plan.pod_patch is not None:
                _merge_patch(pod, plan.pod_patch)
            namespace, name = plan.metadata.namespace, plan.metadata.name
            self._prepared.linked[(namespace, _name(pod))] = name
            owner = plan.metadata.owner
            self._prepared.made_for.setdefault(
                (namespace, name), (owner.kind, owner.name, plan.metadata.queue)
            )
        for key, (pod_document, body) in desired.items():
            existing = self._existing.get(key)
            if existing is None:
                self.new_pod_groups.append(SourcedObject(pod_document.file, pod_document.line, body))
                continue
            update = merge_pod_group(existing.data, body, self._config)
            if update.changed:
                self.replaced[key] = SourcedObject(existing.file, existing.line, update.pod_group)

    def _ours(self, obj: Any) -> bool:
        if not isinstance(obj, dict) or obj.get("kind") != "Pod" or obj.get("apiVersion") != "v1":
            return False
        return _part(obj, "spec").get("schedulerName") == self._scheduler_name


class _Origins:
    """Where each object came from: a generated one points at the manifest of its workload."""

    def __init__(self, inputs: Iterable[SourcedObject]) -> None:
        self._by_uid: dict[str, SourcedObject] = {}
        self._by_key: dict[tuple[str, str, str], SourcedObject] = {}
        for document in inputs:
            if isinstance(document.data, Mapping):
                self._remember(document)

    def place(self, child: KubeObject) -> SourcedObject:
        source = next(
            (
                self._by_uid[str(ref.get("uid"))]
                for ref in _owner_references(child)
                if str(ref.get("uid")) in self._by_uid
            ),
            None,
        )
        placed = SourcedObject(source.file if source else "<generated>", source.line if source else 0, child)
        self._remember(placed)
        return placed

    def problem(self, kind: str, namespace: str, name: str, field_path: str, message: str) -> ManifestProblem:
        source = self._by_key.get((kind, namespace, name))
        file, line = (source.file, source.line) if source else ("<generated>", None)
        return ManifestProblem(file, kind, namespace, name, field_path, message, line)

    def _remember(self, document: SourcedObject) -> None:
        data = document.data
        meta = _part(data, "metadata")
        if meta.get("uid"):
            self._by_uid.setdefault(str(meta["uid"]), document)
        self._by_key.setdefault(
            (str(data.get("kind") or ""), str(meta.get("namespace") or ""), str(meta.get("name") or "")),
            document,
        )


def _with_identity(document: SourcedObject, position: int) -> SourcedObject:
    """A copy with what the API server would add when the manifest has none: the default
    namespace, a name for `generateName` and a uid, all stable (`identity`)."""
    data = document.data
    if not isinstance(data, Mapping) or not isinstance(data.get("metadata"), Mapping):
        return document
    data = copy.deepcopy(dict(data))
    meta = data["metadata"]
    kind = str(data.get("kind") or "")
    if _namespaced(kind) and not meta.get("namespace"):
        meta["namespace"] = DEFAULT_NAMESPACE
    if not meta.get("name") and isinstance(meta.get("generateName"), str) and meta["generateName"]:
        # Seeded by the file's name and the object's place among all objects, not by the path
        # as typed, so `simulate dir` and `simulate ./dir/` name it alike.
        meta["name"] = generated_name(meta["generateName"], f"{Path(document.file).name}#{position}")
    if not meta.get("uid") and isinstance(meta.get("name"), str):
        meta["uid"] = stable_uid(
            str(data.get("apiVersion") or ""), kind, str(meta.get("namespace") or ""), meta["name"]
        )
    return SourcedObject(document.file, document.line, data)


def _builtin_priority_classes(objects: Iterable[KubeObject]) -> list[KubeObject]:
    """KAI's four PriorityClasses, as a fresh install has them, unless the manifests write them:
    the conversion assumes them too, so grouping and scheduling agree on which classes exist."""
    written = {_name(obj) for obj in objects if obj.get("kind") == "PriorityClass"}
    return [
        {
            "apiVersion": PRIORITYCLASS_API_VERSION,
            "kind": "PriorityClass",
            "metadata": {"name": name},
            "value": value,
        }
        for name, value in BUILTIN_PRIORITY_CLASSES.items()
        if name not in written
    ]


def _name(obj: Mapping[str, Any]) -> str:
    return str(_part(obj, "metadata").get("name") or "")


def _part(obj: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    """A nested mapping of a manifest, or an empty one when it is missing or not a mapping."""
    value = obj.get(key)
    return value if isinstance(value, Mapping) else {}


def _namespaced(kind: str) -> bool:
    if kind in MODEL_KINDS:
        return kind in NAMESPACED_MODEL_KINDS
    return kind not in _CLUSTER_SCOPED_WORKLOAD_KINDS


def _key(obj: KubeObject) -> _Key:
    gvk = GroupVersionKind.of(obj)
    meta = _part(obj, "metadata")
    return gvk.group, gvk.kind, str(meta.get("namespace") or ""), str(meta.get("name") or "")


def _owner_references(obj: KubeObject) -> list[Mapping[str, Any]]:
    meta = _part(obj, "metadata")
    refs = meta.get("ownerReferences")
    return [ref for ref in refs if isinstance(ref, Mapping)] if isinstance(refs, list) else []


def _merge_patch(target: dict[str, Any], patch: Mapping[str, Any]) -> None:
    """RFC 7386 merge patch, in place: what the API server does with the podgrouper's pod patch."""
    for name, value in patch.items():
        if value is None:
            target.pop(name, None)
        elif isinstance(value, Mapping) and isinstance(target.get(name), dict):
            _merge_patch(target[name], value)
        else:
            target[name] = copy.deepcopy(value)


def _problem_at(document: SourcedObject, field_path: str, message: str) -> ManifestProblem:
    data = document.data
    meta = _part(data, "metadata")
    return ManifestProblem(
        document.file,
        str(data.get("kind") or ""),
        str(meta.get("namespace") or ""),
        str(meta.get("name") or ""),
        field_path,
        message,
        document.line,
    )
