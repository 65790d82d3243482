"""JobSet (jobset.x-k8s.io/v1alpha2): `replicas` batch Jobs per replicated job.

As the JobSet controller does: replicated job `rj` (replicas default 1) makes
Jobs `<jobset>-<rj>-<k>` for k below its replicas, each from `rj.template`
(its labels and annotations, its spec), owned by the JobSet. The Job and its
pod template get `jobset.sigs.k8s.io/jobset-name`, `…/replicatedjob-name`
and `…/job-index` (k), which the JobSet grouper places pods by. Each Job then
makes its pods (`batch.py`). A suspended JobSet creates nothing.

Not modelled: `startupPolicyOrder: InOrder` (the controller creates a
replicated job's Jobs only once the previous ones are ready; here all exist
from the start), DNS hostnames and subdomains, success and failure policies.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from kai_ray_operators.errors import InvalidWorkload
from kai_ray_operators.expand.model import Child, Expanded, ExpansionContext, Source
from kai_ray_operators.expand.objects import count, new_object, required_map, required_name, template_with
from kai_ray_operators.fields import (
    KubeObject,
    Step,
    annotations_of,
    bool_field,
    describe,
    field_path,
    labels_of,
    list_field,
    name,
)
from kai_ray_operators.plugins.jobset import JOB_INDEX_LABEL, REPLICATED_JOB_LABEL

__all__ = ["expand_jobset"]

JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"


def expand_jobset(context: ExpansionContext, jobset: KubeObject) -> Expanded:
    replicated_jobs = list_field(jobset, "spec", "replicatedJobs")
    if not replicated_jobs:
        raise InvalidWorkload(
            describe(jobset), "at least one replicated job is required", "spec.replicatedJobs"
        )
    plan: list[tuple[tuple[Step, ...], str, int, Mapping[str, Any]]] = []
    for index in range(len(replicated_jobs)):
        path: tuple[Step, ...] = ("spec", "replicatedJobs", index)
        required_map(jobset, *path, what="a replicated job")
        job_name = required_name(jobset, *path, "name")
        if any(job_name == seen for _, seen, _, _ in plan):
            raise InvalidWorkload(
                describe(jobset), f"{job_name!r} is used twice", field_path((*path, "name"))
            )
        replicas = count(jobset, *path, "replicas", default=1)
        template = required_map(jobset, *path, "template", what="a Job template")
        required_map(jobset, *path, "template", "spec", what="a Job spec")
        plan.append((path, job_name, replicas, template))
    if bool_field(jobset, "spec", "suspend"):
        return Expanded()
    children = []
    for path, job_name, replicas, template in plan:
        for k in range(replicas):
            labels = {
                JOBSET_NAME_LABEL: name(jobset),
                REPLICATED_JOB_LABEL: job_name,
                JOB_INDEX_LABEL: str(k),
            }
            spec = copy.deepcopy(dict(template["spec"]))
            if isinstance(spec.get("template"), Mapping):
                spec["template"] = template_with(spec["template"], labels)
            job = new_object(
                "batch/v1",
                "Job",
                jobset,
                f"{name(jobset)}-{job_name}-{k}",
                labels={**labels_of(template), **labels},
                annotations=annotations_of(template),
                spec=spec,
            )
            children.append(Child(job, {"spec": Source(field_path((*path, "template", "spec")))}))
    return Expanded(children)
