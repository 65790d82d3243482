"""Builders for the expansion tests: a valid workload of every kind, and the podgrouper over the result."""

from __future__ import annotations

from typing import Any

from grouping_builders import kube
from kai_ray_operators import GroupingConfig, InMemoryReader, PodPlan, plan_pod
from kai_ray_operators.expand import Expansion, ExpansionProblem, expand_workloads
from kai_ray_operators.fields import GroupVersionKind, name, namespace

SCHEDULER = "kai-scheduler"


def template(
    scheduler: str | None = SCHEDULER,
    *,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    gpu: int = 0,
) -> dict[str, Any]:
    """A pod template with one container asking for 1 CPU (and `gpu` GPUs)."""
    resources: dict[str, Any] = {"requests": {"cpu": "1"}}
    if gpu:
        resources["limits"] = {"nvidia.com/gpu": str(gpu)}
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": "busybox", "resources": resources}]}
    if scheduler is not None:
        spec["schedulerName"] = scheduler
    result: dict[str, Any] = {"spec": spec}
    metadata = {key: value for key, value in (("labels", labels), ("annotations", annotations)) if value}
    if metadata:
        result["metadata"] = metadata
    return result


def expand(*objects: dict[str, Any], scheduler_name: str = SCHEDULER) -> Expansion:
    return expand_workloads(list(objects), scheduler_name)


def _key(obj: dict[str, Any]) -> tuple[str, str, str, str]:
    gvk = GroupVersionKind.of(obj)
    return gvk.group, gvk.kind, namespace(obj), name(obj)


def cluster_objects(expansion: Expansion, *inputs: dict[str, Any]) -> list[dict[str, Any]]:
    """What the API server would hold: the inputs (as the controllers updated them) and their children."""
    updated = {_key(obj): obj for obj in expansion.updated}
    return [*(updated.get(_key(obj), obj) for obj in inputs), *expansion.children]


def plans(expansion: Expansion, *inputs: dict[str, Any]) -> dict[str, PodPlan]:
    """The podgrouper's plan for every created pod of ours, by pod name."""
    reader = InMemoryReader(cluster_objects(expansion, *inputs))
    result = {}
    for pod in created(expansion, "Pod"):
        if pod["spec"].get("schedulerName") == SCHEDULER:
            plan = plan_pod(reader, GroupingConfig(), pod)
            assert plan is not None, name(pod)
            result[name(pod)] = plan
    return result


def created(expansion: Expansion, kind: str) -> list[dict[str, Any]]:
    return [child for child in expansion.children if child["kind"] == kind]


def names(expansion: Expansion, kind: str) -> list[str]:
    return [name(child) for child in created(expansion, kind)]


def one(expansion: Expansion, kind: str, object_name: str) -> dict[str, Any]:
    matches = [child for child in created(expansion, kind) if name(child) == object_name]
    assert len(matches) == 1, f"{kind} {object_name}: {names(expansion, kind)}"
    return matches[0]


def subgroups(plan: PodPlan) -> list[tuple[str, int, int | None, str | None]]:
    return [(g.name, g.min_available, g.min_subgroup, g.parent) for g in plan.metadata.subgroups]


def only_problem(expansion: Expansion) -> ExpansionProblem:
    assert len(expansion.problems) == 1, expansion.problems
    return expansion.problems[0]


# --- one valid workload per kind --------------------------------------------------------------


def ray_cluster(**metadata: Any) -> dict[str, Any]:
    """spec/integrations.md §2.2: a head, `gpu` (4 replicas, at least 2) and `cpu` (3 replicas)."""
    metadata.setdefault("labels", {"kai.scheduler/queue": "team-a"})
    return kube("ray.io/v1", "RayCluster", metadata.pop("name", "rc"), spec=ray_cluster_spec(), **metadata)


def ray_cluster_spec() -> dict[str, Any]:
    return {
        "headGroupSpec": {"template": template()},
        "workerGroupSpecs": [
            {"groupName": "gpu", "replicas": 4, "minReplicas": 2, "template": template(gpu=1)},
            {"groupName": "cpu", "replicas": 3, "template": template()},
        ],
    }


