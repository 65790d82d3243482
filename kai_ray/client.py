"""Deprecated import path: the client lives in `kai_ray.rpc.client` with the rest of the gRPC API.

Kept for one release so that scripts written against `from kai_ray.client import KaiRayClient`
keep working; importing it warns (`DeprecationWarning`) and names the new path.
"""

from __future__ import annotations

import warnings

from kai_ray.rpc.client import (
    DEFAULT_RECONNECT_TIMEOUT,
    DEFAULT_TIMEOUT,
    FIELD_METADATA_KEY,
    KaiRayClient,
    LocalClient,
    RemoteError,
    SchedulerClient,
    WorkloadFollower,
    WorkloadSource,
)
from kai_ray.rpc.requests import (
    is_manifest_document,
    load_documents,
    manifests_request,
    parse_id,
    request_from_dict,
    submit_manifests,
    workload_spec_from_yaml,
)

__all__ = [
    "DEFAULT_RECONNECT_TIMEOUT",
    "DEFAULT_TIMEOUT",
    "FIELD_METADATA_KEY",
    "KaiRayClient",
    "LocalClient",
    "RemoteError",
    "SchedulerClient",
    "WorkloadFollower",
    "WorkloadSource",
    "is_manifest_document",
    "load_documents",
    "manifests_request",
    "parse_id",
    "request_from_dict",
    "submit_manifests",
    "workload_spec_from_yaml",
]

warnings.warn(
    "kai_ray.client moved to kai_ray.rpc.client; the old import path goes in the next release",
    DeprecationWarning,
    stacklevel=2,
)
