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
