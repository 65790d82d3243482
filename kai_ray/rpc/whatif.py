"""WhatIf: one cycle on a copy of the current objects with hypothetical workloads and nodes.

The copy is built from the backend's view (objects are never mutated, so a shallow copy is a
true copy); hypothetical workloads go through the same validation and object building as a
submit; the plan is applied to the copy only, to report each workload's state after the cycle.
Removing a node makes the pods on it pending again, as its controller would recreate them.

Pipelined pods (placed on resources that pods being evicted or released still hold) are reported
apart from binds: they bind in a later cycle, not this one, and stay pending on the copy as they
would on the cluster.  A workload they leave PENDING says so in its reason, "Pipelined", since the
pending reasons of the plan cover only pods the cycle could not place.
"""

from __future__ import annotations

from collections.abc import Sequence

from kai_ray.api import ApiObject, Node, Pod, parse_quantity
from kai_ray.api.constants import HOSTNAME_LABEL, RESOURCE_PODS
from kai_ray.api.quantity import QuantityError
from kai_ray.collector import collection_paused
from kai_ray.convert import cluster_from_manifest_set
from kai_ray.engine.cycle import open_session, run_actions
from kai_ray.model.snapshot import compile_snapshot
from kai_ray.rpc.backend import Backend, BackendView, CycleRecord, Grouper, NamespacedName, object_key
from kai_ray.rpc.caller import Caller
from kai_ray.rpc.errors import ErrorCode, ServiceError
from kai_ray.rpc.objects import apply_plan, manifest_set, priority_values, unbound_pod
from kai_ray.rpc.submit import build_submission
from kai_ray.rpc.workloads import Members, WorkloadTracker, derive
from kai_ray.v1 import scheduler_pb2 as pb

__all__ = ["MAX_HYPOTHETICAL_NODES", "what_if"]

MAX_HYPOTHETICAL_NODES = 10_000


def what_if(
    request: pb.WhatIfRequest,
    caller: Caller,
    backend: Backend,
    tracker: WorkloadTracker,
    grouper: Grouper | None,
) -> pb.WhatIfResponse:
    view = backend.view()
    kinds = {kind: dict(by_name) for kind, by_name in view.kinds.items()}
    members: dict[str, Members] = {}
    for workload_id in (w.id for w in tracker.all() if w.state != pb.CANCELLED):
        found = tracker.members(workload_id)
        if found is not None:
            members[workload_id] = found
    taken = set(members)
    for index, submit in enumerate(request.workloads):
        submission = build_submission(
            submit, caller, view, grouper=grouper, taken=taken, prefix=f"workloads[{index}]."
        )
        for obj in submission.objects:
            key = object_key(obj)
            if (key[1], key[2]) in kinds.get(key[0], {}):
                raise ServiceError(
                    ErrorCode.ALREADY_EXISTS,
                    f"{key[0]} {key[1]}/{key[2]} already exists",
                    f"workloads[{index}].name",
                )
            kinds.setdefault(key[0], {})[(key[1], key[2])] = obj
        members[submission.members.id] = submission.members
        taken.add(submission.members.id)
    nodes = kinds.setdefault("Node", {})
    for obj in _new_nodes(request.add_nodes, nodes):
        nodes[("", obj.metadata.name)] = obj
    _remove_nodes(request.remove_nodes, kinds)
    state, problems = cluster_from_manifest_set(manifest_set(kinds), now=view.now)
    with collection_paused():
        session = open_session(compile_snapshot(state), backend.config, None)
        plan = run_actions(session)
    pods: dict[NamespacedName, Pod] = {k: v for k, v in kinds.get("Pod", {}).items() if isinstance(v, Pod)}
    apply_plan(pods, plan)
    kinds["Pod"] = dict(pods)
    number = view.last_cycle.number + 1 if view.last_cycle else 1
    after = BackendView(
        view.generation, kinds, CycleRecord(number, view.now, state, session, plan, problems), view.now
    )
    owners = {f"{m.namespace}/{g}": wid for wid, m in members.items() for g in m.pod_groups}
    out = pb.WhatIfResponse()
    for bind in plan.binds:
        if caller.may_use(_namespace(bind.job)):
            out.binds.add(workload=owners.get(bind.job, bind.job), pod=bind.task, node=bind.node)
    for eviction in plan.evictions:
        if caller.may_use(_namespace(eviction.job)):
            preemptor = eviction.reason.preemptor or ""
            if not caller.may_use(_namespace(preemptor)):
                preemptor = ""  # as Explain: a workload in a namespace the caller may not see is not named
            out.evictions.add(
                workload=owners.get(eviction.job, eviction.job),
                pod=eviction.task,
                node=eviction.node or "",
                cause=eviction.reason.cause.value,
                for_workload=owners.get(preemptor, preemptor),
            )
    for pipelined in plan.pipelined:
        if caller.may_use(_namespace(pipelined.job)):
            out.pipelined.add(
                workload=owners.get(pipelined.job, pipelined.job), pod=pipelined.task, node=pipelined.node
            )
    priorities = priority_values(after)
    evicted = {owners[e.job]: e.reason for e in plan.evictions if e.job in owners}
    for workload_id in sorted(members):
        if caller.may_use(members[workload_id].namespace):
            workload = derive(members[workload_id], after, priorities, evicted.get(workload_id), view.now)
            out.workloads.append(workload)
    return out


