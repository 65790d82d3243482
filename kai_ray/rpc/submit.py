"""SubmitWorkload's request → the PodGroup and pods it creates, validated before anything exists.

Every check names the request field at fault.  Choices:
- An unknown queue, a parent (non-leaf) queue and an unknown priority class are
  FAILED_PRECONDITION, not INVALID_ARGUMENT: the request is well formed and would succeed once
  an administrator creates that queue or class (gRPC: "rejected because the system is not in a
  state required"); the field is still named.
- A name already used by a live workload is ALREADY_EXISTS; a cancelled workload's name is free.
- Pods are named `NAME-PODSET-INDEX` (`NAME-INDEX` for an unnamed pod set); the PodGroup is NAME.
"""

from __future__ import annotations

import math
from collections.abc import Container
from typing import Any

from pydantic import ValidationError

from kai_ray.api import (
    ApiObject,
    Manifest,
    Pod,
    PodGroup,
    PriorityClass,
    Queue,
    Topology,
    format_path,
    parse_quantity,
)
from kai_ray.api.constants import (
    GPU_FRACTION,
    GPU_MEMORY,
    NON_PREEMPTIBLE,
    POD_GROUP_NAME_ANNOTATION,
    PODGROUP_API_VERSION,
    PREEMPTIBLE,
    QUEUE_LABEL,
    RESOURCE_GPU,
    SCHEDULER_NAME,
    SUBGROUP_LABEL,
)
from kai_ray.api.quantity import QuantityError
from kai_ray.convert import JobContext, job_problems
from kai_ray.rpc.backend import BackendView, Grouper
from kai_ray.rpc.caller import Caller
from kai_ray.rpc.errors import ErrorCode, ServiceError
from kai_ray.rpc.objects import WORKLOAD_LABEL, rfc3339
from kai_ray.rpc.submission import (
    MAX_PODS,
    Submission,
    check_name,
    check_priority_class,
    check_queue,
    generated_name,
    invalid,
)
from kai_ray.rpc.submit_manifests import from_manifests
from kai_ray.rpc.workloads import Members
from kai_ray.v1 import scheduler_pb2 as pb

__all__ = ["build_submission"]

_OPERATORS = ("", "Equal", "Exists")
_EFFECTS = ("", "NoSchedule", "PreferNoSchedule", "NoExecute")
_MIB = 2**20


def build_submission(
    request: pb.SubmitWorkloadRequest,
    caller: Caller,
    view: BackendView,
    *,
    grouper: Grouper | None = None,
    taken: Container[str] = (),
    prefix: str = "",
) -> Submission:
    """Validate the request against the cluster and build its objects; raises ServiceError.

    `taken`: workload ids in use.  `prefix` goes before every field path (`workloads[2].` for a
    what-if's hypothetical workloads).
    """
    if not request.namespace:
        raise invalid(prefix + "namespace", "required")
    check_name(request.namespace, prefix + "namespace")
    caller.require(request.namespace)
    source = request.WhichOneof("source")
    if source is None:
        raise invalid(prefix + "source", "give a workload or manifests")
    if request.name:
        check_name(request.name, prefix + "name")
    if source == "workload":
        submission = _from_spec(request, view, taken, prefix)
    else:
        submission = from_manifests(request, view, grouper, taken, prefix)
    _check_converts(submission, view, prefix + ("workload" if source == "workload" else "manifests"))
    return submission


# ---------------------------------------------------------------------------------- workload spec


def _from_spec(
    request: pb.SubmitWorkloadRequest, view: BackendView, taken: Container[str], prefix: str
) -> Submission:
    spec = request.workload
    at = prefix + "workload"
    if not spec.pod_sets:
        raise invalid(f"{at}.pod_sets", "at least one pod set is required")
    name = request.name or generated_name(request.namespace, spec.pod_sets[0].name or "workload", taken)
    if f"{request.namespace}/{name}" in taken:
        raise ServiceError(
            ErrorCode.ALREADY_EXISTS, f"workload {request.namespace}/{name} already exists", prefix + "name"
        )
    check_queue(spec.queue, view, f"{at}.queue")
    check_priority_class(spec.priority_class, view, f"{at}.priority_class")
    leaves = _check_sub_groups(spec, at)
    _check_topology(spec.topology, view, f"{at}.topology")
    for index, group in enumerate(spec.sub_groups):
        _check_topology(group.topology, view, f"{at}.sub_groups[{index}].topology")
    pods_per_set = _check_pod_sets(spec, leaves, at)
    total = sum(pods_per_set)
    if spec.min_available < 0:
        raise invalid(f"{at}.min_available", f"must be >= 0, got {spec.min_available}")
    if spec.sub_groups and spec.min_available:
        raise invalid(f"{at}.min_available", "with sub_groups, give min_available per SubGroup")
    if spec.min_available > total:
        raise invalid(f"{at}.min_available", f"{spec.min_available} required, {total} exist")
    members = Members(request.namespace, name)
    submission = Submission(members, checked=[])
    created = rfc3339(view.now)
    submission.objects.append(_pod_group(request, name, total, created))
    submission.checked = [submission.objects[0]]
    members.pod_groups.append(name)
    for index, pod_set in enumerate(spec.pod_sets):
        first: ApiObject | None = None
        for replica in range(pod_set.replicas):
            pod_name = f"{name}-{pod_set.name}-{replica}" if pod_set.name else f"{name}-{replica}"
            if first is None:
                first = _pod(request, name, pod_name, pod_set, created, f"{at}.pod_sets[{index}]")
                submission.objects.append(first)
                submission.checked.append(first)
            else:
                submission.objects.append(_renamed(first, pod_name))
            members.pods.append(pod_name)
    return submission


