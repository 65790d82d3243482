"""`Topology` (kai.scheduler/v1alpha1, cluster-scoped): named node-label hierarchy (spec §5).

The CRD's CEL rules (unique labels, hostname only last) and the webhook's
alias rules are checked here because they need only this one object.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator
from pydantic_core import PydanticCustomError

from kai_ray.api._base import ERROR_PREFIX, QUALIFIED_NAME_PATTERN, CrdModel, ObjectMeta
from kai_ray.api.constants import HOSTNAME_LABEL, TOPOLOGY_API_VERSION

QualifiedName = Annotated[str, Field(min_length=1, max_length=316, pattern=QUALIFIED_NAME_PATTERN)]


class TopologyLevel(CrdModel):
    node_label: QualifiedName
    alias: QualifiedName | None = None


LEVEL_RULES: list[dict[str, str]] = [
    {
        "rule": "self.map(l, l.nodeLabel) == oldSelf.map(l, l.nodeLabel)",
        "message": "nodeLabel structure is immutable; only aliases may be edited",
    },
    {
        "rule": "size(self.filter(i, size(self.filter(j, j.nodeLabel == i.nodeLabel)) > 1)) == 0",
        "message": "nodeLabel must be unique",
    },
    {
        "rule": f"size(self.filter(i, i.nodeLabel == '{HOSTNAME_LABEL}')) == 0"
        f" || self[size(self) - 1].nodeLabel == '{HOSTNAME_LABEL}'",
        "message": f"the {HOSTNAME_LABEL} label can only be used at the lowest level of topology",
    },
]
"""KAI's CEL rules on `spec.levels`, verbatim, so the API server enforces them as it does for KAI.

The last two repeat `_consistent_levels` below; the first (immutability) needs the old object,
which only the API server has.
"""


class TopologySpec(CrdModel):
    """Levels ordered from the coarsest (e.g. block) to the finest (e.g. host)."""

    levels: Annotated[
        list[TopologyLevel],
        Field(
            min_length=1,
            max_length=16,
            json_schema_extra={"x-kubernetes-list-type": "atomic", "x-kubernetes-validations": LEVEL_RULES},
        ),
    ]

    @field_validator("levels")
    @classmethod
    def _consistent_levels(cls, levels: list[TopologyLevel]) -> list[TopologyLevel]:
        labels = [level.node_label for level in levels]
        aliases = [level.alias for level in levels if level.alias]
        if len(set(labels)) != len(labels):
            raise _invalid("nodeLabel values must be unique")
        if HOSTNAME_LABEL in labels[:-1]:
            raise _invalid(f"{HOSTNAME_LABEL} is only allowed as the last level")
        if len(set(aliases)) != len(aliases) or set(aliases) & set(labels):
            raise _invalid("aliases must be unique and differ from every nodeLabel")
        return levels


def _invalid(message: str) -> PydanticCustomError:
    return PydanticCustomError(f"{ERROR_PREFIX}topology", message)


class Topology(CrdModel):
    api_version: Literal["kai.scheduler/v1alpha1"] = TOPOLOGY_API_VERSION
    kind: Literal["Topology"] = "Topology"
    metadata: ObjectMeta
    spec: TopologySpec
