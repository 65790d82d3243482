"""Bare pods, Spark included (spec/integrations.md §5.5).

A pod without owners is its own top owner: `pg-<pod>-<uid>`, owned by the pod.
Spark's driver and executors carry `spark-app-name` and `spark-app-selector`;
executors are owned by the driver, so both resolve to the driver as top owner,
and the PodGroup is named after the selector so the whole application shares it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from kai_ray_operators.context import GroupingContext
from kai_ray_operators.fields import KubeObject, labels_of
from kai_ray_operators.metadata import PodGroupMetadata
from kai_ray_operators.plugins.default import default_metadata

__all__ = ["group_pod_job", "group_spark"]

SPARK_APP_NAME_LABEL = "spark-app-name"
SPARK_APP_SELECTOR_LABEL = "spark-app-selector"


def group_spark(
    context: GroupingContext, top_owner: KubeObject, pod: KubeObject, all_owners: Sequence[KubeObject]
) -> PodGroupMetadata:
    """Plugin `spark`: the default PodGroup, named by the pod's `spark-app-selector`."""
    metadata = default_metadata(context, top_owner, pod)
    return dataclasses.replace(metadata, name=labels_of(pod).get(SPARK_APP_SELECTOR_LABEL, ""))


def group_pod_job(
    context: GroupingContext, top_owner: KubeObject, pod: KubeObject, all_owners: Sequence[KubeObject]
) -> PodGroupMetadata:
    """Plugin `podjob` (top owner `v1 Pod`): Spark when both Spark labels are there, else the default."""
    pod_labels = labels_of(pod)
    if SPARK_APP_NAME_LABEL in pod_labels and SPARK_APP_SELECTOR_LABEL in pod_labels:
        return group_spark(context, top_owner, pod, all_owners)
    return default_metadata(context, top_owner, pod)