def ray_job(mode: str = "HTTPMode", job_name: str = "rj", **spec: Any) -> dict[str, Any]:
    """§2.2's RayJob: a head and `gpu-workers` (2 replicas, at least 1)."""
    cluster = {
        "headGroupSpec": {"template": template()},
        "workerGroupSpecs": [
            {"groupName": "gpu-workers", "replicas": 2, "minReplicas": 1, "template": template(gpu=1)}
        ],
    }
    body = {"submissionMode": mode, "entrypoint": "python main.py", "rayClusterSpec": cluster, **spec}
    return kube("ray.io/v1", "RayJob", job_name, labels={"kai.scheduler/queue": "team-a"}, spec=body)


def ray_service() -> dict[str, Any]:
    return kube(
        "ray.io/v1",
        "RayService",
        "svc",
        labels={"kai.scheduler/queue": "serving"},
        spec={"rayClusterConfig": ray_cluster_spec()},
    )


def pytorch_job(masters: int = 1, workers: int = 2) -> dict[str, Any]:
    specs = {
        "Master": {"replicas": masters, "template": template()},
        "Worker": {"replicas": workers, "template": template(gpu=1)},
    }
    return kube(
        "kubeflow.org/v1",
        "PyTorchJob",
        "pt",
        labels={"kai.scheduler/queue": "default-queue"},
        spec={"pytorchReplicaSpecs": specs},
    )


def tf_job() -> dict[str, Any]:
    specs = {
        "Chief": {"replicas": 1, "template": template()},
        "PS": {"replicas": 2, "template": template()},
        "Worker": {"replicas": 4, "template": template(gpu=1)},
    }
    return kube("kubeflow.org/v1", "TFJob", "tf", spec={"tfReplicaSpecs": specs})


def xgboost_job() -> dict[str, Any]:
    specs = {
        "Master": {"replicas": 1, "template": template()},
        "Worker": {"replicas": 2, "template": template()},
    }
    return kube("kubeflow.org/v1", "XGBoostJob", "xgb", spec={"xgbReplicaSpecs": specs})


def jax_job() -> dict[str, Any]:
    return kube(
        "kubeflow.org/v1",
        "JAXJob",
        "jax",
        spec={"jaxReplicaSpecs": {"Worker": {"replicas": 3, "template": template(gpu=1)}}},
    )


def mpi_job(version: str = "v2beta1", job_name: str = "mpi", **spec: Any) -> dict[str, Any]:
    """§3.3's MPIJob: a launcher and 4 workers."""
    specs = {
        "Launcher": {"replicas": 1, "template": template()},
        "Worker": {"replicas": 4, "template": template(gpu=1)},
    }
    return kube(
        f"kubeflow.org/{version}",
        "MPIJob",
        job_name,
        labels={"kai.scheduler/queue": "default-queue"},
        spec={"mpiReplicaSpecs": specs, **spec},
    )


def training_runtime(kind: str = "ClusterTrainingRuntime", **spec: Any) -> dict[str, Any]:
    """A Trainer runtime: a dataset initializer and the trainer job `node`, both on our scheduler."""
    initializer = {
        "name": "dataset-initializer",
        "replicas": 2,
        "template": {
            "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "dataset-initializer"}},
            "spec": {"template": template()},
        },
    }
    trainer = {
        "name": "node",
        "template": {
            "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
            "spec": {
                "template": {"spec": {**template()["spec"], "containers": [{"name": "node", "image": "t"}]}}
            },
        },
    }
    body = {
        "mlPolicy": {"numNodes": 1},
        "template": {
            "metadata": {"labels": {"runtime": "torch"}},
            "spec": {"replicatedJobs": [initializer, trainer]},
        },
        **spec,
    }
    runtime = kube("trainer.kubeflow.org/v1alpha1", kind, "torch", spec=body)
    if kind == "ClusterTrainingRuntime":
        del runtime["metadata"]["namespace"]
    return runtime


def train_job(runtime_kind: str = "ClusterTrainingRuntime", **trainer: Any) -> dict[str, Any]:
    spec = {
        "runtimeRef": {"name": "torch", "kind": runtime_kind},
        "trainer": {"numNodes": 3, "resourcesPerNode": {"limits": {"nvidia.com/gpu": "2"}}, **trainer},
    }
    return kube(
        "trainer.kubeflow.org/v1alpha1", "TrainJob", "tj", labels={"kai.scheduler/queue": "team-a"}, spec=spec
    )


