"""Which plugin groups a workload: KAI's table by the top owner's type (spec/integrations.md §1.3).

Lookup order: the exact group/version/kind, then the same group and kind
registered for every version (`*`), then a Karta describing the type (when
`karta_fallback` is on), then the default grouper. Types mapped to `default`
explicitly (StatefulSet, Tekton runs, ...) are listed so that a Karta cannot
take them over. The version matters: a type's next API version falls back to
the default grouper until it is added here.
"""

from __future__ import annotations

from collections.abc import Mapping

from kai_ray_operators.config import GroupingConfig
from kai_ray_operators.context import Grouper, GroupingContext
from kai_ray_operators.fields import GroupVersionKind
from kai_ray_operators.plugins.aml import group_aml
from kai_ray_operators.plugins.batch import group_cronjob, group_job
from kai_ray_operators.plugins.default import group_default
from kai_ray_operators.plugins.deployment import group_deployment
from kai_ray_operators.plugins.grove import group_grove
from kai_ray_operators.plugins.jobset import group_jobset
from kai_ray_operators.plugins.karta import group_karta, karta_describes
from kai_ray_operators.plugins.knative import group_knative
from kai_ray_operators.plugins.kubeflow import group_jax, group_notebook, group_tensorflow, group_xgboost
from kai_ray_operators.plugins.lws import group_lws
from kai_ray_operators.plugins.mpi import group_mpi
from kai_ray_operators.plugins.podjob import group_pod_job, group_spark
from kai_ray_operators.plugins.pytorch import group_pytorch
from kai_ray_operators.plugins.ray import group_ray_cluster, group_ray_job, group_ray_service
from kai_ray_operators.plugins.runaijob import group_runaijob
from kai_ray_operators.plugins.skiptopowner import group_skip_top_owner
from kai_ray_operators.plugins.spotrequest import group_spotrequest
from kai_ray_operators.reader import ObjectReader

__all__ = ["HUB_TABLE", "PLUGINS", "WILDCARD_VERSION", "grouping_context", "plugin_id"]

DEFAULT = "default"
WILDCARD_VERSION = "*"

PLUGINS: Mapping[str, Grouper] = {
    DEFAULT: group_default,
    "aml": group_aml,
    "cronjob": group_cronjob,
    "deployment": group_deployment,
    "grove": group_grove,
    "jax": group_jax,
    "job": group_job,
    "jobset": group_jobset,
    "karta": group_karta,
    "knative": group_knative,
    "lws": group_lws,
    "mpi": group_mpi,
    "notebook": group_notebook,
    "podjob": group_pod_job,
    "pytorch": group_pytorch,
    "ray-cluster": group_ray_cluster,
    "ray-job": group_ray_job,
    "ray-service": group_ray_service,
    "runaijob": group_runaijob,
    "skiptopowner": group_skip_top_owner,
    "spark": group_spark,
    "spotrequest": group_spotrequest,
    "tensorflow": group_tensorflow,
    "xgboost": group_xgboost,
}
"""Plugin ids (the conformance format's) to plugins. `kubeflow-distributed` is not here: it
needs a replica map, which `kubeflow.distributed_grouper` binds."""


def _table(entries: list[tuple[str, str, tuple[str, ...], str]]) -> dict[GroupVersionKind, str]:
    return {
        GroupVersionKind(group, version, kind): plugin
        for group, version, kinds, plugin in entries
        for kind in kinds
    }


HUB_TABLE: Mapping[GroupVersionKind, str] = _table(
    [
        ("", "v1", ("Pod",), "podjob"),
        ("apps", "v1", ("Deployment",), "deployment"),
        ("apps", "v1", ("StatefulSet", "ReplicaSet"), DEFAULT),
        ("batch", "v1", ("Job",), "job"),
        ("batch", "v1", ("CronJob",), "cronjob"),
        ("ray.io", "v1", ("RayCluster",), "ray-cluster"),
        ("ray.io", "v1", ("RayJob",), "ray-job"),
        ("ray.io", "v1", ("RayService",), "ray-service"),
        ("ray.io", "v1alpha1", ("RayCluster",), "ray-cluster"),
        ("ray.io", "v1alpha1", ("RayJob",), "ray-job"),
        ("ray.io", "v1alpha1", ("RayService",), "ray-service"),
        ("kubeflow.org", "v1", ("PyTorchJob",), "pytorch"),
        ("kubeflow.org", "v1", ("TFJob",), "tensorflow"),
        ("kubeflow.org", "v1", ("XGBoostJob",), "xgboost"),
        ("kubeflow.org", "v1", ("JAXJob",), "jax"),
        ("kubeflow.org", "v1", ("MPIJob",), "mpi"),
        ("kubeflow.org", "v2beta1", ("MPIJob",), "mpi"),
        ("kubeflow.org", "v1beta1", ("Notebook",), "notebook"),
        ("kubeflow.org", "v1alpha1", ("ScheduledWorkflow",), DEFAULT),
        ("trainer.kubeflow.org", "v1alpha1", ("TrainJob",), "skiptopowner"),
        ("argoproj.io", "v1alpha1", ("Workflow",), "skiptopowner"),
        ("jobset.x-k8s.io", "v1alpha2", ("JobSet",), "jobset"),
        ("leaderworkerset.x-k8s.io", "v1", ("LeaderWorkerSet",), "lws"),
        ("serving.knative.dev", "v1", ("Service",), "knative"),
        ("grove.io", "v1alpha1", ("PodCliqueSet", "PodGangSet"), "grove"),
        ("nvidia.com", WILDCARD_VERSION, ("DynamoGraphDeployment",), "skiptopowner"),
        (
            "run.ai",
            WILDCARD_VERSION,
            (
                "TrainingWorkload",
                "InteractiveWorkload",
                "DistributedWorkload",
                "InferenceWorkload",
                "DistributedInferenceWorkload",
            ),
            "skiptopowner",
        ),
        ("run.ai", "v1", ("RunaiJob",), "runaijob"),
        ("amlarc.azureml.com", "v1alpha1", ("AmlJob",), "aml"),
        ("egx.nvidia.io", "v1", ("SPOTRequest",), "spotrequest"),
        ("machinelearning.seldon.io", "v1", ("SeldonDeployment",), DEFAULT),
        ("machinelearning.seldon.io", "v1alpha2", ("SeldonDeployment",), DEFAULT),
        ("kubevirt.io", "v1", ("VirtualMachineInstance",), DEFAULT),
        ("workspace.devfile.io", "v1alpha2", ("DevWorkspace",), DEFAULT),
        ("tekton.dev", "v1", ("PipelineRun", "TaskRun"), DEFAULT),
    ]
)


def plugin_id(gvk: GroupVersionKind, reader: ObjectReader, config: GroupingConfig) -> str:
    """The id of the plugin that groups pods whose top owner has this type."""
    for candidate in (gvk, GroupVersionKind(gvk.group, WILDCARD_VERSION, gvk.kind)):
        if candidate in HUB_TABLE:
            return HUB_TABLE[candidate]
    if config.karta_fallback and karta_describes(reader, gvk):
        return "karta"
    return DEFAULT


def grouping_context(
    reader: ObjectReader, config: GroupingConfig, table: Mapping[GroupVersionKind, str] = HUB_TABLE
) -> GroupingContext:
    """A context whose skip-top-owner dispatch uses `table` by exact type (KAI's hub table by default)."""

    def exact(gvk: GroupVersionKind) -> Grouper:
        return PLUGINS[table.get(gvk, DEFAULT)]

    return GroupingContext(reader, config, exact)
