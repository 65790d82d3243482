"""Deprecated import path: the client lives in `kai_ray.rpc.client` with the rest of the gRPC API,
and the requests built from files in `kai_ray.rpc.requests`.

Kept for one release so that scripts written against `from kai_ray.client import KaiRayClient`
keep working; importing it warns (`DeprecationWarning`) and names the new path.
"""

from __future__ import annotations

import warnings

from kai_ray.rpc import client as _client
from kai_ray.rpc import requests as _requests
from kai_ray.rpc.client import *  # noqa: F403 (the old module's names, whatever they are now)
from kai_ray.rpc.requests import *  # noqa: F403

__all__ = [*_client.__all__, *_requests.__all__]

warnings.warn(
    "kai_ray.client moved to kai_ray.rpc.client; the old import path goes in the next release",
    DeprecationWarning,
    stacklevel=2,
)
