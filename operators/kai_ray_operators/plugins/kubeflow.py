"""Kubeflow training-operator jobs and Notebooks (spec/integrations.md §3.1, §3.4, §3.5).

Distributed jobs are one gang: `runPolicy.schedulingPolicy.minAvailable` when
set, else the sum of `replicas` over every replica type. A replica map that
is missing, a required type that is missing, or a type with no or zero
replicas is an error: a gang size guessed from a broken spec would either
never start or start half a job. TFJob, XGBoostJob and JAXJob are this rule
with their own replica map; PyTorchJob and MPIJob refine it in their modules.
A Notebook is the default PodGroup with the `build` priority.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from kai_ray.api.constants import PRIORITY_BUILD
from kai_ray_operators.context import Grouper, GroupingContext
from kai_ray_operators.errors import InvalidWorkload
from kai_ray_operators.fields import KubeObject, describe, int_field, map_field
from kai_ray_operators.metadata import PodGroupMetadata
from kai_ray_operators.plugins.default import default_metadata

__all__ = [
    "distributed_grouper",
    "distributed_metadata",
    "group_jax",
    "group_notebook",
    "group_tensorflow",
    "group_xgboost",
    "replica_sum",
]

MIN_AVAILABLE_PATH = ("spec", "runPolicy", "schedulingPolicy", "minAvailable")


def replica_sum(job: KubeObject, replica_specs: str, mandatory: Sequence[str]) -> int:
    """Σ `spec.<replica_specs>.<type>.replicas`, every type present with at least one replica."""
    specs = map_field(job, "spec", replica_specs)
    if specs is None:
        raise InvalidWorkload(describe(job), "the replica specs are required", f"spec.{replica_specs}")
    for required in mandatory:
        if required not in specs:
            raise InvalidWorkload(
                describe(job), f"a {required} replica spec is required", f"spec.{replica_specs}.{required}"
            )
    total = 0
    for replica_type in specs:
        replicas = int_field(job, "spec", replica_specs, replica_type, "replicas")
        if replicas is None or replicas <= 0:
            raise InvalidWorkload(
                describe(job),
                f"{replica_type} needs at least one replica, got {replicas}",
                f"spec.{replica_specs}.{replica_type}.replicas",
            )
        total += replicas
    if total == 0:
        raise InvalidWorkload(describe(job), "the job has no replicas", f"spec.{replica_specs}")
    return total


def distributed_metadata(
    context: GroupingContext,
    job: KubeObject,
    pod: KubeObject,
    replica_specs: str,
    mandatory: Sequence[str] = (),
) -> PodGroupMetadata:
    """The default PodGroup with the gang size of §3.1; `minAvailable` skips validating the replicas."""
    metadata = default_metadata(context, job, pod)
    min_available = int_field(job, *MIN_AVAILABLE_PATH)
    if min_available is None:
        min_available = replica_sum(job, replica_specs, mandatory)
    elif min_available < 0:
        raise InvalidWorkload(describe(job), "must not be negative", ".".join(MIN_AVAILABLE_PATH))
    return dataclasses.replace(metadata, min_available=min_available)


def distributed_grouper(replica_specs: str, mandatory: Sequence[str] = ()) -> Grouper:
    """A plugin applying the distributed rule to one replica map (plugin `kubeflow-distributed`)."""

    def group(
        context: GroupingContext, top_owner: KubeObject, pod: KubeObject, all_owners: Sequence[KubeObject]
    ) -> PodGroupMetadata:
        return distributed_metadata(context, top_owner, pod, replica_specs, mandatory)

    return group


group_tensorflow = distributed_grouper("tfReplicaSpecs")
group_xgboost = distributed_grouper("xgbReplicaSpecs", ("Master", "Worker"))
group_jax = distributed_grouper("jaxReplicaSpecs", ("Worker",))


def group_notebook(
    context: GroupingContext, top_owner: KubeObject, pod: KubeObject, all_owners: Sequence[KubeObject]
) -> PodGroupMetadata:
    """Plugin `notebook`: an interactive session, `build` unless labels say otherwise."""
    return default_metadata(context, top_owner, pod, fallback_priority=PRIORITY_BUILD)
