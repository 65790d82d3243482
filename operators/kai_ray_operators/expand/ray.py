"""KubeRay: RayCluster pods, and the RayCluster (and submitter Job) of a RayJob or RayService.

A RayCluster makes a head pod `<cluster>-head` and, per worker group that is
not suspended, `replicas × numOfHosts` pods `<cluster>-<group>-worker-<i>`
(KubeRay appends random characters instead). Pods carry `ray.io/cluster`,
`ray.io/group` (`headgroup` for the head) and `ray.io/node-type`; the ray
grouper places them in SubGroups by `ray.io/group`. With in-tree autoscaling
the head pod also runs KubeRay's `autoscaler` container (500m CPU, 512Mi,
unless `autoscalerOptions.resources` says otherwise); the autoscaler's later
decisions are not modelled: worker groups stay at `replicas`.

KubeRay's KAI integration (spec/integrations.md §2.3) runs only with
`--batch-scheduler=kai-scheduler`, which manifests do not show; we take it to
be on for a cluster that is evidently meant for KAI: labelled with
`kai.scheduler/queue`, or with a pod template naming our scheduler. Then
every head and worker pod gets our `schedulerName` and the cluster's
non-empty queue label. Otherwise pods keep their template's scheduler.

A RayJob or RayService creates a RayCluster from its cluster spec, owned by
it and carrying all its labels and annotations, and points its status at it
(which is what the ray grouper reads): `<rayjob>-raycluster` (KubeRay adds
random characters) in `status.rayClusterName`, `<rayservice>-raycluster` in
`status.activeServiceStatus.rayClusterName`. A name already in the status, or
a RayCluster of the manifests the workload owns, is used instead. A RayJob
with `clusterSelector` uses the cluster named by its `ray.io/cluster` entry
and creates none.

RayJob submission modes: `K8sJobMode` (the default) adds the submitter, a
batch Job named after the RayJob from `submitterPodTemplate` or KubeRay's
default (one `ray-job-submitter` container, requests 500m CPU / 200Mi, limits
1 CPU / 1Gi, the head's image) on its template's scheduler; KubeRay creates it
once the cluster is ready, here it exists from the start. `SidecarMode` puts
that container into the head pod template of the RayCluster instead;
`HTTPMode` and `InteractiveMode` add nothing. KubeRay ≥1.6 with the KAI
integration refuses K8sJobMode RayJobs outright; that refusal is not
modelled (a K8sJobMode submitter routed to kai-scheduler is never scheduled,
spec §2.1 step 7, which the simulation shows).
"""

from __future__ import annotations

import copy
from typing import Any, Final

from kai_ray.api.constants import QUEUE_LABEL
from kai_ray_operators.errors import InvalidWorkload
from kai_ray_operators.expand.model import Child, Expanded, ExpansionContext, Source
from kai_ray_operators.expand.objects import (
    count,
    new_object,
    new_pod,
    pod_template,
    required_map,
    required_name,
)
from kai_ray_operators.fields import (
    KubeObject,
    Step,
    annotations_of,
    bool_field,
    describe,
    field,
    field_path,
    labels_of,
    list_field,
    map_field,
    name,
    str_field,
)
from kai_ray_operators.plugins.ray import HEAD_GROUP, NODE_GROUP_LABEL

__all__ = ["expand_ray_cluster", "expand_ray_job", "expand_ray_service"]

CLUSTER_LABEL = "ray.io/cluster"
NODE_TYPE_LABEL = "ray.io/node-type"
HEAD = ("spec", "headGroupSpec", "template")
WORKERS = ("spec", "workerGroupSpecs")

K8S_JOB_MODE, HTTP_MODE, INTERACTIVE_MODE, SIDECAR_MODE = (
    "K8sJobMode",
    "HTTPMode",
    "InteractiveMode",
    "SidecarMode",
)
SUBMISSION_MODES = (K8S_JOB_MODE, HTTP_MODE, INTERACTIVE_MODE, SIDECAR_MODE)
SUBMITTER_CONTAINER = "ray-job-submitter"
SUBMITTER_RESOURCES: Final = {
    "limits": {"cpu": "1", "memory": "1Gi"},
    "requests": {"cpu": "500m", "memory": "200Mi"},
}
SUBMITTER_BACKOFF_LIMIT = 2
AUTOSCALER_CONTAINER = "autoscaler"
AUTOSCALER_RESOURCES: Final = {
    "limits": {"cpu": "500m", "memory": "512Mi"},
    "requests": {"cpu": "500m", "memory": "512Mi"},
}


