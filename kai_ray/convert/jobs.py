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

from dataclasses import dataclass, replace
from typing import Final

from kai_ray.api import Manifest, ManifestProblem, Pod, PodGroup
from kai_ray.api.constants import (
    DEFAULT_SUBGROUP,
    POD_GROUP_NAME_ANNOTATION,
    SCHEDULER_NAME,
    SUBGROUP_LABEL,
)
from kai_ray.convert.common import Invalid, annotation_field, created, label_field
from kai_ray.convert.podgroups import Priorities, job_from_podgroup
from kai_ray.convert.pods import PodContext, gpu_disagreement, held_task, task_from_pod
from kai_ray.convert.queues import QueueIndex
from kai_ray.convert.volumes import NO_STORAGE, StorageObjects, with_volume_needs
from kai_ray.model.objects import OCCUPYING, Blocker, BlockerCause, HeldPod, JobSpec, TaskSpec

_Key = tuple[str, str]


@dataclass(frozen=True)
class PodOutcome:
    """What one pod becomes: a task of its job, or held on its node, with at most one problem."""

    task: TaskSpec | None = None
    held: HeldPod | None = None
    problem: ManifestProblem | None = None


@dataclass(frozen=True)
class NamedJob:
    """The PodGroup a pod names, as conversion left it: converted, skipped, or absent."""

    job: JobSpec | None
    skipped: str | None = None
    """Why the PodGroup was left out (its problem, field and message), None when it was not:
    its pods say it, so a pod waiting on a missing queue names the queue."""


def pod_group_key(pod: Pod) -> _Key | None:
    """(namespace, PodGroup name) the pod names, or None when it names none (not grouped yet)."""
    group = pod.metadata.annotations.get(POD_GROUP_NAME_ANNOTATION)
    return None if group is None else (pod.metadata.namespace or "", group)


def pod_outcome(
    manifest: Manifest[Pod],
    named: NamedJob,
    context: PodContext,
    scheduler_name: str = SCHEDULER_NAME,
    storage: StorageObjects = NO_STORAGE,
) -> PodOutcome:
    """Pods of this scheduler join the PodGroup they name; every other pod only occupies its node.

    `named`: the PodGroup the pod names (ignored for pods that name none or are not ours).
    `storage`: what its volumes and ConfigMaps are resolved against (`convert.volumes`), only for
    a pod that joins its job: a held pod occupies its node whatever they say.
    """
    if manifest.obj.spec.scheduler_name != scheduler_name:
        return _held_outcome(manifest, context, foreign=True)
    key = pod_group_key(manifest.obj)
    if key is None:
        return _held_outcome(manifest, context, foreign=False)
    try:
        task = with_volume_needs(task_from_pod(manifest, context), manifest.obj, storage)
        job = _named_job(named, key)
        _check_leaf(job, task, manifest.obj)
    except Invalid as error:
        problem = manifest.problem(error.field, error.message)
        blocked = _blocked_task(manifest, named, error)
        if blocked is not None:
            return PodOutcome(task=blocked, problem=problem)
        return PodOutcome(held=_held(manifest, context, foreign=False), problem=problem)
    return PodOutcome(task=task)


def _blocked_task(manifest: Manifest[Pod], named: NamedJob, error: Invalid) -> TaskSpec | None:
    """A waiting pod of a PodGroup whose own fields are refused stays in its job as a task that
    never places, its blocker naming the field: the job's pending reason (and so its PodGroup's
    condition) then says what is wrong, and a gang does not run without it. A pod on a node, one
    whose PodGroup is missing, or one naming no leaf of its PodGroup's tree is only held."""
    pod, job = manifest.obj, named.job
    if job is None or named.skipped is not None or pod.spec.node_name or pod.status.phase != "Pending":
        return None
    subgroup = pod.metadata.labels.get(SUBGROUP_LABEL, DEFAULT_SUBGROUP)
    if subgroup not in {pod_set.name for pod_set in job.subgroups.all_pod_sets()}:
        return None
    words = ": ".join(part for part in (error.field, error.message) if part)
    return TaskSpec(
        name=pod.metadata.name,
        subgroup=subgroup,
        labels=dict(pod.metadata.labels),
        created=created(manifest),
        blockers=(Blocker(BlockerCause.INVALID_CONSTRAINT, words),),
    )


def occupant_outcome(manifest: Manifest[Pod], context: PodContext, scheduler_name: str) -> HeldPod | None:
    """A pod already reported as a problem: it only holds what it occupies on its node."""
    return _held(manifest, context, foreign=manifest.obj.spec.scheduler_name != scheduler_name)


def _held_outcome(manifest: Manifest[Pod], context: PodContext, *, foreign: bool) -> PodOutcome:
    """A pod that only holds its node, with a warning when what it holds is a guess (whole GPUs
    and GPU-sharing annotations at once: the larger count is held)."""
    held = _held(manifest, context, foreign=foreign)
    note = gpu_disagreement(manifest) if held is not None else None
    if note is None:
        return PodOutcome(held=held)
    problem = manifest.problem(note.field, note.message)
    return PodOutcome(held=held, problem=replace(problem, warning=True, reason=AMBIGUOUS_GPU_REQUEST))