def _renamed(pod: ApiObject, name: str) -> ApiObject:
    """Another replica of a validated pod: only the name differs, and no rule of the Pod model
    reads the name, so copying skips validating the same template once per replica (it was a
    third of a submit's time).  The copies share their unchanged parts, which is safe because
    objects are never mutated."""
    return pod.model_copy(update={"metadata": pod.metadata.model_copy(update={"name": name})})


def _check_topology(constraint: pb.TopologyConstraint, view: BackendView, at: str) -> None:
    """A constraint the scheduler can act on, refused now otherwise: a topology and a level go
    together, and the topology must exist and have that level (by node label or alias). The
    scheduler would keep such a workload pending for good (KAI does the same), with nothing to
    tell the client at submit."""
    levels = {"required_level": constraint.required_level, "preferred_level": constraint.preferred_level}
    if not constraint.topology:
        for field_name, level in levels.items():
            if level:
                raise invalid(f"{at}.topology", f"required with {field_name} {level!r}")
        return
    if not any(levels.values()):
        raise invalid(f"{at}.required_level", "a topology needs a required_level or a preferred_level")
    topologies = {name: obj for (_, name), obj in view.all("Topology").items() if isinstance(obj, Topology)}
    topology = topologies.get(constraint.topology)
    if topology is None:
        known = ", ".join(sorted(topologies)) or "none"
        raise ServiceError(
            ErrorCode.FAILED_PRECONDITION,
            f"topology {constraint.topology!r} does not exist (topologies: {known})",
            f"{at}.topology",
        )
    names = [name for level in topology.spec.levels for name in (level.node_label, level.alias) if name]
    for field_name, level in levels.items():
        if level and level not in names:
            raise ServiceError(
                ErrorCode.FAILED_PRECONDITION,
                f"topology {constraint.topology!r} has no level {level!r} (levels: {', '.join(names)})",
                f"{at}.{field_name}",
            )


def _constraint_body(constraint: pb.TopologyConstraint) -> dict[str, str] | None:
    """The PodGroup's `topologyConstraint` for a checked constraint; None for none."""
    if not constraint.topology:
        return None
    body = {"topology": constraint.topology}
    if constraint.required_level:
        body["requiredTopologyLevel"] = constraint.required_level
    if constraint.preferred_level:
        body["preferredTopologyLevel"] = constraint.preferred_level
    return body


def _check_sub_groups(spec: pb.WorkloadSpec, at: str) -> set[str]:
    """SubGroup names unique, parents existing; returns the leaves (where pods go)."""
    names: list[str] = []
    for index, group in enumerate(spec.sub_groups):
        check_name(group.name, f"{at}.sub_groups[{index}].name")
        if group.name in names:
            raise invalid(f"{at}.sub_groups[{index}].name", f"duplicate SubGroup {group.name!r}")
        if group.min_available < 0:
            raise invalid(
                f"{at}.sub_groups[{index}].min_available", f"must be >= 0, got {group.min_available}"
            )
        names.append(group.name)
    for index, group in enumerate(spec.sub_groups):
        if group.parent and group.parent not in names:
            raise invalid(f"{at}.sub_groups[{index}].parent", f"SubGroup {group.parent!r} does not exist")
        if group.parent == group.name:
            raise invalid(f"{at}.sub_groups[{index}].parent", "a SubGroup cannot be its own parent")
    parents = {g.parent for g in spec.sub_groups if g.parent}
    return {n for n in names if n not in parents}