def _namespace(job_key: str) -> str:
    return job_key.partition("/")[0]


def _new_nodes(templates: Sequence[pb.NodeTemplate], existing: dict[NamespacedName, ApiObject]) -> list[Node]:
    nodes: list[Node] = []
    for index, template in enumerate(templates):
        at = f"add_nodes[{index}]"
        if not template.name:
            raise ServiceError(ErrorCode.INVALID_ARGUMENT, "required", f"{at}.name")
        if template.count < 0:
            raise ServiceError(
                ErrorCode.INVALID_ARGUMENT, f"must be >= 0, got {template.count}", f"{at}.count"
            )
        count = max(template.count, 1)
        if len(nodes) + count > MAX_HYPOTHETICAL_NODES:
            raise ServiceError(
                ErrorCode.RESOURCE_EXHAUSTED,
                f"at most {MAX_HYPOTHETICAL_NODES} hypothetical nodes",
                f"{at}.count",
            )
        allocatable: dict[str, str] = {}
        for resource, text in sorted(template.allocatable.items()):
            try:
                amount = parse_quantity(text)
            except QuantityError:
                raise ServiceError(
                    ErrorCode.INVALID_ARGUMENT, f"not a quantity: {text!r}", f'{at}.allocatable["{resource}"]'
                ) from None
            if amount < 0:
                raise ServiceError(
                    ErrorCode.INVALID_ARGUMENT,
                    f"must not be negative, got {text!r}",
                    f'{at}.allocatable["{resource}"]',
                )
            allocatable[resource] = text
        allocatable.setdefault(RESOURCE_PODS, "110")
        names = [template.name] if template.count <= 1 else [f"{template.name}-{i}" for i in range(count)]
        for name in names:
            if ("", name) in existing or any(n.metadata.name == name for n in nodes):
                raise ServiceError(ErrorCode.ALREADY_EXISTS, f"node {name!r} already exists", f"{at}.name")
            nodes.append(
                Node.model_validate(
                    {
                        "apiVersion": "v1",
                        "kind": "Node",
                        "metadata": {"name": name, "labels": {HOSTNAME_LABEL: name, **template.labels}},
                        "status": {
                            "allocatable": allocatable,
                            "capacity": allocatable,
                            "conditions": [{"type": "Ready", "status": "True"}],
                        },
                    }
                )
            )
    return nodes


def _remove_nodes(names: Sequence[str], kinds: dict[str, dict[NamespacedName, ApiObject]]) -> None:
    nodes = kinds.get("Node", {})
    gone: set[str] = set()
    for index, name in enumerate(names):
        if ("", name) not in nodes:
            raise ServiceError(ErrorCode.NOT_FOUND, f"node {name!r} does not exist", f"remove_nodes[{index}]")
        nodes.pop(("", name))
        gone.add(name)
    pods = kinds.get("Pod", {})
    for key, pod in list(pods.items()):
        if isinstance(pod, Pod) and pod.spec.node_name in gone:
            pods[key] = unbound_pod(pod)
