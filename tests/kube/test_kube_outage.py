"""An API server outage, seen by `kai-ray serve` through a relay that can cut it off (issue 8, item 6).

The server keeps running for the other tests; only this scheduler loses it.  What an
operator must see: a handful of log lines however long the outage (repeats are held
back and counted), scheduling that resumes by itself, also after an outage longer than
the lease when no other replica took it (issue 35), a lease another replica took
meanwhile that ends the process in one clear line naming that replica, and a stop
request honoured even before the first sync.
"""

from __future__ import annotations

import datetime as dt
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from kai_ray_operators.controller import PodGroupController
from kube_proxy import FlakyProxy
from kube_serve import Serve, lease_holder, wait_until, writes_by
from kube_zone import Zone
from kubernetes import client

from kai_ray.cluster.kube.fence import FencedApiClient
from kai_ray.cluster.kube.leader import lease_name
from kai_ray.devcluster import DevCluster
from kai_ray.server.scheduler import KubeScheduler, RunOutcome

pytestmark = pytest.mark.kube

LEASE = lease_name("kai-scheduler")
OUTAGE_LOG_LINES = 20
"""At most this many log lines while the server is away (the old loop printed hundreds)."""
SOLE_OUTAGE_SECONDS = 30.0
"""Longer than the renew deadline (10 s) and the lease (15 s), as the operator's freeze was."""
PODGROUPER_OUTAGE_SECONDS = 8.0
"""Longer than the `FAST` renew deadline (3 s) and lease (4 s)."""
RESUME_SECONDS = 10.0
"""A sole replica schedules again within this long of the server's return."""
FENCED_LOG_LINES = 10
"""At most this many log lines while fenced, however long that lasts (no cycle runs)."""
FAST = ("--lease-duration", "4", "--renew-deadline", "3", "--retry-period", "0.5")
GROUP, PODGROUPS = "scheduling.run.ai", "podgroups"


@pytest.fixture
def zone(zone: Zone) -> Zone:
    """An 8-GPU node and a leaf queue of the test's own."""
    zone.node("n0")
    zone.queue("leaf")
    return zone


