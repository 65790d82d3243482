"""Shared pydantic bases and field types for the API models.

Two strictness levels, on purpose: Kubernetes' own objects carry far more
than we read, so they accept anything extra; KAI's CRD specs are small and
hand-written, so an unknown key there is almost always a typo and is
rejected (the manifest loader turns that into "unknown field, did you
mean ..."). Python names are snake_case; the wire names are the camelCase
aliases, used for both reading and writing.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError

from kai_ray.api.quantity import DurationError, QuantityError, parse_duration, parse_quantity

ERROR_PREFIX = "kai_"
"""Error types raised by our validators start with this, so their messages are shown verbatim."""


class KubeModel(BaseModel):
    """A part of a Kubernetes object: lenient about fields we do not model."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, serialize_by_alias=True, extra="allow"
    )


class CrdModel(BaseModel):
    """A part of a KAI CRD spec: unknown fields and mistyped values are errors."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        serialize_by_alias=True,
        extra="forbid",
        strict=True,
    )


def _check_quantity(value: Any) -> str:
    """Accept YAML numbers as well as strings, but store and validate the string form."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        value = str(value)
    if isinstance(value, str):
        try:
            parse_quantity(value)
        except QuantityError as error:
            raise PydanticCustomError(f"{ERROR_PREFIX}quantity", str(error)) from None
        return value
    raise PydanticCustomError(f"{ERROR_PREFIX}quantity", f"invalid quantity {value!r}")


def _check_duration(value: str) -> str:
    try:
        parse_duration(value)
    except DurationError as error:
        raise PydanticCustomError(f"{ERROR_PREFIX}duration", str(error)) from None
    return value


def non_negative_duration(value: str | None) -> str | None:
    """Reject negative durations where KAI's CRD documents them as non-negative."""
    if value is not None and parse_duration(value) < 0:
        raise PydanticCustomError(f"{ERROR_PREFIX}duration", f"must not be negative, got {value!r}")
    return value


QUANTITY_PATTERN = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|"
    r"([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
"""The pattern Kubernetes' OpenAPI gives `resource.Quantity`; the API server checks strings with it."""

Quantity = Annotated[
    str,
    BeforeValidator(_check_quantity),
    # The wire type is int-or-string, as in every Kubernetes schema: without this the generated
    # CRDs would declare a plain string and the API server would reject `cpu: 2`.
    WithJsonSchema(
        {
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "pattern": QUANTITY_PATTERN,
            "x-kubernetes-int-or-string": True,
        }
    ),
]
"""A Kubernetes quantity, kept in its wire form; read it with `parse_quantity`."""

Duration = Annotated[str, AfterValidator(_check_duration)]
"""A Go duration string, kept in its wire form; read it with `parse_duration`."""


def _non_negative_quantity(value: str) -> str:
    """Kubernetes' rule for a ResourceList (requests, limits, allocatable): no amount below zero."""
    if parse_quantity(value) < 0:
        raise PydanticCustomError(
            f"{ERROR_PREFIX}quantity", f"must be greater than or equal to 0, got {value!r}"
        )
    return value


ResourceList = dict[str, Annotated[Quantity, AfterValidator(_non_negative_quantity)]]

DNS_LABEL_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
QUALIFIED_NAME_PATTERN = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"
)
DnsLabel = Annotated[str, Field(min_length=1, pattern=DNS_LABEL_PATTERN)]


class OwnerReference(KubeModel):
    api_version: str = ""
    kind: str = ""
    name: str = ""
    uid: str = ""
    controller: bool | None = None
    block_owner_deletion: bool | None = None


class ObjectMeta(KubeModel):
    """The metadata fields the scheduler reads; everything else is kept as extra."""

    name: str
    namespace: str | None = None
    uid: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    creation_timestamp: datetime | None = None
    deletion_timestamp: datetime | None = None
    owner_references: list[OwnerReference] = Field(default_factory=list)


class Condition(KubeModel):
    """A status condition in the common `{type, status, reason, message}` shape."""

    type: str
    status: str = ""
    reason: str = ""
    message: str = ""
    last_transition_time: datetime | None = None
