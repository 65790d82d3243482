"""Leader election on a real Lease and the fence it feeds (issue 8, item 2; issue 35, item 3).

One holder at a time; hand-over on release; expiry judged by the observing
replica's own clock (never the holder's timestamps); renewal on a thread of its
own; a leader that cannot renew within the deadline is fenced, so the fenced
client sends no write at all; it leads again if the lease is still its own when
it can renew (an outage nobody used), and loses for good if another replica took
the lease meanwhile, even one that gave it back since.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kube_proxy import FlakyProxy
from kubernetes import client

from kai_ray.cluster.kube.fence import FencedApiClient, Leadership, NotLeader
from kai_ray.cluster.kube.leader import LeaderElector, LeaseTiming, Standing, lease_name
from kai_ray.devcluster import DevCluster

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


@pytest.fixture
def proxied_api(kube_cluster: DevCluster, proxy: FlakyProxy) -> Iterator[Any]:
    """A client of the session's API server through `proxy`, which the test can cut off."""
    configuration = kube_cluster.configuration()
    configuration.host = f"https://127.0.0.1:{proxy.port}"
    api = client.ApiClient(configuration)
    try:
        yield api
    finally:
        api.close()


def wait_for(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)


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
        assert candidate.leadership.wait_leading(10)
        yield thread
    finally:
        stop.set()
        thread.join(5)


def test_a_lease_still_ours_after_an_outage_is_renewed_and_the_fence_lifts(
    proxied_api: Any, kube_api: Any, namespace: str, proxy: FlakyProxy
) -> None:
    clock = FakeClock()
    a = elector(proxied_api, namespace, "a", clock=clock)
    assert a.try_acquire_or_renew()
    proxy.down()
    clock.now += 20  # past the renew deadline (10 s) and the lease (15 s)
    assert not a.try_acquire_or_renew()
    assert not a.leadership.is_leader() and not a.leadership.lost  # fenced, not lost
    proxy.up()
    assert a.try_acquire_or_renew()
    assert a.leadership.is_leader()
    lease = client.CoordinationV1Api(kube_api).read_namespaced_lease("kai-ray-test", namespace)
    assert (lease.spec.holder_identity, lease.spec.lease_transitions) == ("a", 0)


def take_over(api: Any, namespace: str, identity: str) -> LeaderElector:
    """Another replica that finds the lease unchanged for a whole lease duration and takes it."""
    clock = FakeClock()
    usurper = elector(api, namespace, identity, clock=clock)
    assert not usurper.try_acquire_or_renew()  # first sight of the record
    clock.now += LeaseTiming().lease_duration + 1
    assert usurper.try_acquire_or_renew()
    return usurper


def hand_back(api: Any, namespace: str, to: str) -> None:
    """What a second process with the old leader's identity would write: its name, and the
    transitions count the take-over raised."""
    leases = client.CoordinationV1Api(api)
    lease = leases.read_namespaced_lease("kai-ray-test", namespace)
    lease.spec.holder_identity = to
    leases.replace_namespaced_lease("kai-ray-test", namespace, lease)


@pytest.mark.parametrize(
    ("afterwards", "holder_now", "why"),
    [
        ("kept", "b", "replica b holds lease {ns}/kai-ray-test now"),
        ("released", "", "lease {ns}/kai-ray-test has no holder now"),
        (
            "handed back",
            "a",
            "lease {ns}/kai-ray-test changed hands since this replica renewed it (transitions 1, was 0)",
        ),
    ],
)
def test_a_lease_taken_during_an_outage_is_lost_for_good_even_if_given_back(
    proxied_api: Any,
    kube_api: Any,
    namespace: str,
    proxy: FlakyProxy,
    caplog: pytest.LogCaptureFixture,
    afterwards: str,
    holder_now: str,
    why: str,
) -> None:
    clock = FakeClock()
    a = elector(proxied_api, namespace, "a", clock=clock)
    assert a.try_acquire_or_renew()
    proxy.down()
    clock.now += 20
    assert not a.try_acquire_or_renew()
    b = take_over(kube_api, namespace, "b")
    if afterwards == "released":
        b.release()
    elif afterwards == "handed back":
        hand_back(kube_api, namespace, "a")
    proxy.up()
    caplog.clear()
    with caplog.at_level(logging.ERROR, logger="kai_ray.cluster.kube.leader"):
        assert not a.try_acquire_or_renew()
    assert a.leadership.lost and not a.leadership.is_leader()
    assert caplog.messages == [f"lost leadership: {why.format(ns=namespace)}; stopping"]
    assert not a.try_acquire_or_renew()  # for good: it never writes the lease again
    assert holder(kube_api, namespace) == holder_now


