"""Kubeflow training-operator jobs (kubeflow.org/v1) and the mpi-operator's MPIJob (kubeflow.org/v2beta1).

The training-operator creates, for each replica type of the job's replica map
(in the order written) and each index below its `replicas` (default 1), a pod
`<job>-<type in lower case>-<index>` owned by the job, labelled with
`training.kubeflow.org/job-name`, `…/replica-type` (lower case) and
`…/replica-index`; the pod of the master role also gets `…/job-role`:
`master` for PyTorch's and XGBoost's Master, TensorFlow's Chief or Master
(worker 0 when there is neither), JAX's index 0; `launcher` for an MPIJob
v1's Launcher.

The mpi-operator (v2beta1) creates the workers the same way (Worker replicas
default 0, `job-role: worker`) and the launcher as a batch Job
`<job>-launcher`, whose pod template carries `job-role: launcher` (Pod → Job →
MPIJob). With `launcherCreationPolicy: WaitForWorkersReady` the operator
creates that Job only once the workers are ready; here it exists from the
start, so the MPI grouper sees the launcher and counts it (the gang of the
steady state, workers plus launcher).

Refused as the operators' webhooks refuse them: a replica map that is missing
or empty, a required type missing (XGBoost's Master, MPI's Launcher), a type
that allows one replica (PyTorch/XGBoost Master, TensorFlow Chief/Master, MPI
Launcher) with more, a negative count, a replica without a pod template. A
suspended job (`runPolicy.suspend`) creates nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from kai_ray_operators.errors import InvalidWorkload
from kai_ray_operators.expand.model import Child, Expanded, ExpansionContext, Source
from kai_ray_operators.expand.objects import (
    count,
    new_object,
    new_pod,
    pod_template,
    required_map,
    template_with,
)
from kai_ray_operators.fields import KubeObject, Step, bool_field, describe, field_path, name
from kai_ray_operators.plugins.mpi import JOB_NAME_LABEL, JOB_ROLE_LABEL, LAUNCHER, WORKER
from kai_ray_operators.plugins.pytorch import REPLICA_INDEX_LABEL, REPLICA_TYPE_LABEL

__all__ = [
    "expand_jax_job",
    "expand_mpi_job_v1",
    "expand_mpi_job_v2",
    "expand_pytorch_job",
    "expand_tf_job",
    "expand_xgboost_job",
]

MASTER_ROLE, LAUNCHER_ROLE, WORKER_ROLE = "master", "launcher", "worker"

RoleOf = Callable[[Mapping[str, int], str, int], str | None]
"""(replicas by type, replica type, index) -> the pod's `job-role`, if it has one."""


@dataclass(frozen=True)
class _Operator:
    """What differs between the job kinds: where the replicas are and which of them is special."""

    replica_specs: str
    role_of: RoleOf
    required: tuple[str, ...] = ()
    single: tuple[str, ...] = ()
    """Replica types that allow at most one replica."""
    default_replicas: Callable[[str], int] = lambda replica_type: 1


def _master_types(*types: str) -> RoleOf:
    return lambda replicas, replica_type, index: MASTER_ROLE if replica_type in types else None


def _tf_role(replicas: Mapping[str, int], replica_type: str, index: int) -> str | None:
    if "Chief" in replicas or "Master" in replicas:
        return MASTER_ROLE if replica_type in ("Chief", "Master") else None
    return MASTER_ROLE if replica_type == WORKER and index == 0 else None


PYTORCH = _Operator("pytorchReplicaSpecs", _master_types("Master"), single=("Master",))
TENSORFLOW = _Operator("tfReplicaSpecs", _tf_role, single=("Chief", "Master"))
XGBOOST = _Operator("xgbReplicaSpecs", _master_types("Master"), required=("Master",), single=("Master",))
JAX = _Operator("jaxReplicaSpecs", lambda replicas, replica_type, index: MASTER_ROLE if index == 0 else None)
MPI_V1 = _Operator(
    "mpiReplicaSpecs",
    lambda replicas, replica_type, index: LAUNCHER_ROLE if replica_type == LAUNCHER else None,
    required=(LAUNCHER,),
    single=(LAUNCHER,),
)
MPI_V2 = _Operator(
    "mpiReplicaSpecs",
    lambda replicas, replica_type, index: LAUNCHER_ROLE if replica_type == LAUNCHER else WORKER_ROLE,
    required=(LAUNCHER,),
    single=(LAUNCHER,),
    default_replicas=lambda replica_type: 1 if replica_type == LAUNCHER else 0,
)


