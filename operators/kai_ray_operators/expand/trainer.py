"""Kubeflow Trainer TrainJob (trainer.kubeflow.org/v1alpha1): the JobSet its runtime describes.

A TrainJob names a runtime in `spec.runtimeRef` (`kind` ClusterTrainingRuntime,
the default, or TrainingRuntime in the TrainJob's namespace). The Trainer
creates a JobSet named after the TrainJob and owned by it, from the runtime's
`spec.template`: its spec, and its labels and annotations under the
TrainJob's `spec.labels` / `spec.annotations`. On the trainer's replicated job
(template label `trainer.kubeflow.org/trainjob-ancestor-step: trainer`; in
runtimes without that label, the one named `node`) it sets `replicas: 1` (as
on the dataset and model initializers) and
`parallelism` = `completions` = the node count (`spec.trainer.numNodes`,
else the runtime's `spec.mlPolicy.numNodes`, else the template's own), and
gives its `node` containers `spec.trainer.resourcesPerNode` (when it has
limits or requests). The JobSet then makes Jobs and pods (`jobset.py`).

A runtime that is not in the manifests is a problem of the TrainJob; a
runtime field the expansion cannot use is a problem of the runtime. Not
modelled: image, command, args and env of the trainer, `podSpecOverrides`,
initializer settings, MPI's launcher-as-node, and the order in which the
Trainer's JobSet starts its jobs.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from kai_ray_operators.errors import GroupingError, InvalidWorkload, NotFound
from kai_ray_operators.expand.model import Child, Expanded, ExpansionContext, ExpansionError, Source
from kai_ray_operators.expand.objects import bounded_int, new_object, required_map, required_name
from kai_ray_operators.fields import (
    KubeObject,
    annotations_of,
    bool_field,
    describe,
    field,
    labels_of,
    map_field,
    name,
    namespace,
    str_field,
)

__all__ = ["RUNTIME_KINDS", "TRAINER_GROUP", "expand_train_job"]

TRAINER_GROUP = "trainer.kubeflow.org"
RUNTIME_API_VERSION = f"{TRAINER_GROUP}/v1alpha1"
CLUSTER_RUNTIME, RUNTIME = "ClusterTrainingRuntime", "TrainingRuntime"
RUNTIME_KINDS = (CLUSTER_RUNTIME, RUNTIME)
ANCESTOR_LABEL = "trainer.kubeflow.org/trainjob-ancestor-step"
TRAINER_ANCESTOR = "trainer"
SINGLE_REPLICA_ANCESTORS = ("dataset-initializer", "model-initializer", TRAINER_ANCESTOR)
"""Replicated jobs the Trainer runs once, whatever the runtime's `replicas`."""
LEGACY_TRAINER_JOB = "node"
NODE_CONTAINER = "node"
JOBSET_TEMPLATE_SPEC = "spec.template.spec"


def _runtime(context: ExpansionContext, train_job: KubeObject) -> KubeObject:
    kind = str_field(train_job, "spec", "runtimeRef", "kind") or CLUSTER_RUNTIME
    if kind not in RUNTIME_KINDS:
        raise InvalidWorkload(
            describe(train_job), f"one of {', '.join(RUNTIME_KINDS)}, got {kind!r}", "spec.runtimeRef.kind"
        )
    group = str_field(train_job, "spec", "runtimeRef", "apiGroup") or TRAINER_GROUP
    if group != TRAINER_GROUP:
        raise InvalidWorkload(
            describe(train_job), f"only {TRAINER_GROUP} runtimes are modelled", "spec.runtimeRef.apiGroup"
        )
    runtime_name = required_name(train_job, "spec", "runtimeRef", "name")
    if kind == CLUSTER_RUNTIME:
        found = [
            obj
            for obj in context.inputs.list(RUNTIME_API_VERSION, kind, None, {})
            if name(obj) == runtime_name
        ]
        if found:
            return found[0]
    else:
        try:
            return context.inputs.get(RUNTIME_API_VERSION, kind, namespace(train_job), runtime_name)
        except NotFound:
            pass
    raise InvalidWorkload(
        describe(train_job), f"runtime {kind} {runtime_name} is not in the manifests", "spec.runtimeRef.name"
    )


def _is_trainer(job: Any, legacy: bool) -> bool:
    if legacy:
        return bool(field(job, "name") == LEGACY_TRAINER_JOB)
    return bool(field(job, "template", "metadata", "labels", ANCESTOR_LABEL) == TRAINER_ANCESTOR)


def _apply_trainer(spec: dict[str, Any], nodes: int | None, resources: Mapping[str, Any] | None) -> None:
    """The Trainer's overrides on the trainer's replicated job, where the runtime's shape allows them."""
    jobs = spec.get("replicatedJobs")
    jobs = jobs if isinstance(jobs, list) else []
    legacy = not any(_is_trainer(job, legacy=False) for job in jobs)
    for job in jobs:
        if not isinstance(job, dict):
            continue
        trainer = _is_trainer(job, legacy)
        if (
            trainer
            or field(job, "template", "metadata", "labels", ANCESTOR_LABEL) in SINGLE_REPLICA_ANCESTORS
        ):
            job["replicas"] = 1
        job_spec = field(job, "template", "spec")
        if not trainer or not isinstance(job_spec, dict):
            continue
        if nodes is not None:
            job_spec["parallelism"] = job_spec["completions"] = nodes
        containers = field(job_spec, "template", "spec", "containers")
        for container in containers if isinstance(containers, list) else []:
            if resources and isinstance(container, dict) and container.get("name") == NODE_CONTAINER:
                container["resources"] = copy.deepcopy(dict(resources))


def expand_train_job(context: ExpansionContext, train_job: KubeObject) -> Expanded:
    runtime = _runtime(context, train_job)
    nodes = bounded_int(train_job, "spec", "trainer", "numNodes", minimum=1)
    resources = map_field(train_job, "spec", "trainer", "resourcesPerNode")
    if resources is not None and not (resources.get("limits") or resources.get("requests")):
        resources = None
    labels = map_field(train_job, "spec", "labels") or {}
    annotations = map_field(train_job, "spec", "annotations") or {}
    try:
        template = required_map(runtime, "spec", "template", what="a JobSet template")
        required_map(runtime, "spec", "template", "spec", what="a JobSet spec")
        if nodes is None:
            nodes = bounded_int(runtime, "spec", "mlPolicy", "numNodes", minimum=1)
    except GroupingError as error:
        raise ExpansionError(runtime, error.field, error.problem) from error
    if bool_field(train_job, "spec", "suspend"):
        return Expanded()
    spec = copy.deepcopy(dict(template["spec"]))
    _apply_trainer(spec, nodes, resources)
    jobset = new_object(
        "jobset.x-k8s.io/v1alpha2",
        "JobSet",
        train_job,
        name(train_job),
        labels={**labels_of(template), **{str(k): str(v) for k, v in labels.items()}},
        annotations={**annotations_of(template), **{str(k): str(v) for k, v in annotations.items()}},
        spec=spec,
    )
    return Expanded([Child(jobset, {"spec": Source(JOBSET_TEMPLATE_SPEC, runtime)})])
