"""The client's old import path still works for one release, and says where the client went."""

from __future__ import annotations

import importlib
import sys

import pytest

pytestmark = pytest.mark.unit


def test_the_old_client_path_warns_and_gives_the_same_client() -> None:
    sys.modules.pop("kai_ray.client", None)
    with pytest.warns(DeprecationWarning, match=r"kai_ray\.rpc\.client"):
        old = importlib.import_module("kai_ray.client")
    from kai_ray.rpc.client import KaiRayClient, LocalClient

    assert old.KaiRayClient is KaiRayClient
    assert old.LocalClient is LocalClient


def test_the_old_client_path_still_has_every_name_it_had() -> None:
    sys.modules.pop("kai_ray.client", None)
    with pytest.warns(DeprecationWarning):
        old = importlib.import_module("kai_ray.client")
    for name in ("KaiRayClient", "LocalClient", "RemoteError", "SchedulerClient", "WorkloadFollower"):
        assert hasattr(old, name), name
    for name in ("parse_id", "request_from_dict", "submit_manifests", "workload_spec_from_yaml"):
        assert hasattr(old, name), name