def test_a_deleted_lease_is_lost_not_created_again(kube_api: Any, namespace: str) -> None:
    a = elector(kube_api, namespace, "a")
    assert a.try_acquire_or_renew()
    client.CoordinationV1Api(kube_api).delete_namespaced_lease("kai-ray-test", namespace)
    assert not a.try_acquire_or_renew()
    assert a.leadership.lost
    with pytest.raises(client.ApiException, match="Not Found"):
        holder(kube_api, namespace)


def test_the_elector_thread_rides_out_an_outage_longer_than_the_lease(
    proxied_api: Any, namespace: str, proxy: FlakyProxy, caplog: pytest.LogCaptureFixture
) -> None:
    """Fenced while the server is away, and the owner waits (`wait_to_lead`) instead of quitting;
    back, the lease is still its own: renewed on the same thread, and the owner goes on."""
    caplog.set_level(logging.INFO, logger="kai_ray.cluster.kube.leader")
    a = elector(proxied_api, namespace, "a", timing=FAST)
    with leading(a) as thread:
        proxy.down()
        wait_for(lambda: not a.leadership.is_leader(), FAST.renew_deadline + 5, "the fence")
        stop = threading.Event()
        standing: list[Standing] = []
        owner = threading.Thread(target=lambda: standing.append(a.wait_to_lead(stop)), daemon=True)
        owner.start()
        assert not proxy.wait_refused(10**6, timeout=FAST.lease_duration)  # the outage goes on
        assert standing == [] and thread.is_alive()  # the owner waits; the elector keeps trying
        proxy.up()
        owner.join(FAST.retry_period + 10)
        assert standing == [Standing.LEADING]
        assert a.leadership.is_leader() and thread.is_alive()
    where = f"lease {namespace}/kai-ray-test"
    fenced = (
        f"{where} not renewed within 2s; writes are fenced until it is renewed or another replica takes it"
    )
    said = [m for m in caplog.messages if m.startswith(where)]
    assert len(said) == 2 and said[0] == fenced, said
    assert said[1].startswith(f"{where} renewed after an outage of "), said
    assert said[1].endswith("s; it was still ours, so this replica resumes"), said


def test_waiting_to_lead_ends_when_the_lease_is_renewed_lost_or_the_owner_stops() -> None:
    clock = FakeClock()
    a = LeaderElector(unreachable(), "default", "kai-ray", "a", clock=clock)
    stop = threading.Event()
    stop.set()
    assert a.wait_to_lead(stop) is Standing.STOPPED
    stop.clear()
    a.leadership.renewed(sent_at=clock.now)
    assert a.wait_to_lead(stop) is Standing.LEADING
    a.leadership.lose()
    assert a.wait_to_lead(stop) is Standing.LOST


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


def test_a_leader_whose_lease_another_replica_took_loses_and_is_fenced(kube_api: Any, namespace: str) -> None:
    a = elector(kube_api, namespace, "a", timing=FAST)
    with leading(a) as thread:
        fenced = FencedApiClient(kube_api.configuration, a.leadership)
        core = client.CoreV1Api(fenced)
        core.create_namespaced_config_map(
            namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="ok"))
        )
        # Someone else takes the lease by force: the next renewal of `a` finds it taken.
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


def unreachable() -> Any:
    """A client of a server that is not there."""
    configuration = client.Configuration()
    configuration.host = "https://127.0.0.1:9"
    configuration.retries = False
    return client.ApiClient(configuration)


def test_an_unreachable_api_server_means_not_leader() -> None:
    lonely = LeaderElector(unreachable(), "default", "kai-ray", "lonely")
    assert not lonely.try_acquire_or_renew()
    assert not lonely.leadership.is_leader()


def test_timings_must_nest() -> None:
    with pytest.raises(ValueError, match="retry period < renew deadline < lease duration"):
        LeaseTiming(lease_duration=10, renew_deadline=10, retry_period=2)
