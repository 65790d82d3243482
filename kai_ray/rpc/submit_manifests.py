"""A submit of ordinary Kubernetes manifests: the documents read, namespaced, grouped by the
podgrouper (when the backend has one) and checked as one workload."""

from __future__ import annotations

from collections.abc import Container
from typing import Any

from kai_ray.api import (
    ApiObject,
    Pod,
    PodGroup,
    SourcedObject,
    load_sourced_objects,
    read_manifest_text,
)
from kai_ray.api.constants import (
    POD_GROUP_NAME_ANNOTATION,
    SCHEDULER_NAME,
)
from kai_ray.api.manifests import MODEL_KINDS, NAMESPACED_MODEL_KINDS
from kai_ray.rpc.backend import BackendView, Grouper
from kai_ray.rpc.errors import ErrorCode, ServiceError
from kai_ray.rpc.objects import WORKLOAD_LABEL, rfc3339
from kai_ray.rpc.submission import (
    Submission,
    check_name,
    check_priority_class,
    check_queue,
    generated_name,
    invalid,
)
from kai_ray.rpc.workloads import Members
from kai_ray.v1 import scheduler_pb2 as pb

__all__ = ["from_manifests"]


def from_manifests(
    request: pb.SubmitWorkloadRequest,
    view: BackendView,
    grouper: Grouper | None,
    taken: Container[str],
    prefix: str,
) -> Submission:
    at = prefix + "manifests.documents"
    documents: list[SourcedObject] = []
    if not request.manifests.documents:
        raise invalid(at, "at least one document is required")
    for index, text in enumerate(request.manifests.documents):
        where = f"{at}[{index}]"
        parsed, problems = read_manifest_text(text, where)
        if problems:
            problem = problems[0]
            raise invalid(
                where, f"line {problem.line}: {problem.message}" if problem.line else problem.message
            )
        for document in parsed:
            documents.append(_namespaced(document, request.namespace, where))
    if not any(isinstance(d.data, dict) for d in documents):
        raise invalid(at, "no Kubernetes objects in the documents")
    first = next(d.data for d in documents)
    name = request.name or str(first.get("metadata", {}).get("name") or "")
    if not name:
        name = generated_name(request.namespace, str(first.get("kind", "workload")).lower(), taken)
    check_name(name, prefix + "name")
    if f"{request.namespace}/{name}" in taken:
        raise ServiceError(
            ErrorCode.ALREADY_EXISTS, f"workload {request.namespace}/{name} already exists", prefix + "name"
        )
    context = [_sourced(obj) for obj in [*view.all("Queue").values(), *view.all("PriorityClass").values()]]
    if grouper is not None:
        prepared = grouper([*context, *documents])
        errors = [p for p in prepared.problems if not p.warning]
        if errors:
            raise invalid(
                errors[0].file if errors[0].file.startswith(at) else at, str(errors[0]).split(": ", 1)[-1]
            )
        produced = prepared.documents
    else:
        produced = documents
    ours = [
        d
        for d in produced
        if isinstance(d.data, dict)
        and d.data.get("kind") in ("Pod", "PodGroup")
        and (d.data.get("metadata") or {}).get("namespace") == request.namespace
    ]
    others = [
        d
        for d in produced
        if d.data.get("kind") not in ("Pod", "PodGroup", "Queue", "PriorityClass", "Namespace")
    ]
    if others:
        bad = others[0]
        raise invalid(
            bad.file,
            f"kind {bad.data.get('kind')!r} cannot be submitted (workloads, pods and PodGroups only)",
        )
    loaded = load_sourced_objects(ours)
    if loaded.problems:
        problem = loaded.problems[0]
        raise invalid(problem.file, str(problem).split(": ", 1)[-1])
    members = Members(request.namespace, name)
    submission = Submission(members)
    created = rfc3339(view.now)
    groups = [m for m in loaded.manifests if isinstance(m.obj, PodGroup)]
    pods = [m for m in loaded.manifests if isinstance(m.obj, Pod)]
    if not pods:
        raise invalid(at, "the documents make no pods of scheduler " + SCHEDULER_NAME)
    for manifest in [*groups, *pods]:
        obj = manifest.obj
        if isinstance(obj, PodGroup):
            check_queue(obj.spec.queue, view, manifest.file)
            check_priority_class(obj.spec.priority_class_name, view, manifest.file)
        labels = {**obj.metadata.labels, WORKLOAD_LABEL: name}
        meta = obj.metadata.model_copy(
            update={
                "labels": labels,
                "creation_timestamp": obj.metadata.creation_timestamp or _parse_time(created),
            }
        )
        obj = obj.model_copy(update={"metadata": meta})
        submission.objects.append(obj)
        (members.pod_groups if isinstance(obj, PodGroup) else members.pods).append(obj.metadata.name)
    linked = {p.obj.metadata.annotations.get(POD_GROUP_NAME_ANNOTATION) for p in pods}
    for group in sorted(n for n in linked if n and n not in members.pod_groups):
        if view.get("PodGroup", request.namespace, group) is None:
            raise invalid(
                at, f"pods name PodGroup {group!r}, which neither the documents nor the cluster have"
            )
    return submission


def _namespaced(document: SourcedObject, namespace: str, where: str) -> SourcedObject:
    data = document.data
    if not isinstance(data, dict):
        raise invalid(where, "expected a Kubernetes object (a mapping)")
    kind = str(data.get("kind") or "")
    if kind in MODEL_KINDS and kind not in NAMESPACED_MODEL_KINDS and kind != "Namespace":
        raise invalid(
            f"{where}.kind",
            f"{kind} is a cluster object; only workloads, pods and PodGroups can be submitted",
        )
    data = dict(data)
    meta = dict(data.get("metadata") or {})
    given = meta.get("namespace")
    if given and given != namespace:
        raise invalid(
            f"{where}.metadata.namespace", f"{given!r} differs from the request's namespace {namespace!r}"
        )
    if kind != "Namespace":
        meta["namespace"] = namespace
    data["metadata"] = meta
    return SourcedObject(where, document.line, data)


def _sourced(obj: ApiObject) -> SourcedObject:
    return SourcedObject("<cluster>", 0, obj.model_dump(mode="json", by_alias=True, exclude_none=True))


def _parse_time(text: str) -> Any:
    from datetime import datetime

    return datetime.fromisoformat(text.replace("Z", "+00:00"))