def _check_pod_sets(spec: pb.WorkloadSpec, leaves: set[str], at: str) -> list[int]:
    seen: set[str] = set()
    counts: list[int] = []
    per_leaf: dict[str, int] = {}
    for index, pod_set in enumerate(spec.pod_sets):
        here = f"{at}.pod_sets[{index}]"
        if pod_set.name:
            check_name(pod_set.name, f"{here}.name")
        if pod_set.name in seen:
            raise invalid(
                f"{here}.name",
                f"duplicate pod set name {pod_set.name!r}"
                if pod_set.name
                else "only one pod set may be unnamed",
            )
        seen.add(pod_set.name)
        if pod_set.replicas < 1:
            raise invalid(f"{here}.replicas", f"must be >= 1, got {pod_set.replicas}")
        if spec.sub_groups:
            if pod_set.sub_group not in leaves:
                raise invalid(
                    f"{here}.sub_group",
                    f"must name a leaf SubGroup ({', '.join(sorted(leaves))}), got {pod_set.sub_group!r}",
                )
            per_leaf[pod_set.sub_group] = per_leaf.get(pod_set.sub_group, 0) + pod_set.replicas
        elif pod_set.sub_group:
            raise invalid(
                f"{here}.sub_group",
                f"SubGroup {pod_set.sub_group!r} does not exist (the workload has no sub_groups)",
            )
        _check_template(pod_set.template, f"{here}.template")
        counts.append(pod_set.replicas)
    if sum(counts) > MAX_PODS:
        raise ServiceError(
            ErrorCode.RESOURCE_EXHAUSTED,
            f"{sum(counts)} pods; at most {MAX_PODS} per workload",
            f"{at}.pod_sets",
        )
    for index, group in enumerate(spec.sub_groups):
        if group.name in leaves and group.min_available > per_leaf.get(group.name, 0):
            exist = per_leaf.get(group.name, 0)
            raise invalid(
                f"{at}.sub_groups[{index}].min_available", f"{group.min_available} required, {exist} exist"
            )
    return counts


def _check_template(template: pb.PodTemplate, at: str) -> None:
    for resource, text in sorted(template.requests.items()):
        where = f'{at}.requests["{resource}"]'
        try:
            amount = parse_quantity(text)
        except QuantityError:
            raise invalid(where, f"not a quantity: {text!r}") from None
        if amount < 0 or not math.isfinite(amount):
            raise invalid(where, f"must not be negative, got {text!r}")
    fraction = template.gpu_fraction
    if fraction:
        if not 0 < fraction < 1 or not math.isfinite(fraction):
            raise invalid(f"{at}.gpu_fraction", f"must be in (0, 1), got {fraction:g}")
        if _whole_gpus(template):
            raise invalid(f"{at}.gpu_fraction", f'excludes requests["{RESOURCE_GPU}"]')
        if template.gpu_memory:
            raise invalid(f"{at}.gpu_fraction", "excludes gpu_memory")
    if template.gpu_memory:
        try:
            memory = parse_quantity(template.gpu_memory)
        except QuantityError:
            raise invalid(f"{at}.gpu_memory", f"not a quantity: {template.gpu_memory!r}") from None
        if memory <= 0:
            raise invalid(f"{at}.gpu_memory", f"must be positive, got {template.gpu_memory!r}")
        if _whole_gpus(template):
            raise invalid(f"{at}.gpu_memory", f'excludes requests["{RESOURCE_GPU}"]')
    for index, toleration in enumerate(template.tolerations):
        if toleration.operator not in _OPERATORS:
            raise invalid(
                f"{at}.tolerations[{index}].operator", f"must be Equal or Exists, got {toleration.operator!r}"
            )
        if toleration.effect not in _EFFECTS:
            raise invalid(
                f"{at}.tolerations[{index}].effect",
                f"must be one of {', '.join(e for e in _EFFECTS if e)}, got {toleration.effect!r}",
            )


def _whole_gpus(template: pb.PodTemplate) -> float:
    text = template.requests.get(RESOURCE_GPU)
    return parse_quantity(text) if text else 0.0


