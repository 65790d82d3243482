"""Group pods into jobs: into their named PodGroup, or into a PodGroup of their own.

A pod without `pod-group-name` gets the PodGroup KAI's podgrouper would make
for a bare pod (spec/integrations.md §5.5): minMember 1, queue from the queue
label, priority from the pod's class if that class exists, else `train`.
"""

from __future__ import annotations

from kai_ray.api import Manifest, ManifestProblem, Pod, PodGroup
from kai_ray.api.constants import (
    DEFAULT_QUEUE,
    NON_PREEMPTIBLE,
    POD_GROUP_NAME_ANNOTATION,
    PREEMPTIBILITY_LABEL,
    PREEMPTIBLE,
    PREEMPTION_DELAY_ANNOTATION,
    PRIORITY_CLASS_LABEL,
    PRIORITY_TRAIN,
    QUEUE_LABEL,
    SCHEDULER_NAME,
    STALENESS_GRACE_PERIOD_ANNOTATION,
    SUBGROUP_LABEL,
)
from kai_ray.cluster.sim._convert_common import (
    Invalid,
    annotation_field,
    annotation_seconds,
    created,
    label_field,
)
from kai_ray.cluster.sim._convert_podgroups import Priorities, is_preemptible, job_from_podgroup
from kai_ray.cluster.sim._convert_pods import PodContext, task_from_pod
from kai_ray.cluster.sim._convert_queues import QueueIndex
from kai_ray.model.objects import JobSpec, TaskSpec

_Key = tuple[str, str]


class JobAssembler:
    """Collects jobs from PodGroups first, then files every kai-scheduler pod into one."""

    def __init__(
        self,
        queues: QueueIndex,
        priorities: Priorities,
        pods: PodContext,
        problems: list[ManifestProblem],
        scheduler_name: str = SCHEDULER_NAME,
    ) -> None:
        self._scheduler_name = scheduler_name
        self._queues = queues
        self._priorities = priorities
        self._pods = pods
        self._problems = problems
        self._jobs: dict[_Key, JobSpec] = {}
        self._skipped: set[_Key] = set()

    @property
    def jobs(self) -> list[JobSpec]:
        return list(self._jobs.values())

    def add_podgroups(self, manifests: list[Manifest[PodGroup]]) -> None:
        for manifest in manifests:
            key = (manifest.obj.metadata.namespace or "", manifest.obj.metadata.name)
            try:
                self._jobs[key] = job_from_podgroup(manifest, self._queues, self._priorities)
            except Invalid as error:
                self._skipped.add(key)
                self._problems.append(manifest.problem(error.field, error.message))

    def add_pods(self, manifests: list[Manifest[Pod]]) -> None:
        """Only pods for KAI are scheduled; pods of other schedulers are left out entirely."""
        for manifest in manifests:
            if manifest.obj.spec.scheduler_name != self._scheduler_name:
                continue
            try:
                self._add_pod(manifest)
            except Invalid as error:
                self._problems.append(manifest.problem(error.field, error.message))

    def _add_pod(self, manifest: Manifest[Pod]) -> None:
        task = task_from_pod(manifest, self._pods)
        group = manifest.obj.metadata.annotations.get(POD_GROUP_NAME_ANNOTATION)
        job = self._named_job(manifest, group) if group is not None else self._own_job(manifest)
        _check_leaf(job, task, manifest.obj)
        self._jobs.setdefault((job.namespace, job.name), job).tasks.append(task)

    def _named_job(self, manifest: Manifest[Pod], group: str) -> JobSpec:
        key = (manifest.obj.metadata.namespace or "", group)
        field = annotation_field(POD_GROUP_NAME_ANNOTATION)
        if key in self._skipped:
            raise Invalid(field, f"PodGroup {group!r} was skipped (see its own problem)")
        if key not in self._jobs:
            raise Invalid(field, f"PodGroup {group!r} does not exist in namespace {key[0]!r}")
        return self._jobs[key]

    def _own_job(self, manifest: Manifest[Pod]) -> JobSpec:
        pod = manifest.obj
        key = (pod.metadata.namespace or "", pod.metadata.name)
        if key in self._jobs or key in self._skipped:
            message = f"missing, and the pod's implicit PodGroup would clash with PodGroup {key[1]!r}"
            raise Invalid(annotation_field(POD_GROUP_NAME_ANNOTATION), message)
        return implicit_job(manifest, self._queues, self._priorities)


def implicit_job(manifest: Manifest[Pod], queues: QueueIndex, priorities: Priorities) -> JobSpec:
    """The one-pod PodGroup of a pod that names none."""
    pod = manifest.obj
    labels, annotations = pod.metadata.labels, pod.metadata.annotations
    queue = labels.get(QUEUE_LABEL, DEFAULT_QUEUE)
    missing = queues.why_missing(queue)
    if missing is not None:
        hint = "" if QUEUE_LABEL in labels else f" (pods without a {QUEUE_LABEL} label go to {DEFAULT_QUEUE})"
        raise Invalid(label_field(QUEUE_LABEL), missing + hint)
    priority = priorities.value_of(_priority_class(pod, priorities))
    explicit = labels.get(PREEMPTIBILITY_LABEL)
    return JobSpec(
        name=pod.metadata.name,
        queue=queue,
        namespace=pod.metadata.namespace or "",
        priority=priority,
        preemptible=is_preemptible(
            explicit if explicit in (PREEMPTIBLE, NON_PREEMPTIBLE) else None, priority
        ),
        created=created(manifest),
        preemption_delay=_preemption_delay(annotations),
        staleness_grace=annotation_seconds(annotations, STALENESS_GRACE_PERIOD_ANNOTATION),
    )


def _priority_class(pod: Pod, priorities: Priorities) -> str:
    """The pod's class label or spec class if that class exists, else `train` (the podgrouper's rule)."""
    candidate = pod.metadata.labels.get(PRIORITY_CLASS_LABEL) or pod.spec.priority_class_name
    return candidate if candidate in priorities.values else PRIORITY_TRAIN


def _preemption_delay(annotations: dict[str, str]) -> float | None:
    delay = annotation_seconds(annotations, PREEMPTION_DELAY_ANNOTATION)
    if delay is not None and delay < 0:
        raise Invalid(annotation_field(PREEMPTION_DELAY_ANNOTATION), "must not be negative")
    return delay


def _check_leaf(job: JobSpec, task: TaskSpec, pod: Pod) -> None:
    """A pod must name a leaf of its PodGroup's tree; otherwise KAI never schedules it."""
    leaves = [pod_set.name for pod_set in job.subgroups.all_pod_sets()]
    if task.subgroup in leaves:
        return
    listed = ", ".join(leaves)
    if SUBGROUP_LABEL not in pod.metadata.labels:
        message = f"required, PodGroup {job.name!r} has subGroups (leaves: {listed})"
    else:
        message = f"SubGroup {task.subgroup!r} is not a leaf of PodGroup {job.name!r} (leaves: {listed})"
    raise Invalid(label_field(SUBGROUP_LABEL), message)