def _uses_kai(context: ExpansionContext, cluster: KubeObject, worker_count: int) -> bool:
    if QUEUE_LABEL in labels_of(cluster):
        return True
    templates = [HEAD, *((*WORKERS, index, "template") for index in range(worker_count))]
    return any(
        str_field(cluster, *path, "spec", "schedulerName") == context.scheduler_name for path in templates
    )


def _worker_groups(cluster: KubeObject) -> list[tuple[tuple[Step, ...], str, int]]:
    """(path, group name, pods) of every worker group, validated as KubeRay's webhook would."""
    groups: list[tuple[tuple[Step, ...], str, int]] = []
    for index in range(len(list_field(cluster, *WORKERS) or [])):
        path: tuple[Step, ...] = (*WORKERS, index)
        required_map(cluster, *path, what="a worker group")
        group = required_name(cluster, *path, "groupName")
        if any(group == seen for _, seen, _ in groups):
            raise InvalidWorkload(
                describe(cluster),
                f"worker group {group!r} is defined twice",
                field_path((*path, "groupName")),
            )
        replicas = count(cluster, *path, "replicas", default=0)
        minimum = count(cluster, *path, "minReplicas", default=0)
        if minimum > replicas:
            raise InvalidWorkload(
                describe(cluster),
                f"minReplicas {minimum} is more than replicas {replicas}",
                field_path((*path, "minReplicas")),
            )
        hosts = count(cluster, *path, "numOfHosts", default=1, minimum=1)
        pod_template(cluster, *path, "template")
        suspended = bool_field(cluster, *path, "suspend")
        groups.append((path, group, 0 if suspended else replicas * hosts))
    return groups


def _ray_pod(
    context: ExpansionContext,
    cluster: KubeObject,
    kai: bool,
    template: tuple[Step, ...],
    pod_name: str,
    group: str,
) -> dict[str, Any]:
    labels = {
        CLUSTER_LABEL: name(cluster),
        NODE_GROUP_LABEL: group,
        NODE_TYPE_LABEL: "head" if group == HEAD_GROUP else "worker",
    }
    queue = labels_of(cluster).get(QUEUE_LABEL)
    if kai and queue:
        labels[QUEUE_LABEL] = queue
    pod = new_pod(cluster, template, pod_name, labels)
    if kai:
        pod["spec"]["schedulerName"] = context.scheduler_name
    return pod


def _add_autoscaler(cluster: KubeObject, head: dict[str, Any]) -> None:
    if not bool_field(cluster, "spec", "enableInTreeAutoscaling"):
        return
    resources = map_field(cluster, "spec", "autoscalerOptions", "resources")
    container: dict[str, Any] = {
        "name": AUTOSCALER_CONTAINER,
        "resources": copy.deepcopy(dict(resources))
        if resources is not None
        else copy.deepcopy(AUTOSCALER_RESOURCES),
    }
    image = field(head, "spec", "containers", 0, "image")
    if isinstance(image, str):
        container["image"] = image
    head["spec"]["containers"].append(container)


def expand_ray_cluster(context: ExpansionContext, cluster: KubeObject) -> Expanded:
    pod_template(cluster, *HEAD)
    groups = _worker_groups(cluster)
    if bool_field(cluster, "spec", "suspend"):
        return Expanded()
    kai = _uses_kai(context, cluster, len(groups))
    head = _ray_pod(context, cluster, kai, HEAD, f"{name(cluster)}-head", HEAD_GROUP)
    _add_autoscaler(cluster, head)
    pods = [head]
    for path, group, total in groups:
        pods += [
            _ray_pod(context, cluster, kai, (*path, "template"), f"{name(cluster)}-{group}-worker-{i}", group)
            for i in range(total)
        ]
    return Expanded([Child(pod) for pod in pods])


def _cluster_name(context: ExpansionContext, workload: KubeObject, status: tuple[str, ...]) -> str:
    """The name in the status, else the RayCluster of the manifests the workload owns, else ours."""
    current = field(workload, *status)
    if isinstance(current, str) and current:
        return current
    owned = (name(obj) for obj in context.owned(workload) if obj.get("kind") == "RayCluster")
    return next(owned, f"{name(workload)}-raycluster")


