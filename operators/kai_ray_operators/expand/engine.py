"""Running the controllers: every input workload, then every object it creates, down to the pods.

Rules the expanders rely on, kept here once:

- Each input workload is all or nothing: its whole subtree is built first,
  and any problem in it (in the workload, or in a field a child copied from it)
  leaves the workload with one `ExpansionProblem` and no children.
- An object the manifests already hold is not created again: neither one of
  the same kind, namespace and name, nor any object of a kind the parent
  already owns in the manifests (pods of a `kubectl get -o yaml` export carry
  random names, but their owner references name their Job). The existing
  object is expanded on its own if it is a workload.
- Two workloads that would create the same object: the later one is a problem.
- A workload creating more than `objects.MAX_OBJECTS` objects is a problem
  (counts are capped one by one too, so a typo never builds millions of pods).
- Pods pass the mutating admission webhooks that change them on creation
  (LeaderWorkerSet's, which labels group and worker indexes).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kai_ray_operators.errors import GroupingError
from kai_ray_operators.expand import apps, argo, batch, jobset, kubeflow, lws, ray, trainer
from kai_ray_operators.expand.model import (
    Child,
    Expanded,
    Expander,
    Expansion,
    ExpansionContext,
    ExpansionError,
    ExpansionProblem,
)
from kai_ray_operators.expand.objects import MAX_OBJECTS, ObjectKey, object_key
from kai_ray_operators.fields import GroupVersionKind, KubeObject, describe, field, name, namespace
from kai_ray_operators.reader import InMemoryReader

__all__ = ["EXPANDERS", "expand_workloads"]


def _table(entries: list[tuple[str, tuple[str, ...], str, Expander]]) -> dict[GroupVersionKind, Expander]:
    return {
        GroupVersionKind(group, version, kind): expander
        for group, versions, kind, expander in entries
        for version in versions
    }


EXPANDERS: Mapping[GroupVersionKind, Expander] = _table(
    [
        ("ray.io", ("v1", "v1alpha1"), "RayCluster", ray.expand_ray_cluster),
        ("ray.io", ("v1", "v1alpha1"), "RayJob", ray.expand_ray_job),
        ("ray.io", ("v1", "v1alpha1"), "RayService", ray.expand_ray_service),
        ("kubeflow.org", ("v1",), "PyTorchJob", kubeflow.expand_pytorch_job),
        ("kubeflow.org", ("v1",), "TFJob", kubeflow.expand_tf_job),
        ("kubeflow.org", ("v1",), "XGBoostJob", kubeflow.expand_xgboost_job),
        ("kubeflow.org", ("v1",), "JAXJob", kubeflow.expand_jax_job),
        ("kubeflow.org", ("v1",), "MPIJob", kubeflow.expand_mpi_job_v1),
        ("kubeflow.org", ("v2beta1",), "MPIJob", kubeflow.expand_mpi_job_v2),
        ("trainer.kubeflow.org", ("v1alpha1",), "TrainJob", trainer.expand_train_job),
        ("batch", ("v1",), "Job", batch.expand_job),
        ("batch", ("v1",), "CronJob", batch.expand_cron_job),
        ("apps", ("v1",), "Deployment", apps.expand_deployment),
        ("apps", ("v1",), "ReplicaSet", apps.expand_replica_set),
        ("apps", ("v1",), "StatefulSet", apps.expand_stateful_set),
        ("leaderworkerset.x-k8s.io", ("v1",), "LeaderWorkerSet", lws.expand_leader_worker_set),
        ("jobset.x-k8s.io", ("v1alpha2",), "JobSet", jobset.expand_jobset),
        ("argoproj.io", ("v1alpha1",), "Workflow", argo.expand_workflow),
    ]
)
"""The controllers modelled, by the exact type they reconcile."""

_SUPPORTED: Mapping[tuple[str, str], list[str]] = {
    (gvk.group, gvk.kind): sorted(
        g.api_version for g in EXPANDERS if (g.group, g.kind) == (gvk.group, gvk.kind)
    )
    for gvk in EXPANDERS
}
"""Workload types by group and kind, with the versions modelled: another version is a problem."""

_READ_ONLY: frozenset[tuple[str, str]] = frozenset(
    (trainer.TRAINER_GROUP, kind) for kind in trainer.RUNTIME_KINDS
)
"""Inputs a controller reads but nothing reconciles into pods: consumed, never expanded."""

POD_WEBHOOKS: tuple[Callable[[dict[str, Any]], None], ...] = (lws.admit_pod,)
"""Mutating admission webhooks that change pods as the API server creates them."""


def expand_workloads(
    objects: Sequence[Mapping[str, Any]], scheduler_name: str = "kai-scheduler"
) -> Expansion:
    """What the controllers of `objects` create; see the package docstring for the contract."""
    inputs = [obj for obj in objects if isinstance(obj, Mapping)]
    existing = {object_key(obj) for obj in inputs}
    context = ExpansionContext(scheduler_name, InMemoryReader(inputs), _owned_inputs(inputs))
    expansion = Expansion()
    made: dict[ObjectKey, str] = {}
    for obj in inputs:
        gvk = GroupVersionKind.of(obj)
        if (gvk.group, gvk.kind) not in _SUPPORTED and (gvk.group, gvk.kind) not in _READ_ONLY:
            continue
        expansion.consumed.add(object_key(obj))
        if (gvk.group, gvk.kind) in _READ_ONLY:
            continue
        try:
            expanded, subtree = _expand_input(context, obj, existing)
            clash = next((child for child in subtree if object_key(child) in made), None)
            if clash is not None:
                raise ExpansionError(
                    obj, None, f"{describe(clash)} would also be created by {made[object_key(clash)]}"
                )
        except ExpansionError as error:
            expansion.problems.append(_problem(error, obj))
            continue
        made.update((object_key(child), describe(obj)) for child in subtree)
        expansion.children.extend(subtree)
        if expanded.status is not None:
            expansion.updated.append(expanded.status)
    return expansion


def _owned_inputs(inputs: Sequence[KubeObject]) -> dict[ObjectKey, tuple[KubeObject, ...]]:
    owned: defaultdict[ObjectKey, list[KubeObject]] = defaultdict(list)
    for obj in inputs:
        references = field(obj, "metadata", "ownerReferences")
        for ref in references if isinstance(references, list) else []:
            if isinstance(ref, Mapping):
                owner = GroupVersionKind.of(ref)
                owned[(owner.group, owner.kind, namespace(obj), str(ref.get("name") or ""))].append(obj)
    return {key: tuple(objects) for key, objects in owned.items()}


def _expand_input(
    context: ExpansionContext, obj: KubeObject, existing: set[ObjectKey]
) -> tuple[Expanded, list[dict[str, Any]]]:
    gvk = GroupVersionKind.of(obj)
    if gvk not in EXPANDERS:
        versions = ", ".join(_SUPPORTED[(gvk.group, gvk.kind)])
        raise ExpansionError(obj, "apiVersion", f"{gvk.api_version} is not modelled; supported: {versions}")
    if not name(obj):
        raise ExpansionError(
            obj, "metadata.name", "a name is required (generateName needs an API server to pick one)"
        )
    return _expand(context, obj, existing)


def _expand(
    context: ExpansionContext, obj: KubeObject, existing: set[ObjectKey]
) -> tuple[Expanded, list[dict[str, Any]]]:
    """What `obj`'s controller creates, then what those create, parents first."""
    try:
        expanded = EXPANDERS[GroupVersionKind.of(obj)](context, obj)
    except GroupingError as error:
        raise ExpansionError(obj, error.field, error.problem) from error
    already_owned = {(gvk.group, gvk.kind) for gvk in map(GroupVersionKind.of, context.owned(obj))}
    subtree: list[dict[str, Any]] = []
    for child in expanded.children:
        key = object_key(child.obj)
        if key in existing or key[:2] in already_owned:
            continue
        if key[1] == "Pod":
            for webhook in POD_WEBHOOKS:
                webhook(child.obj)
        subtree.append(child.obj)
        if GroupVersionKind.of(child.obj) in EXPANDERS:
            try:
                subtree += _expand(context, child.obj, existing)[1]
            except ExpansionError as error:
                raise _blame(error, child, obj) from error
        if len(subtree) > MAX_OBJECTS:
            raise ExpansionError(obj, None, f"creates more than the {MAX_OBJECTS} objects simulated")
    return expanded, subtree


def _within(path: str, prefix: str) -> bool:
    return path == prefix or path.startswith((f"{prefix}.", f"{prefix}["))


def _blame(error: ExpansionError, child: Child, parent: KubeObject) -> ExpansionError:
    """The child's error as one about the field it was copied from (or about the parent, naming the child)."""
    if error.obj is not child.obj:
        return error  # already about an object the user wrote
    if error.field is not None:
        for prefix in sorted(child.sources, key=len, reverse=True):
            if _within(error.field, prefix):
                source = child.sources[prefix]
                return ExpansionError(
                    source.obj or parent, source.path + error.field[len(prefix) :], error.message
                )
    return ExpansionError(parent, None, str(error))


def _problem(error: ExpansionError, workload: KubeObject) -> ExpansionProblem:
    message = error.message
    if error.obj is not workload:
        message = f"{message} (read for {describe(workload)}, which creates nothing)"
    return ExpansionProblem(
        str(error.obj.get("kind") or ""),
        namespace(error.obj),
        name(error.obj),
        error.field or "",
        message,
    )
