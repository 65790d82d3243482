"""batch/v1 Job and CronJob, as kube-controller-manager creates their children.

- A Job runs `parallelism` (default 1) pods at once, never more than
  `completions` when that is set; those are the pods it creates,
  `<job>-<index>` (Kubernetes appends five random characters, and for an
  Indexed Job the completion index too). Pods carry the Job's name and uid
  labels, old and new spellings, and an Indexed Job's completion index. A
  suspended Job (`spec.suspend`) creates none. Pods that replace finished
  ones are not modelled: the simulator sees one wave.
- A CronJob creates one Job from `spec.jobTemplate`, as if the schedule had
  fired once: `<cronjob>-0`, the name the CronJob controller gives the run
  scheduled at minute 0 (it appends the scheduled time in minutes since the
  epoch; the simulation has no schedule clock). The Job gets the template's
  labels and annotations, not the CronJob's, as upstream. A suspended CronJob
  creates nothing.
"""

from __future__ import annotations

import copy

from kai_ray_operators.expand.model import Child, Expanded, ExpansionContext, Source
from kai_ray_operators.expand.objects import count, new_object, new_pod, pod_template, required_map
from kai_ray_operators.fields import (
    KubeObject,
    annotations_of,
    bool_field,
    labels_of,
    map_field,
    name,
    str_field,
    uid,
)

__all__ = ["expand_cron_job", "expand_job"]

JOB_NAME_LABELS = ("batch.kubernetes.io/job-name", "job-name")
CONTROLLER_UID_LABELS = ("batch.kubernetes.io/controller-uid", "controller-uid")
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
CRON_RUN_SUFFIX = "0"
TEMPLATE = ("spec", "template")


def _active_pods(job: KubeObject) -> int:
    parallelism = count(job, "spec", "parallelism", default=1)
    return min(parallelism, count(job, "spec", "completions", default=parallelism))


def expand_job(context: ExpansionContext, job: KubeObject) -> Expanded:
    pod_template(job, *TEMPLATE)
    pods = _active_pods(job)
    indexed = str_field(job, "spec", "completionMode") == "Indexed"
    if bool_field(job, "spec", "suspend"):
        return Expanded()
    labels = {key: name(job) for key in JOB_NAME_LABELS} | {key: uid(job) for key in CONTROLLER_UID_LABELS}
    children = []
    for index in range(pods):
        completion = {COMPLETION_INDEX: str(index)} if indexed else {}
        pod = new_pod(job, TEMPLATE, f"{name(job)}-{index}", {**labels, **completion}, completion)
        children.append(Child(pod))
    return Expanded(children)


def expand_cron_job(context: ExpansionContext, cron_job: KubeObject) -> Expanded:
    template = required_map(cron_job, "spec", "jobTemplate", what="a Job template")
    if bool_field(cron_job, "spec", "suspend"):
        return Expanded()
    job = new_object(
        "batch/v1",
        "Job",
        cron_job,
        f"{name(cron_job)}-{CRON_RUN_SUFFIX}",
        labels=labels_of(template),
        annotations=annotations_of(template),
        spec=copy.deepcopy(dict(map_field(cron_job, "spec", "jobTemplate", "spec") or {})),
    )
    return Expanded([Child(job, {"spec": Source("spec.jobTemplate.spec")})])
