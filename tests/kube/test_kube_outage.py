"""An API server outage, seen by `kai-ray serve` through a relay that can cut it off (issue 8, item 6).

The server keeps running for the other tests; only this scheduler loses it.  What an
operator must see: a handful of log lines however long the outage (repeats are held
back and counted), scheduling that resumes by itself, a lost lease that ends the
process in one clear line, and a stop request honoured even before the first sync.
"""

from __future__ import annotations

import signal
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kai_ray_operators.controller import PodGroupController
from kube_proxy import FlakyProxy
from kube_serve import Serve, lease_holder, wait_until
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


@pytest.fixture
def proxy(kube_cluster: DevCluster) -> Iterator[FlakyProxy]:
    relay = FlakyProxy(int(kube_cluster.server.rsplit(":", 1)[1]))
    try:
        yield relay
    finally:
        relay.close()


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
    zone.pod("before", queue=zone.queues[0])
    wait_until(
        lambda: node_of(kube_api, zone.name, "before") is not None, 60, f"a first bind\n{serve.tail()}"
    )
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
    zone.pod("first", queue=zone.queues[0])
    wait_until(lambda: node_of(kube_api, zone.name, "first") is not None, 60, f"a bind\n{serve.tail()}")
    dump = stacks_of(serve)
    assert "kai_ray/server/scheduler.py" in dump, dump  # the scheduling loop's thread is in it
    assert "Thread 0x" in dump, dump
    zone.pod("second", queue=zone.queues[0])
    wait_until(lambda: node_of(kube_api, zone.name, "second") is not None, 60, f"a bind\n{serve.tail()}")
    assert serve.proc.poll() is None


def test_an_outage_past_the_renew_deadline_ends_leadership_in_one_line(
    kube_cluster: DevCluster,
    kube_api: Any,
    zone: Zone,
    proxy: FlakyProxy,
    serves: Callable[..., Serve],
    tmp_path: Path,
) -> None:
    fast = ("--lease-duration", "4", "--renew-deadline", "3", "--retry-period", "0.5")
    kubeconfig = through(kube_cluster, proxy, tmp_path / "kubeconfig")
    serve = serves(f"{zone.name}-s", zone.name, *fast, kubeconfig=kubeconfig)
    wait_until(
        lambda: lease_holder(kube_api, zone.name, LEASE) == serve.identity, 60, f"leading\n{serve.tail()}"
    )
    seen = len(serve.entries())

    proxy.down()
    try:
        exit_status = serve.proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        # Seen once on a loaded CI run (log quiet after the first failed watch): say where it waits.
        raise AssertionError(f"still running 30 s into the outage\n{stacks_of(serve)}") from None
    assert exit_status == 1, serve.tail()
    after = serve.entries()[seen:]
    errors = [e["message"] for e in after if e.get("level") == "ERROR"]
    assert any(m.startswith("exiting: leadership was lost") for m in errors), errors
    assert len(after) <= OUTAGE_LOG_LINES, "\n".join(map(str, after))
    assert not any("raw" in entry for entry in after)


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