def through(cluster: DevCluster, relay: FlakyProxy, path: Path) -> Path:
    """The cluster's kubeconfig, pointed at the relay (same CA: the certificate names 127.0.0.1)."""
    config = yaml.safe_load(cluster.kubeconfig.read_text())
    config["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{relay.port}"
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path


def node_of(kube_api: Any, namespace: str, pod: str) -> str | None:
    found: str | None = client.CoreV1Api(kube_api).read_namespaced_pod(pod, namespace).spec.node_name
    return found


def bind_a_pod(kube_api: Any, zone: Zone, name: str, serve: Serve, timeout: float = 60) -> None:
    """Create a pod in the zone's queue and wait until `serve` bound it."""
    zone.pod(name, queue=zone.queues[0])
    bound = lambda: node_of(kube_api, zone.name, name) is not None  # noqa: E731
    wait_until(bound, timeout, f"a bind of {name}\n{serve.tail()}")


def test_an_outage_logs_a_few_lines_and_scheduling_resumes(
    kube_cluster: DevCluster,
    kube_api: Any,
    zone: Zone,
    proxy: FlakyProxy,
    serves: Callable[..., Serve],
    tmp_path: Path,
) -> None:
    serve = serves(
        f"{zone.name}-s", zone.name, kubeconfig=through(kube_cluster, proxy, tmp_path / "kubeconfig")
    )
    bind_a_pod(kube_api, zone, "before", serve)
    seen = len(serve.entries())

    proxy.down()
    # The outage itself, short enough for the leader to keep its lease: its last renewal may
    # have been up to a retry period (2 s) before the outage, and its first one after it may
    # come a retry period later, so 10 s (the renew deadline) - 2 - 2 leaves 6 s at most; 7 s
    # lost the lease on a loaded machine (the renewal after the outage fell on the deadline).
    assert not proxy.wait_refused(10**6, timeout=4.0)
    during = serve.entries()[seen:]
    proxy.up()

    zone.pod("after", queue=zone.queues[0])
    try:
        wait_until(lambda: node_of(kube_api, zone.name, "after") is not None, 60, "a bind after")
    except AssertionError as failure:
        # Seen twice on a loaded machine, never reproduced since: say where each thread waits.
        raise AssertionError(f"{failure}\n{stacks_of(serve)}") from None
    assert serve.proc.poll() is None
    assert proxy.refused > 0  # it did try to reconnect, often
    print(f"{len(during)} log lines during a 4 s outage, {proxy.refused} reconnections refused")
    assert len(during) <= OUTAGE_LOG_LINES, "\n".join(map(str, during))
    assert not any("raw" in entry for entry in during)  # no traceback or stray output


def stacks_of(serve: Serve) -> str:
    """Every thread's stack of a live `serve` (SIGUSR1, `dump_stacks_on_sigusr1`): the raw text its
    stderr received since the signal.

    Read as bytes, not as log lines, in case a log line and the dump meet. The main thread
    comes last, and its bottom frame is the script's `<module>`: seeing it means the whole
    dump is there.
    """
    if serve.proc.poll() is not None:
        return f"serve exited {serve.proc.returncode}\n{serve.tail()}"
    start = serve.log_path.stat().st_size
    serve.proc.send_signal(signal.SIGUSR1)

    def since_signal() -> str:
        with serve.log_path.open("rb") as log:
            log.seek(start)
            return log.read().decode(errors="replace")

    wait_until(lambda: "<module>" in since_signal(), 30, f"a whole stack dump\n{since_signal()}")
    return since_signal()


def test_sigusr1_dumps_every_threads_stack_and_serve_goes_on(
    kube_cluster: DevCluster, kube_api: Any, zone: Zone, serves: Callable[..., Serve]
) -> None:
    serve = serves(f"{zone.name}-s", zone.name)
    bind_a_pod(kube_api, zone, "first", serve)
    dump = stacks_of(serve)
    assert "kai_ray/server/scheduler.py" in dump, dump  # the scheduling loop's thread is in it
    assert "Thread 0x" in dump, dump
    bind_a_pod(kube_api, zone, "second", serve)
    assert serve.proc.poll() is None


def test_a_sole_replica_rides_out_an_outage_past_its_lease_and_schedules_again(
    kube_cluster: DevCluster,
    kube_api: Any,
    zone: Zone,
    proxy: FlakyProxy,
    serves: Callable[..., Serve],
    tmp_path: Path,
) -> None:
    """Issue 35: no other replica takes the lease while the server is away, so when it returns
    the lease is still this replica's: the same process renews it and schedules again."""
    kubeconfig = through(kube_cluster, proxy, tmp_path / "kubeconfig")
    serve = serves(f"{zone.name}-s", zone.name, kubeconfig=kubeconfig)  # client-go's 15 s / 10 s / 2 s
    bind_a_pod(kube_api, zone, "before", serve)
    assert lease_holder(kube_api, zone.name, LEASE) == serve.identity
    seen = len(serve.entries())

    proxy.down()
    assert not proxy.wait_refused(10**6, timeout=SOLE_OUTAGE_SECONDS)  # past deadline and lease
    during = serve.entries()[seen:]
    proxy.up()
    returned = time.monotonic()

    zone.pod("after", queue=zone.queues[0])
    try:
        wait_until(
            lambda: node_of(kube_api, zone.name, "after") is not None,
            RESUME_SECONDS,
            "a bind within 10 s of the server's return",
        )
    except AssertionError as failure:
        raise AssertionError(f"{failure}\n{stacks_of(serve)}") from None
    print(f"bound {time.monotonic() - returned:.1f}s after a {SOLE_OUTAGE_SECONDS:.0f}s outage")
    assert serve.proc.poll() is None, serve.tail()  # the same process: nothing restarted it
    assert lease_holder(kube_api, zone.name, LEASE) == serve.identity
    messages = [str(entry.get("message", "")) for entry in serve.entries()[seen:]]
    fenced = f"lease {zone.name}/{LEASE} not renewed within 10s; writes are fenced"
    assert any(m.startswith(fenced) for m in messages), messages
    assert any(m.endswith("it was still ours, so this replica resumes") for m in messages), messages
    (at,) = [i for i, entry in enumerate(during) if str(entry.get("message", "")).startswith(fenced)]
    assert len(during) - at <= FENCED_LOG_LINES, "\n".join(map(str, during[at:]))
    assert not any("raw" in entry for entry in during)


def test_a_replica_whose_lease_was_taken_in_an_outage_exits_naming_the_new_holder(
    kube_cluster: DevCluster,
    kube_api: Any,
    zone: Zone,
    proxy: FlakyProxy,
    serves: Callable[..., Serve],
    tmp_path: Path,
) -> None:
    """The outage is the leader's alone: the standby reaches the server, takes the expired lease
    and schedules; the old leader learns it when the server returns and exits without a write."""
    kubeconfig = through(kube_cluster, proxy, tmp_path / "kubeconfig")
    leader = serves(f"{zone.name}-a", zone.name, *FAST, kubeconfig=kubeconfig)
    wait_until(
        lambda: lease_holder(kube_api, zone.name, LEASE) == leader.identity, 60, f"leading\n{leader.tail()}"
    )
    standby = serves(f"{zone.name}-b", zone.name, *FAST)
    wait_until(lambda: any("serving as" in m for m in standby.messages()), 30, "the standby to start")

    proxy.down()
    wait_until(
        lambda: lease_holder(kube_api, zone.name, LEASE) == standby.identity,
        30,
        f"take-over\n{standby.tail()}",
    )
    returned = dt.datetime.now(dt.UTC)
    proxy.up()
    try:
        assert leader.proc.wait(timeout=30) == 1, leader.tail()
    except subprocess.TimeoutExpired:
        raise AssertionError(f"still running 30 s after the server's return\n{stacks_of(leader)}") from None
    messages = leader.messages()
    lost = f"lost leadership: replica {standby.identity} holds lease {zone.name}/{LEASE} now; stopping"
    assert lost in messages, leader.tail()
    assert any(m.startswith("exiting: leadership was lost") for m in messages), leader.tail()
    assert writes_by(kube_cluster, leader.identity, returned) == []
    bind_a_pod(kube_api, zone, "after", standby)


def test_a_sole_podgrouper_rides_out_an_outage_past_its_lease(
    kube_cluster: DevCluster,
    kube_api: Any,
    zone: Zone,
    proxy: FlakyProxy,
    serves: Callable[..., Serve],
    tmp_path: Path,
) -> None:
    """`kai-ray podgrouper` holds a lease of its own, with the same elector: the same rule."""
    kubeconfig = through(kube_cluster, proxy, tmp_path / "kubeconfig")
    grouper = serves(f"{zone.name}-g", zone.name, *FAST, kubeconfig=kubeconfig, command="podgrouper")
    zone.pod("before", queue=zone.queues[0])
    wait_until(lambda: len(podgroups(kube_api, zone.name)) == 1, 60, f"a PodGroup\n{grouper.tail()}")
    seen = len(grouper.entries())

    proxy.down()
    assert not proxy.wait_refused(10**6, timeout=PODGROUPER_OUTAGE_SECONDS)  # past deadline and lease
    proxy.up()

    zone.pod("after", queue=zone.queues[0])
    wait_until(
        lambda: len(podgroups(kube_api, zone.name)) == 2, RESUME_SECONDS, f"a PodGroup\n{grouper.tail()}"
    )
    assert grouper.proc.poll() is None, grouper.tail()
    messages = grouper.messages()[seen:]
    assert any(m.endswith("it was still ours, so this replica resumes") for m in messages), messages
    grouper.signal(signal.SIGTERM)
    assert grouper.proc.wait(timeout=30) == 0, grouper.tail()


def podgroups(kube_api: Any, namespace: str) -> list[dict[str, Any]]:
    custom = client.CustomObjectsApi(kube_api)
    found: list[dict[str, Any]] = custom.list_namespaced_custom_object(
        GROUP, "v2alpha2", namespace, PODGROUPS
    )["items"]
    return found


def test_a_stop_before_the_first_sync_is_honoured_at_once(
    kube_cluster: DevCluster, proxy: FlakyProxy
) -> None:
    proxy.down()  # the cache can never list anything
    configuration = kube_cluster.configuration()
    configuration.host = f"https://127.0.0.1:{proxy.port}"
    api = FencedApiClient(configuration)
    scheduler = KubeScheduler(api, grouper=PodGroupController(api))
    stop = threading.Event()
    outcome: list[RunOutcome] = []
    runner = threading.Thread(target=lambda: outcome.append(scheduler.run(stop)), daemon=True)
    runner.start()
    assert proxy.wait_refused(2, timeout=10), "the cache never tried to list"
    stop.set()
    runner.join(timeout=10)
    assert not runner.is_alive(), "run() kept waiting for a sync that cannot happen"
    assert outcome == [RunOutcome.STOPPED]


def test_sigterm_ends_a_serve_whose_server_is_gone(
    kube_cluster: DevCluster,
    kube_api: Any,
    zone: Zone,
    proxy: FlakyProxy,
    serves: Callable[..., Serve],
    tmp_path: Path,
) -> None:
    serve = serves(
        f"{zone.name}-s", zone.name, kubeconfig=through(kube_cluster, proxy, tmp_path / "kubeconfig")
    )
    wait_until(
        lambda: lease_holder(kube_api, zone.name, LEASE) == serve.identity, 60, f"leading\n{serve.tail()}"
    )
    proxy.down()
    assert proxy.wait_refused(1, timeout=10)
    serve.signal(signal.SIGTERM)
    assert serve.proc.wait(timeout=20) == 0, serve.tail()
