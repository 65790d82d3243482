"""Azure ML `AmlJob`: the gang is the job's node count (spec/integrations.md §9)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from kai_ray_operators.context import GroupingContext
from kai_ray_operators.errors import InvalidWorkload
from kai_ray_operators.fields import KubeObject, describe, int_field
from kai_ray_operators.metadata import PodGroupMetadata
from kai_ray_operators.plugins.default import default_metadata

__all__ = ["group_aml"]

NODE_COUNT_PATH = ("spec", "job", "options", "envs", "AZUREML_NODE_COUNT")


def group_aml(
    context: GroupingContext, top_owner: KubeObject, pod: KubeObject, all_owners: Sequence[KubeObject]
) -> PodGroupMetadata:
    """Plugin `aml`: `minMember = spec.job.options.envs.AZUREML_NODE_COUNT`, which must be set."""
    metadata = default_metadata(context, top_owner, pod)
    count = int_field(top_owner, *NODE_COUNT_PATH)
    if count is None or count < 0:
        raise InvalidWorkload(
            describe(top_owner),
            "the AzureML node count is required (a non-negative integer)",
            ".".join(NODE_COUNT_PATH),
        )
    return dataclasses.replace(metadata, min_available=count)
