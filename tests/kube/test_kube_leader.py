"""Leader election on a real Lease and the fence it feeds (issue 8, item 2).

One holder at a time; hand-over on release; expiry judged by the observing
replica's own clock (never the holder's timestamps); renewal on a thread of its
own; a leader that cannot renew within the deadline loses, and from that moment
the fenced client sends no write at all.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from kai_ray.cluster.kube.fence import FencedApiClient, Leadership, NotLeader
from kai_ray.cluster.kube.leader import LeaderElector, LeaseTiming, lease_name

pytestmark = pytest.mark.kube

FAST = LeaseTiming(lease_duration=3, renew_deadline=2, retry_period=0.25)


class FakeClock:
    """A monotonic clock the test moves by hand, so expiry needs no waiting."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def elector(api: Any, namespace: str, identity: str, **kwargs: Any) -> LeaderElector:
    return LeaderElector(api, namespace, "kai-ray-test", identity, **kwargs)


def holder(api: Any, namespace: str) -> str | None:
    lease = client.CoordinationV1Api(api).read_namespaced_lease("kai-ray-test", namespace)
    return lease.spec.holder_identity if lease.spec else None


def test_the_lease_is_named_after_the_scheduler() -> None:
    assert lease_name("kai-scheduler") == "kai-ray-kai-scheduler"
    assert lease_name("team-x") != lease_name("kai-scheduler")


def test_only_one_replica_leads_while_the_holder_renews(kube_api: Any, namespace: str) -> None:
    a, b = elector(kube_api, namespace, "a"), elector(kube_api, namespace, "b")
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()
    assert a.leadership.is_leader() and not b.leadership.is_leader()


def test_release_hands_over_at_once(kube_api: Any, namespace: str) -> None:
    a, b = elector(kube_api, namespace, "a"), elector(kube_api, namespace, "b")
    assert a.try_acquire_or_renew()
    a.release()
    assert not a.leadership.is_leader()
    assert b.try_acquire_or_renew()
    assert not a.try_acquire_or_renew()


def test_expiry_is_judged_by_the_observers_clock_not_the_holders_timestamps(
    kube_api: Any, namespace: str
) -> None:
    """A holder whose clock runs years behind must not lose its lease to a fast standby at once."""
    ancient = dt.datetime(2000, 1, 1, 0, 0, 0, 1, tzinfo=dt.UTC)  # MicroTime needs a fraction
    client.CoordinationV1Api(kube_api).create_namespaced_lease(
        namespace,
        client.V1Lease(
            metadata=client.V1ObjectMeta(name="kai-ray-test"),
            spec=client.V1LeaseSpec(
                holder_identity="skewed", lease_duration_seconds=15, renew_time=ancient, acquire_time=ancient
            ),
        ),
    )
    clock = FakeClock()
    standby = elector(kube_api, namespace, "standby", clock=clock)
    assert not standby.try_acquire_or_renew()  # first seen now: 15 s from now on *our* clock
    clock.now += 14
    assert not standby.try_acquire_or_renew()
    clock.now += 2
    assert standby.try_acquire_or_renew()
    assert holder(kube_api, namespace) == "standby"


def test_a_changed_record_restarts_the_observed_clock(kube_api: Any, namespace: str) -> None:
    clock = FakeClock()
    a = elector(kube_api, namespace, "a")
    standby = elector(kube_api, namespace, "standby", clock=clock)
    assert a.try_acquire_or_renew()
    assert not standby.try_acquire_or_renew()
    clock.now += 10
    assert a.try_acquire_or_renew()  # renewed: a new record
    assert not standby.try_acquire_or_renew()
    clock.now += 10  # 20 s since the first look, 10 s since the renewal was seen
    assert not standby.try_acquire_or_renew()


@contextlib.contextmanager
def leading(candidate: LeaderElector) -> Iterator[threading.Thread]:
    """The elector's thread, running (and leading) inside the block, stopped after it."""
    stop = threading.Event()
    thread = threading.Thread(target=candidate.run, args=(stop,), daemon=True)
    thread.start()
    try:
        assert candidate.wait_acquired(10)
        yield thread
    finally:
        stop.set()
        thread.join(5)


def test_the_leader_renews_on_its_own_thread_and_the_fence_follows(kube_api: Any, namespace: str) -> None:
    a = elector(kube_api, namespace, "a", timing=FAST)
    with leading(a) as thread:
        first = client.CoordinationV1Api(kube_api).read_namespaced_lease("kai-ray-test", namespace)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # several renewals pass while nothing else happens
            later = client.CoordinationV1Api(kube_api).read_namespaced_lease("kai-ray-test", namespace)
            if later.spec.renew_time > first.spec.renew_time and a.leadership.is_leader():
                break
            time.sleep(0.1)
        else:
            pytest.fail("the lease was not renewed by the elector's thread")
    assert not thread.is_alive()


def test_a_leader_that_cannot_renew_loses_and_is_fenced(kube_api: Any, namespace: str) -> None:
    a = elector(kube_api, namespace, "a", timing=FAST)
    with leading(a) as thread:
        fenced = FencedApiClient(kube_api.configuration, a.leadership)
        core = client.CoreV1Api(fenced)
        core.create_namespaced_config_map(
            namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="ok"))
        )
        # Someone else takes the lease by force: every renewal of `a` now fails.
        leases = client.CoordinationV1Api(kube_api)
        lease = leases.read_namespaced_lease("kai-ray-test", namespace)
        lease.spec.holder_identity = "usurper"
        lease.spec.renew_time = dt.datetime.now(dt.UTC)
        leases.replace_namespaced_lease("kai-ray-test", namespace, lease)
        assert a.leadership.wait_lost(FAST.renew_deadline + 5), "the elector never gave up"
        assert not a.leadership.is_leader()
        with pytest.raises(NotLeader):
            core.create_namespaced_config_map(
                namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="late"))
            )
        assert [c.metadata.name for c in core.list_namespaced_config_map(namespace).items] == [
            "ok"
        ]  # reads go on
        thread.join(5)
        assert not thread.is_alive()  # it stopped by itself: leadership is lost for good


def test_the_fence_is_a_deadline_not_a_flag() -> None:
    """A process resumed after a pause is fenced before any thread has noticed anything."""
    clock = FakeClock()
    leadership = Leadership(renew_deadline=10, clock=clock)
    assert not leadership.is_leader()  # never renewed
    leadership.renewed(sent_at=clock.now)
    clock.now += 9.9
    assert leadership.is_leader()
    clock.now += 0.2  # e.g. SIGSTOP past the deadline: nothing ran, yet the fence is down
    assert not leadership.is_leader()
    leadership.renewed(sent_at=clock.now)
    assert leadership.is_leader()
    leadership.lose()
    leadership.renewed(sent_at=clock.now)
    assert not leadership.is_leader()  # lost for good


def test_an_unreachable_api_server_means_not_leader() -> None:
    configuration = client.Configuration()
    configuration.host = "https://127.0.0.1:9"
    configuration.retries = False
    api = client.ApiClient(configuration)
    lonely = LeaderElector(api, "default", "kai-ray", "lonely")
    assert not lonely.try_acquire_or_renew()
    assert not lonely.leadership.is_leader()


def test_timings_must_nest() -> None:
    with pytest.raises(ValueError, match="retry period < renew deadline < lease duration"):
        LeaseTiming(lease_duration=10, renew_deadline=10, retry_period=2)
