"""Group pods into jobs, and count every pod that occupies a node, whoever scheduled it.

A pod of this scheduler joins the PodGroup it names.  A pod that names none
waits for the podgrouper (`kai_ray_operators`), which on a cluster and in the
simulator alike gives it its PodGroup before this conversion runs; until then
it is not scheduled, and only holds its node if it is already on one.

Every pod that holds node resources and is not scheduled here becomes a
`HeldPod` on its node: pods of other schedulers, and pods of ours that cannot
be interpreted (reported as problems) or are not grouped yet.  A node is
never offered twice.
"""

from __future__ import annotations

from kai_ray.api import Manifest, ManifestProblem, Pod, PodGroup
from kai_ray.api.constants import (
    POD_GROUP_NAME_ANNOTATION,
    SCHEDULER_NAME,
    SUBGROUP_LABEL,
)
from kai_ray.convert.common import Invalid, annotation_field, label_field
from kai_ray.convert.podgroups import Priorities, job_from_podgroup
from kai_ray.convert.pods import PodContext, held_task, task_from_pod
from kai_ray.convert.queues import QueueIndex
from kai_ray.model.objects import OCCUPYING, HeldPod, JobSpec, TaskSpec

_Key = tuple[str, str]


class JobAssembler:
    """Collects jobs from PodGroups first, then files every pod into a job or onto its node."""

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
        self.held: list[HeldPod] = []

    @property
    def jobs(self) -> list[JobSpec]:
        return list(self._jobs.values())

    def add_podgroups(self, manifests: list[Manifest[PodGroup]]) -> None:
        for manifest in manifests:
            self._add_podgroup(manifest)

    def add_pods(self, manifests: list[Manifest[Pod]]) -> None:
        """Pods of this scheduler are scheduled; every other pod only occupies its node."""
        for manifest in manifests:
            if manifest.obj.spec.scheduler_name != self._scheduler_name:
                self._hold(manifest, foreign=True)
                continue
            try:
                self._add_pod(manifest)
            except Invalid as error:
                self._problems.append(manifest.problem(error.field, error.message))
                self._hold(manifest, foreign=False)

    def add_occupants(self, manifests: list[Manifest[Pod]]) -> None:
        """Pods already reported as problems: they only hold what they occupy on their node."""
        for manifest in manifests:
            self._hold(manifest, foreign=manifest.obj.spec.scheduler_name != self._scheduler_name)

    def _add_podgroup(self, manifest: Manifest[PodGroup]) -> JobSpec | None:
        key = (manifest.obj.metadata.namespace or "", manifest.obj.metadata.name)
        try:
            job = job_from_podgroup(manifest, self._queues, self._priorities)
        except Invalid as error:
            self._skipped.add(key)
            self._problems.append(manifest.problem(error.field, error.message))
            return None
        self._jobs[key] = job
        return job

    def _add_pod(self, manifest: Manifest[Pod]) -> None:
        group = manifest.obj.metadata.annotations.get(POD_GROUP_NAME_ANNOTATION)
        if group is None:
            self._hold(manifest, foreign=False)
            return
        task = task_from_pod(manifest, self._pods)
        job = self._named_job(manifest, group)
        _check_leaf(job, task, manifest.obj)
        job.tasks.append(task)

    def _hold(self, manifest: Manifest[Pod], *, foreign: bool) -> None:
        task = held_task(manifest, self._pods)
        if task is not None and task.status in OCCUPYING:
            self.held.append(HeldPod(manifest.obj.metadata.namespace or "", task, foreign))

    def _named_job(self, manifest: Manifest[Pod], group: str) -> JobSpec:
        key = (manifest.obj.metadata.namespace or "", group)
        field = annotation_field(POD_GROUP_NAME_ANNOTATION)
        if key in self._skipped:
            raise Invalid(field, f"PodGroup {group!r} was skipped (see its own problem)")
        if key not in self._jobs:
            raise Invalid(field, f"PodGroup {group!r} does not exist in namespace {key[0]!r}")
        return self._jobs[key]


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
