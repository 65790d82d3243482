"""Leader election on a real Lease: one holder at a time, hand-over on release or expiry."""

from __future__ import annotations

import time
from typing import Any

import pytest

from kai_ray.cluster.kube.leader import LeaderElector

pytestmark = pytest.mark.kube


def eventually(check: Any, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.1)
    return False


def pair(api: Any, namespace: str, lease_seconds: int = 15) -> tuple[LeaderElector, LeaderElector]:
    return (
        LeaderElector(api, namespace, "kai-ray", "replica-a", lease_seconds),
        LeaderElector(api, namespace, "kai-ray", "replica-b", lease_seconds),
    )


def test_only_one_replica_leads_while_the_holder_renews(kube_api: Any, namespace: str) -> None:
    a, b = pair(kube_api, namespace)
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()


def test_release_hands_over_at_once(kube_api: Any, namespace: str) -> None:
    a, b = pair(kube_api, namespace)
    assert a.try_acquire_or_renew()
    a.release()
    assert b.try_acquire_or_renew()
    assert not a.try_acquire_or_renew()


def test_an_unrenewed_lease_is_taken_over_after_it_expires(kube_api: Any, namespace: str) -> None:
    a, b = pair(kube_api, namespace, lease_seconds=1)
    assert a.try_acquire_or_renew()
    assert eventually(b.try_acquire_or_renew, timeout=15)
    assert not a.try_acquire_or_renew()


def test_an_unreachable_api_server_means_not_leader() -> None:
    from kubernetes import client

    configuration = client.Configuration()
    configuration.host = "https://127.0.0.1:9"
    configuration.retries = False
    api = client.ApiClient(configuration)
    assert not LeaderElector(api, "default", "kai-ray", "lonely").try_acquire_or_renew()