def _replicas(job: KubeObject, operator: _Operator) -> dict[str, int]:
    """Replicas by type, in the order written, every type checked."""
    specs = required_map(job, "spec", operator.replica_specs, what="a replica spec map")
    if not specs:
        raise InvalidWorkload(
            describe(job), "at least one replica type is required", f"spec.{operator.replica_specs}"
        )
    for required in operator.required:
        if required not in specs:
            raise InvalidWorkload(
                describe(job),
                f"a {required} replica spec is required",
                f"spec.{operator.replica_specs}.{required}",
            )
    replicas: dict[str, int] = {}
    for replica_type in specs:
        if not isinstance(replica_type, str):
            raise InvalidWorkload(
                describe(job),
                f"replica types are names, got {replica_type!r}",
                f"spec.{operator.replica_specs}",
            )
        path: tuple[Step, ...] = ("spec", operator.replica_specs, replica_type)
        required_map(job, *path, what="a replica spec")
        number = count(job, *path, "replicas", default=operator.default_replicas(replica_type))
        if replica_type in operator.single and number > 1:
            raise InvalidWorkload(
                describe(job),
                f"{replica_type} allows one replica, got {number}",
                field_path((*path, "replicas")),
            )
        pod_template(job, *path, "template")
        replicas[replica_type] = number
    return replicas


def _suspended(job: KubeObject) -> bool:
    return bool(bool_field(job, "spec", "runPolicy", "suspend"))


def _pod_labels(
    job: KubeObject, operator: _Operator, replicas: Mapping[str, int], replica_type: str, index: int
) -> dict[str, str]:
    labels = {
        JOB_NAME_LABEL: name(job),
        REPLICA_TYPE_LABEL: replica_type.lower(),
        REPLICA_INDEX_LABEL: str(index),
    }
    role = operator.role_of(replicas, replica_type, index)
    if role is not None:
        labels[JOB_ROLE_LABEL] = role
    return labels


def _replica_pods(
    job: KubeObject, operator: _Operator, replicas: Mapping[str, int], replica_type: str
) -> list[Child]:
    template = ("spec", operator.replica_specs, replica_type, "template")
    return [
        Child(
            new_pod(
                job,
                template,
                f"{name(job)}-{replica_type.lower()}-{index}",
                _pod_labels(job, operator, replicas, replica_type, index),
            )
        )
        for index in range(replicas[replica_type])
    ]


def _training_operator(operator: _Operator) -> Callable[[ExpansionContext, KubeObject], Expanded]:
    """The training-operator's reconcile for one kind: every replica a pod owned by the job."""

    def expand(context: ExpansionContext, job: KubeObject) -> Expanded:
        replicas = _replicas(job, operator)
        if _suspended(job):
            return Expanded()
        return Expanded(
            [pod for replica_type in replicas for pod in _replica_pods(job, operator, replicas, replica_type)]
        )

    return expand


expand_pytorch_job = _training_operator(PYTORCH)
expand_tf_job = _training_operator(TENSORFLOW)
expand_xgboost_job = _training_operator(XGBOOST)
expand_jax_job = _training_operator(JAX)
expand_mpi_job_v1 = _training_operator(MPI_V1)


def expand_mpi_job_v2(context: ExpansionContext, job: KubeObject) -> Expanded:
    """The mpi-operator: a launcher Job (when Launcher has its replica) and worker pods."""
    replicas = _replicas(job, MPI_V2)
    if _suspended(job):
        return Expanded()
    children: list[Child] = []
    if replicas[LAUNCHER]:
        labels = _pod_labels(job, MPI_V2, replicas, LAUNCHER, 0)
        template = required_map(
            job, "spec", MPI_V2.replica_specs, LAUNCHER, "template", what="a pod template"
        )
        launcher = new_object(
            "batch/v1",
            "Job",
            job,
            f"{name(job)}-launcher",
            labels=labels,
            spec={"template": template_with(template, labels)},
        )
        children.append(
            Child(launcher, {"spec.template": Source(f"spec.{MPI_V2.replica_specs}.{LAUNCHER}.template")})
        )
    if WORKER in replicas:
        children += _replica_pods(job, MPI_V2, replicas, WORKER)
    return Expanded(children)