def _pod_group(request: pb.SubmitWorkloadRequest, name: str, total: int, created: str) -> ApiObject:
    spec = request.workload
    body: dict[str, Any] = {"queue": spec.queue}
    if spec.priority_class:
        body["priorityClassName"] = spec.priority_class
    if spec.preemptibility != pb.PREEMPTIBILITY_UNSPECIFIED:
        body["preemptibility"] = PREEMPTIBLE if spec.preemptibility == pb.PREEMPTIBLE else NON_PREEMPTIBLE
    if spec.sub_groups:
        parents = {g.parent for g in spec.sub_groups if g.parent}
        sub_groups = []
        for group in spec.sub_groups:
            entry: dict[str, Any] = {"name": group.name}
            if group.parent:
                entry["parent"] = group.parent
            group_constraint = _constraint_body(group.topology)
            if group_constraint is not None:
                entry["topologyConstraint"] = group_constraint
            if group.name in parents:
                if group.min_available:
                    entry["minSubGroup"] = group.min_available
            else:
                pods = sum(p.replicas for p in spec.pod_sets if p.sub_group == group.name)
                entry["minMember"] = group.min_available or pods
            sub_groups.append(entry)
        body["subGroups"] = sub_groups
    else:
        body["minMember"] = spec.min_available or total
    constraint = _constraint_body(spec.topology)
    if constraint is not None:
        body["topologyConstraint"] = constraint
    return PodGroup.model_validate(
        {
            "apiVersion": PODGROUP_API_VERSION,
            "kind": "PodGroup",
            "metadata": {
                "name": name,
                "namespace": request.namespace,
                "labels": {WORKLOAD_LABEL: name, QUEUE_LABEL: spec.queue},
                "creationTimestamp": created,
            },
            "spec": body,
        }
    )


def _pod(
    request: pb.SubmitWorkloadRequest, workload: str, name: str, pod_set: pb.PodSet, created: str, at: str
) -> ApiObject:
    spec, template = request.workload, pod_set.template
    labels = {**template.labels, QUEUE_LABEL: spec.queue, WORKLOAD_LABEL: workload}
    if pod_set.sub_group:
        labels[SUBGROUP_LABEL] = pod_set.sub_group
    annotations = {**template.annotations, POD_GROUP_NAME_ANNOTATION: workload}
    if template.gpu_fraction:
        annotations[GPU_FRACTION] = repr(template.gpu_fraction)
    if template.gpu_memory:
        annotations[GPU_MEMORY] = str(math.ceil(parse_quantity(template.gpu_memory) / _MIB))
    container: dict[str, Any] = {"name": "main", "resources": {"requests": dict(template.requests)}}
    if template.image:
        container["image"] = template.image
    pod_spec: dict[str, Any] = {
        "schedulerName": SCHEDULER_NAME,
        "containers": [container],
        "nodeSelector": dict(template.node_selector),
        "tolerations": [
            {"key": t.key, "operator": t.operator or "Equal", "value": t.value, "effect": t.effect}
            for t in template.tolerations
        ],
    }
    if spec.priority_class:
        pod_spec["priorityClassName"] = spec.priority_class
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": request.namespace,
            "labels": labels,
            "annotations": annotations,
            "creationTimestamp": created,
        },
        "spec": pod_spec,
        "status": {"phase": "Pending"},
    }
    try:
        return Pod.model_validate(body)
    except ValidationError as error:
        raise invalid(f"{at}.template", str(error.errors()[0]["msg"])) from None


# ---------------------------------------------------------------------------------- final check


def _check_converts(submission: Submission, view: BackendView, at: str) -> None:
    """Convert the new objects with the cluster's queues and classes: whatever the scheduler would
    refuse (a SubGroup tree, an annotation) is refused now, before anything is created."""
    checked = submission.objects if submission.checked is None else submission.checked
    manifests: list[Manifest[ApiObject]] = [Manifest(at, 0, i, obj) for i, obj in enumerate(checked)]
    problems = job_problems(manifests, _job_context.of(view), now=view.now)
    mine = [p for p in problems if not p.warning]
    if mine:
        problem = mine[0]
        where = (
            f"{at} ({problem.kind} {problem.name}: {format_path((problem.field,)) if problem.field else ''})"
        )
        raise invalid(where, problem.message)


class _JobContextMemo:
    """The context of a view's Queue and PriorityClass tables, rebuilt only when either table is
    another object: the simulated cluster hands out the same table until it changes, so a burst
    of submits converts the queue tree once (it was a sixth of a submit's time).  One entry,
    replaced whole (one assignment), so concurrent callers at worst build it twice."""

    def __init__(self) -> None:
        self._last: tuple[object, object, JobContext] | None = None

    def of(self, view: BackendView) -> JobContext:
        queues, classes = view.all("Queue"), view.all("PriorityClass")
        last = self._last
        if last is not None and last[0] is queues and last[1] is classes:
            return last[2]
        context = JobContext.of(
            [q for q in queues.values() if isinstance(q, Queue)],
            [c for c in classes.values() if isinstance(c, PriorityClass)],
        )
        self._last = (queues, classes, context)
        return context


_job_context = _JobContextMemo()
