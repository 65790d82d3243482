"""Tests on a dev cluster that runs kube-controller-manager's `devcluster.CONTROLLERS`.

The parent conftest's session cluster runs none (its tests stand in for controllers
themselves); here `kube_cluster` and `kube_api` are its second session cluster, the one with
the controllers, so `namespace`, `zone`, `serves` and `history` all work on it unchanged.
"""

from __future__ import annotations

from typing import Any

import pytest

from kai_ray.devcluster import DevCluster


@pytest.fixture(scope="session")
def kube_cluster(kube_controllers_cluster: DevCluster) -> DevCluster:
    return kube_controllers_cluster


@pytest.fixture(scope="session")
def kube_api(kube_controllers_api: Any) -> Any:
    return kube_controllers_api
