"""batch/v1 Job and CronJob (spec/integrations.md §5.1, §5.2).

A Job is one PodGroup for all its pods, `minMember 1` unless the Job's
`kai.scheduler/batch-min-member` annotation asks for a gang. A CronJob is
grouped per run: by the Job that owns the pod, ignoring the CronJob itself.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from kai_ray.api.constants import BATCH_MIN_MEMBER_ANNOTATION
from kai_ray_operators.context import GroupingContext
from kai_ray_operators.errors import InvalidWorkload
from kai_ray_operators.fields import (
    KubeObject,
    Step,
    describe,
    field,
    field_path,
    name,
    namespace,
    parse_int,
    str_field,
    uid,
)
from kai_ray_operators.metadata import PodGroupMetadata
from kai_ray_operators.plugins.default import POD_GROUP_PREFIX, default_metadata

__all__ = ["group_cronjob", "group_job", "min_member_override"]


def min_member_override(
    obj: KubeObject, annotations: tuple[Step, ...] = ("metadata", "annotations"), minimum: int = 0
) -> int | None:
    """The `kai.scheduler/batch-min-member` annotation in `annotations` (an int32 ≥ `minimum`), if set."""
    text = str_field(obj, *annotations, BATCH_MIN_MEMBER_ANNOTATION)
    if text is None:
        return None
    value = parse_int(text)
    if value is None or not minimum <= value < 2**31:
        raise InvalidWorkload(
            describe(obj),
            f"{text!r} is not a valid gang size (an integer of at least {minimum})",
            f"{field_path(annotations)}[{BATCH_MIN_MEMBER_ANNOTATION}]",
        )
    return value


def group_job(
    context: GroupingContext, top_owner: KubeObject, pod: KubeObject, all_owners: Sequence[KubeObject]
) -> PodGroupMetadata:
    """Plugin `job`: the default PodGroup with the Job's gang size, or the pod's legacy PodGroup."""
    metadata = default_metadata(context, top_owner, pod)
    if context.config.search_for_legacy_pod_groups:
        legacy = f"{POD_GROUP_PREFIX}-{name(pod)}-{uid(top_owner)}"
        # Before 0.10 every pod of a Job had its own PodGroup; pods already in one stay there.
        if legacy != metadata.name and context.existing_pod_group(namespace(pod), legacy) is not None:
            return dataclasses.replace(metadata, name=legacy, min_available=1)
    gang = min_member_override(top_owner)
    return dataclasses.replace(metadata, min_available=1 if gang is None else gang)


def group_cronjob(
    context: GroupingContext, top_owner: KubeObject, pod: KubeObject, all_owners: Sequence[KubeObject]
) -> PodGroupMetadata:
    """Plugin `cronjob`: the default PodGroup of the run's Job (its labels, not the CronJob's)."""
    references = field(pod, "metadata", "ownerReferences")
    job_name = next(
        (
            str(ref.get("name") or "")
            for ref in references or []
            if isinstance(ref, dict) and ref.get("kind") == "Job"
        ),
        None,
    )
    if job_name is None:
        raise InvalidWorkload(
            describe(pod),
            "no owner reference of type 'Job' (a CronJob's pods belong to a run's Job)",
            "metadata.ownerReferences",
        )
    job = context.reader.get("batch/v1", "Job", namespace(pod), job_name)
    return default_metadata(context, job, pod)