def _held(manifest: Manifest[Pod], context: PodContext, *, foreign: bool) -> HeldPod | None:
    task = held_task(manifest, context)
    if task is not None and task.status in OCCUPYING:
        return HeldPod(manifest.obj.metadata.namespace or "", task, foreign)
    return None


def _named_job(named: NamedJob, key: _Key) -> JobSpec:
    field = annotation_field(POD_GROUP_NAME_ANNOTATION)
    if named.skipped is not None:
        raise Invalid(field, f"PodGroup {key[1]!r} is not scheduled: {named.skipped}")
    if named.job is None:
        raise Invalid(field, f"PodGroup {key[1]!r} does not exist in namespace {key[0]!r}")
    return named.job


PRIORITY_CLASS_NOT_FOUND: Final = "PriorityClassNotFound"
"""The warning of a PodGroup naming a PriorityClass that does not exist."""
AMBIGUOUS_GPU_REQUEST: Final = "AmbiguousGpuRequest"
"""The warning of a placed pod that asks for whole GPUs and shares GPUs at once."""
WARNING_REASONS: Final = frozenset({PRIORITY_CLASS_NOT_FOUND})
"""The `ManifestProblem.reason`s of PodGroup warnings: the condition types said on PodGroups."""


def skip_reason(problem: ManifestProblem | None) -> str:
    """What a skipped PodGroup's pods say about it: its problem's field and message."""
    return "it could not be read" if problem is None else problem.detail()


def podgroup_outcome(
    manifest: Manifest[PodGroup], queues: QueueIndex, priorities: Priorities
) -> tuple[JobSpec | None, ManifestProblem | None]:
    """The PodGroup's job without tasks yet, or the problem that skips it; a job whose
    PriorityClass does not exist is scheduled at the default priority, as KAI's is, and comes
    with a warning that says so (KAI says nothing, and the job silently loses its rank)."""
    try:
        job = job_from_podgroup(manifest, queues, priorities)
    except Invalid as error:
        return None, manifest.problem(error.field, error.message)
    class_name = manifest.obj.spec.priority_class_name
    if not class_name or priorities.knows(class_name):
        return job, None
    message = (
        f"PriorityClass {class_name!r} does not exist; scheduled at the default priority {job.priority} "
        f"({'preemptible' if job.preemptible else 'non-preemptible'})"
    )
    warning = manifest.problem("spec.priorityClassName", message)
    return job, replace(warning, warning=True, reason=PRIORITY_CLASS_NOT_FOUND)


class JobAssembler:
    """Collects jobs from PodGroups first, then files every pod into a job or onto its node."""

    def __init__(
        self,
        queues: QueueIndex,
        priorities: Priorities,
        pods: PodContext,
        problems: list[ManifestProblem],
        scheduler_name: str = SCHEDULER_NAME,
        storage: StorageObjects = NO_STORAGE,
    ) -> None:
        self._scheduler_name = scheduler_name
        self._storage = storage
        self._queues = queues
        self._priorities = priorities
        self._pods = pods
        self._problems = problems
        self._jobs: dict[_Key, JobSpec] = {}
        self._skipped: dict[_Key, str] = {}
        self.held: list[HeldPod] = []

    @property
    def jobs(self) -> list[JobSpec]:
        return list(self._jobs.values())

    def add_podgroups(self, manifests: list[Manifest[PodGroup]]) -> None:
        for manifest in manifests:
            key = (manifest.obj.metadata.namespace or "", manifest.obj.metadata.name)
            job, problem = podgroup_outcome(manifest, self._queues, self._priorities)
            if job is None:
                self._skipped[key] = skip_reason(problem)
            else:
                self._jobs[key] = job
            if problem is not None:
                self._problems.append(problem)

    def add_pods(self, manifests: list[Manifest[Pod]]) -> None:
        for manifest in manifests:
            key = pod_group_key(manifest.obj)
            named = NamedJob(None) if key is None else NamedJob(self._jobs.get(key), self._skipped.get(key))
            outcome = pod_outcome(manifest, named, self._pods, self._scheduler_name, self._storage)
            if outcome.problem is not None:
                self._problems.append(outcome.problem)
            if outcome.held is not None:
                self.held.append(outcome.held)
            if outcome.task is not None:
                assert key is not None  # a task always joins the job it names
                self._jobs[key].tasks.append(outcome.task)

    def add_occupants(self, manifests: list[Manifest[Pod]]) -> None:
        """Pods already reported as problems: they only hold what they occupy on their node."""
        for manifest in manifests:
            held = occupant_outcome(manifest, self._pods, self._scheduler_name)
            if held is not None:
                self.held.append(held)


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