def _with_status(workload: KubeObject, path: tuple[str, ...], value: str) -> dict[str, Any] | None:
    """A copy of `workload` with `value` at the status `path`; None when it is already there."""
    if field(workload, *path) == value:
        return None
    result = copy.deepcopy(dict(workload))
    node = result
    for step in path[:-1]:
        if not isinstance(node.get(step), dict):
            node[step] = {}
        node = node[step]
    node[path[-1]] = value
    return result


def _ray_cluster(workload: KubeObject, cluster_name: str, spec: dict[str, Any], spec_path: str) -> Child:
    """The RayCluster a RayJob or RayService creates: its spec, all the workload's labels and annotations."""
    cluster = new_object(
        str(workload.get("apiVersion") or ""),
        "RayCluster",
        workload,
        cluster_name,
        labels=labels_of(workload),
        annotations=annotations_of(workload),
        spec=spec,
    )
    return Child(cluster, {"spec": Source(spec_path)})


def _submitter_container(job: KubeObject) -> dict[str, Any]:
    container: dict[str, Any] = {"name": SUBMITTER_CONTAINER, "resources": copy.deepcopy(SUBMITTER_RESOURCES)}
    image = field(job, "spec", "rayClusterSpec", *HEAD[1:], "spec", "containers", 0, "image")
    if isinstance(image, str):
        container["image"] = image
    return container


def _submitter_job(job: KubeObject) -> Child:
    template = map_field(job, "spec", "submitterPodTemplate")
    if template is None:
        template = {"spec": {"restartPolicy": "Never", "containers": [_submitter_container(job)]}}
    backoff = count(job, "spec", "submitterConfig", "backoffLimit", default=SUBMITTER_BACKOFF_LIMIT)
    submitter = new_object(
        "batch/v1",
        "Job",
        job,
        name(job),
        spec={"backoffLimit": backoff, "template": copy.deepcopy(dict(template))},
    )
    return Child(submitter, {"spec.template": Source("spec.submitterPodTemplate")})


def _selected_cluster(job: KubeObject, mode: str) -> str | None:
    """The existing cluster a RayJob's `clusterSelector` names, or None when it asks for its own."""
    selector = map_field(job, "spec", "clusterSelector")
    if not selector:
        return None
    cluster_name = selector.get(CLUSTER_LABEL)
    if not isinstance(cluster_name, str) or not cluster_name:
        raise InvalidWorkload(describe(job), f"the {CLUSTER_LABEL} entry is required", "spec.clusterSelector")
    if mode == SIDECAR_MODE:
        raise InvalidWorkload(
            describe(job), "SidecarMode cannot use an existing cluster", "spec.clusterSelector"
        )
    return cluster_name


def expand_ray_job(context: ExpansionContext, job: KubeObject) -> Expanded:
    mode = str_field(job, "spec", "submissionMode") or K8S_JOB_MODE
    if mode not in SUBMISSION_MODES:
        raise InvalidWorkload(
            describe(job),
            f"unknown mode {mode!r}; one of {', '.join(SUBMISSION_MODES)}",
            "spec.submissionMode",
        )
    cluster_name = _selected_cluster(job, mode)
    children = []
    if cluster_name is None:
        spec = copy.deepcopy(dict(required_map(job, "spec", "rayClusterSpec", what="a RayCluster spec")))
        if mode == SIDECAR_MODE:
            pod_template(job, "spec", "rayClusterSpec", *HEAD[1:])
            spec["headGroupSpec"]["template"]["spec"]["containers"].append(_submitter_container(job))
        cluster_name = _cluster_name(context, job, ("status", "rayClusterName"))
        children.append(_ray_cluster(job, cluster_name, spec, "spec.rayClusterSpec"))
    if mode == K8S_JOB_MODE:
        children.append(_submitter_job(job))
    if bool_field(job, "spec", "suspend"):
        return Expanded()
    return Expanded(children, _with_status(job, ("status", "rayClusterName"), cluster_name))


def expand_ray_service(context: ExpansionContext, service: KubeObject) -> Expanded:
    spec = copy.deepcopy(dict(required_map(service, "spec", "rayClusterConfig", what="a RayCluster spec")))
    if bool_field(service, "spec", "suspend"):
        return Expanded()
    status = ("status", "activeServiceStatus", "rayClusterName")
    cluster_name = _cluster_name(context, service, status)
    child = _ray_cluster(service, cluster_name, spec, "spec.rayClusterConfig")
    return Expanded([child], _with_status(service, status, cluster_name))
