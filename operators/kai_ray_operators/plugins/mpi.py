"""MPIJob, kubeflow.org v1 and v2beta1 (spec/integrations.md §3.3).

The distributed rule over `mpiReplicaSpecs`, Launcher and Worker required.
With `launcherCreationPolicy: WaitForWorkersReady` the operator creates the
launcher only once the workers run, so until a live launcher pod exists the
gang is the workers alone; the next pod event after the launcher appears
restores the full count.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from kai_ray_operators.context import GroupingContext
from kai_ray_operators.errors import InvalidWorkload
from kai_ray_operators.fields import KubeObject, describe, field, int_field, name, namespace, str_field
from kai_ray_operators.metadata import PodGroupMetadata
from kai_ray_operators.plugins.kubeflow import distributed_metadata

__all__ = ["group_mpi"]

REPLICA_SPECS = "mpiReplicaSpecs"
LAUNCHER, WORKER = "Launcher", "Worker"
DELAYED_LAUNCHER = "WaitForWorkersReady"
JOB_NAME_LABEL = "training.kubeflow.org/job-name"
JOB_ROLE_LABEL = "training.kubeflow.org/job-role"


def _launcher_exists(context: GroupingContext, job: KubeObject) -> bool:
    selector = {JOB_NAME_LABEL: name(job), JOB_ROLE_LABEL: "launcher"}
    pods = context.reader.list("v1", "Pod", namespace(job), selector)
    return any(field(pod, "metadata", "deletionTimestamp") is None for pod in pods)


def group_mpi(
    context: GroupingContext, top_owner: KubeObject, pod: KubeObject, all_owners: Sequence[KubeObject]
) -> PodGroupMetadata:
    """Plugin `mpi`."""
    metadata = distributed_metadata(context, top_owner, pod, REPLICA_SPECS, (LAUNCHER, WORKER))
    if str_field(top_owner, "spec", "launcherCreationPolicy") != DELAYED_LAUNCHER:
        return metadata
    if _launcher_exists(context, top_owner):
        return metadata
    launchers = int_field(top_owner, "spec", REPLICA_SPECS, LAUNCHER, "replicas")
    if not launchers or launchers < 0:
        raise InvalidWorkload(
            describe(top_owner),
            "the launcher needs at least one replica",
            f"spec.{REPLICA_SPECS}.{LAUNCHER}.replicas",
        )
    return dataclasses.replace(metadata, min_available=max(0, metadata.min_available - launchers))