def batch_job(**spec: Any) -> dict[str, Any]:
    """§5.1's Job: 6 pods, gangs of 2."""
    body = {
        "parallelism": 6,
        "completions": 6,
        "template": template(labels={"kai.scheduler/queue": "q"}),
        **spec,
    }
    return kube("batch/v1", "Job", "bj", annotations={"kai.scheduler/batch-min-member": "2"}, spec=body)


def cron_job() -> dict[str, Any]:
    """§5.2's CronJob."""
    job_template = {
        "metadata": {"labels": {"kai.scheduler/queue": "team-a"}},
        "spec": {"template": template()},
    }
    return kube(
        "batch/v1",
        "CronJob",
        "nightly",
        labels={"kai.scheduler/queue": "ignored-here"},
        spec={"schedule": "0 2 * * *", "jobTemplate": job_template},
    )


def deployment(replicas: int = 2) -> dict[str, Any]:
    """§5.3's Deployment."""
    spec = {
        "replicas": replicas,
        "selector": {"matchLabels": {"app": "llm"}},
        "template": template(labels={"app": "llm"}, gpu=1),
    }
    return kube("apps/v1", "Deployment", "llm", labels={"kai.scheduler/queue": "serving"}, spec=spec)


def replica_set() -> dict[str, Any]:
    return kube("apps/v1", "ReplicaSet", "rs", spec={"replicas": 2, "template": template()})


def stateful_set(**spec: Any) -> dict[str, Any]:
    """§5.4's StatefulSet `db`."""
    return kube("apps/v1", "StatefulSet", "db", spec={"replicas": 3, "template": template(), **spec})


def leader_worker_set(**template_fields: Any) -> dict[str, Any]:
    """§6's LeaderWorkerSet: 2 groups of 4."""
    lws_template = {
        "size": 4,
        "leaderTemplate": template(labels={"role": "leader"}),
        "workerTemplate": template(labels={"role": "worker"}, gpu=1),
        **template_fields,
    }
    return kube(
        "leaderworkerset.x-k8s.io/v1",
        "LeaderWorkerSet",
        "vllm",
        labels={"kai.scheduler/queue": "serving"},
        spec={"replicas": 2, "leaderWorkerTemplate": lws_template},
    )


def jobset(**spec: Any) -> dict[str, Any]:
    """§7's JobSet: a driver, and 2 replicas of 4 workers."""
    replicated = [
        {"name": "driver", "replicas": 1, "template": {"spec": {"parallelism": 1, "template": template()}}},
        {
            "name": "workers",
            "replicas": 2,
            "template": {"spec": {"parallelism": 4, "template": template(gpu=1)}},
        },
    ]
    return kube(
        "jobset.x-k8s.io/v1alpha2",
        "JobSet",
        "js",
        labels={"kai.scheduler/queue": "default-queue"},
        spec={"replicatedJobs": replicated, **spec},
    )


def workflow(
    entrypoint: str = "main", templates: list[dict[str, Any]] | None = None, **spec: Any
) -> dict[str, Any]:
    """§4's Workflow: one container template, on our scheduler workflow-wide."""
    if templates is None:
        templates = [
            {"name": "main", "container": {"image": "busybox", "resources": {"requests": {"cpu": "1"}}}}
        ]
    return kube(
        "argoproj.io/v1alpha1",
        "Workflow",
        "wf",
        labels={"kai.scheduler/queue": "team-a"},
        spec={"schedulerName": SCHEDULER, "entrypoint": entrypoint, "templates": templates, **spec},
    )


def every_workload() -> list[dict[str, Any]]:
    """One valid workload of every kind expanded (and the runtime the TrainJob reads)."""
    return [
        ray_cluster(),
        ray_job(),
        ray_job("K8sJobMode", "rj-k8s"),
        ray_service(),
        pytorch_job(),
        tf_job(),
        xgboost_job(),
        jax_job(),
        mpi_job("v1"),
        mpi_job("v2beta1", "mpi2"),
        training_runtime(),
        train_job(),
        batch_job(),
        cron_job(),
        deployment(),
        replica_set(),
        stateful_set(),
        leader_worker_set(),
        jobset(),
        workflow(),
    ]
