"""`kai-ray serve` as real processes: SIGKILL and restart, two replicas, SIGTERM hand-over.

The serve loop watches the whole cluster (the CLI has no namespace option), so everything
here is made unique to the test: its own namespace (which is also the lease namespace, so
each test starts without a Lease), its own two nodes selected by a label, its own queues.
Objects other tests left behind may be scheduled too; nothing here depends on them.

Observations come from watches started before the scheduler, so a pod that is bound to one
node and later to another, or a BindRequest deleted and created again, cannot slip between
two polls.
"""

from __future__ import annotations

import contextlib
import functools
import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, watch

from kai_ray.cluster.kube import devcluster
from kai_ray.cluster.kube.devcluster import DevCluster
from kai_ray.cluster.kube.leader import lease_name

LEASE_NAME = lease_name("kai-scheduler")

pytestmark = pytest.mark.kube

GROUP = "scheduling.run.ai"
KAI_RAY = Path(sys.executable).parent / "kai-ray"
PERIOD = "0.5"


def wait_for(check: Callable[[], bool], timeout: float, what: str, step: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(step)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


# ------------------------------------------------------------------------------ serve processes


class Serve:
    """One `kai-ray serve` subprocess with its stderr (JSON log lines) in a file."""

    def __init__(self, cluster: DevCluster, identity: str, lease_namespace: str, logs: Path) -> None:
        self.identity = identity
        self.log_path = logs / f"serve-{identity}-{time.monotonic_ns()}.log"
        argv = [
            str(KAI_RAY),
            "serve",
            "--kubeconfig",
            str(cluster.kubeconfig),
            "--period",
            PERIOD,
            "--identity",
            identity,
            "--lease-namespace",
            lease_namespace,
            "--metrics-address",
            "127.0.0.1:0",
        ]
        with self.log_path.open("wb") as stderr:
            self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=stderr)

    def messages(self) -> list[str]:
        out = []
        for line in self.log_path.read_text(errors="replace").splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if isinstance(entry, dict):
                out.append(str(entry.get("message", "")))
        return out

    def cycles(self) -> int:
        return sum(1 for message in self.messages() if message.startswith("cycle:"))

    def tail(self, lines: int = 20) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def kill(self) -> None:
        """SIGKILL (idempotent); reaps the process."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=30)


@pytest.fixture
def serves(kube_cluster: DevCluster, tmp_path: Path) -> Iterator[Callable[[str, str], Serve]]:
    """Starts serve processes; every one still running at the end is SIGKILLed."""
    started: list[Serve] = []

    def start(identity: str, lease_namespace: str) -> Serve:
        serve = Serve(kube_cluster, identity, lease_namespace, tmp_path)
        started.append(serve)
        return serve

    try:
        yield start
    finally:
        for serve in started:
            serve.kill()


# ------------------------------------------------------------------------------ cluster objects


def queue(name: str, parent: str | None) -> dict[str, Any]:
    unlimited = {"quota": -1, "limit": -1, "overQuotaWeight": 1}
    spec: dict[str, Any] = {
        "resources": {"gpu": dict(unlimited), "cpu": dict(unlimited), "memory": unlimited}
    }
    if parent:
        spec["parentQueue"] = parent
    return {"apiVersion": f"{GROUP}/v2", "kind": "Queue", "metadata": {"name": name}, "spec": spec}


def pod(name: str, zone: str, gpus: int = 1) -> client.V1Pod:
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, labels={"kai.scheduler/queue": f"{zone}-leaf"}),
        spec=client.V1PodSpec(
            scheduler_name="kai-scheduler",
            node_selector={"kai-ray-test": zone},
            containers=[
                client.V1Container(
                    name="main",
                    image="busybox",
                    resources=client.V1ResourceRequirements(
                        requests={"cpu": "100m", "memory": "100Mi"}, limits={"nvidia.com/gpu": str(gpus)}
                    ),
                )
            ],
        ),
    )


@pytest.fixture
def zone(kube_api: Any, namespace: str) -> Iterator[str]:
    """Two 8-GPU nodes labelled for this test and a queue tree of its own."""
    custom = client.CustomObjectsApi(kube_api)
    nodes = [f"{namespace}-n{index}" for index in range(2)]
    for name in nodes:
        devcluster.create_gpu_node(kube_api, name, 8, labels={"kai-ray-test": namespace})
    queues = [queue(f"{namespace}-dept", None), queue(f"{namespace}-leaf", f"{namespace}-dept")]
    for body in queues:
        custom.create_cluster_custom_object(GROUP, "v2", "queues", body)
    yield namespace
    core = client.CoreV1Api(kube_api)
    # Delete the pods first: a serve process of a later test must not find pods whose
    # selector no node matches any more (harmless, but noisy in its log).
    core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
    for name in nodes:
        core.delete_node(name)
    for body in reversed(queues):
        custom.delete_cluster_custom_object(GROUP, "v2", "queues", body["metadata"]["name"])


# ------------------------------------------------------------------------------ observers


class History:
    """Watches the namespace's Pods and BindRequests from before the scheduler starts.

    Records every node each pod was ever seen on and every BindRequest (uid) ever created,
    so a re-bind or a second request shows even when it is undone before the test looks.
    """

    def __init__(self, cluster: DevCluster, namespace: str) -> None:
        self.namespace = namespace
        self.nodes: dict[str, list[str]] = {}
        self.requests: dict[str, set[str]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._api = cluster.api_client()
        core = client.CoreV1Api(self._api)
        custom = client.CustomObjectsApi(self._api)
        self._error: BaseException | None = None
        self._threads = [
            self._follow(functools.partial(core.list_namespaced_pod, namespace), self._on_pod),
            self._follow(
                functools.partial(
                    custom.list_namespaced_custom_object, GROUP, "v1alpha2", namespace, "bindrequests"
                ),
                self._on_request,
            ),
        ]
        self._ready = threading.Barrier(len(self._threads) + 1)
        for thread in self._threads:
            thread.start()
        self._ready.wait(timeout=30)

    def _follow(
        self, lister: Callable[..., Any], on_event: Callable[[dict[str, Any]], None]
    ) -> threading.Thread:
        """List, then watch from the list's resourceVersion; objects are handled as the server's JSON."""

        def run() -> None:
            try:
                listing = json.loads(lister(_preload_content=False).data)
                for item in listing["items"]:
                    on_event(item)
                version = listing["metadata"]["resourceVersion"]
            finally:
                self._ready.wait(timeout=30)
            try:
                while not self._stop.is_set():
                    watcher: Any = watch.Watch()
                    for event in watcher.stream(lister, resource_version=version, timeout_seconds=2):
                        obj = event["raw_object"]
                        if event["type"] == "ERROR":
                            raise RuntimeError(f"watch failed: {obj}")
                        version = obj["metadata"]["resourceVersion"]
                        if event["type"] in ("ADDED", "MODIFIED"):
                            on_event(obj)
                        if self._stop.is_set():
                            watcher.stop()
            except BaseException as error:
                self._error = error
                raise

        return threading.Thread(target=run, daemon=True)

    def _on_pod(self, obj: dict[str, Any]) -> None:
        node = (obj.get("spec") or {}).get("nodeName")
        with self._lock:
            seen = self.nodes.setdefault(obj["metadata"]["name"], [])
            if node and node not in seen:
                seen.append(node)

    def _on_request(self, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        with self._lock:
            self.requests.setdefault(str(obj["spec"]["podName"]), set()).add(meta["uid"])

    def snapshot(self) -> tuple[dict[str, list[str]], dict[str, set[str]]]:
        if self._error is not None:
            raise AssertionError(f"the history watch failed: {self._error!r}")
        with self._lock:
            return (
                {name: list(nodes) for name, nodes in self.nodes.items()},
                {name: set(uids) for name, uids in self.requests.items()},
            )

    def close(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=10)
        self._api.close()


@pytest.fixture
def history(kube_cluster: DevCluster, namespace: str) -> Iterator[History]:
    recorder = History(kube_cluster, namespace)
    try:
        yield recorder
    finally:
        recorder.close()


def lease_holder(kube_api: Any, namespace: str) -> str | None:
    try:
        lease = client.CoordinationV1Api(kube_api).read_namespaced_lease(LEASE_NAME, namespace)
    except client.ApiException as error:
        if error.status == 404:
            return None
        raise
    return (lease.spec.holder_identity if lease.spec else None) or None


def all_running(kube_api: Any, namespace: str, names: list[str]) -> Callable[[], bool]:
    def check() -> bool:
        pods = {p.metadata.name: p for p in client.CoreV1Api(kube_api).list_namespaced_pod(namespace).items}
        return all(name in pods and pods[name].status.phase == "Running" for name in names)

    return check


def bind_requests(kube_api: Any, namespace: str) -> dict[str, dict[str, Any]]:
    items = client.CustomObjectsApi(kube_api).list_namespaced_custom_object(
        GROUP, "v1alpha2", namespace, "bindrequests"
    )["items"]
    return {str(item["spec"]["podName"]): item for item in items}


# ------------------------------------------------------------------------------ tests


@pytest.mark.parametrize("kill_at", ["first BindRequest", "first pod bound"])
def test_sigkill_mid_way_and_restart_never_binds_a_pod_twice(
    kube_api: Any, zone: str, history: History, serves: Callable[[str, str], Serve], kill_at: str
) -> None:
    core = client.CoreV1Api(kube_api)
    names = [f"p-{index:02d}" for index in range(12)]
    for name in names:
        core.create_namespaced_pod(zone, pod(name, zone))

    def reached() -> bool:
        nodes, requests = history.snapshot()
        if kill_at == "first BindRequest":
            return bool(requests)
        return any(nodes.values())

    first = serves("replica", zone)
    # Kill while the binder is (almost always) mid-pass: some requests made, not all carried out.
    wait_for(reached, 60, f"the {kill_at}\n{first.tail()}", step=0.005)
    first.kill()
    assert first.proc.returncode == -signal.SIGKILL
    nodes_at_kill, requests_at_kill = history.snapshot()
    bound_at_kill = {name for name, seen in nodes_at_kill.items() if seen}
    if kill_at == "first BindRequest":
        # The cycle creates its BindRequests before its binder pass starts, so this kill
        # always lands between "decided" and "bound".  (At the first bound pod, a loaded
        # machine may let the binder finish every pod before the kill arrives; that run
        # still checks the restart, just not a half-done pass.)
        assert len(bound_at_kill) < len(names), "everything was bound before the kill: not mid-way"

    # Same identity: the restarted replica renews its own lease instead of waiting it out.
    second = serves("replica", zone)
    wait_for(all_running(kube_api, zone, names), 60, f"every pod Running\n{second.tail()}", step=0.2)
    # Whatever the first replica finished, the second must have looked at all of it.
    wait_for(lambda: second.cycles() >= 2, 60, f"two cycles of the restarted replica\n{second.tail()}")

    nodes, requests = history.snapshot()
    for name in names:
        assert len(nodes[name]) == 1, f"{name} was seen on nodes {nodes[name]}"
        assert len(requests.get(name, ())) == 1, f"{name} got BindRequests {requests.get(name)}"
    for name in bound_at_kill:
        assert nodes[name] == nodes_at_kill[name]
    current = bind_requests(kube_api, zone)
    assert sorted(current) == names
    for name in names:
        assert current[name]["spec"]["selectedNode"] == nodes[name][0]
        assert current[name]["status"]["phase"] == "Succeeded"
        assert {current[name]["metadata"]["uid"]} == requests[name]
    print(
        f"killed at the {kill_at}: {len(requests_at_kill)} BindRequests, {len(bound_at_kill)}/12 pods bound"
    )


def test_two_replicas_only_the_leader_schedules_and_the_standby_takes_over_on_sigterm(
    kube_api: Any, zone: str, history: History, serves: Callable[[str, str], Serve]
) -> None:
    core = client.CoreV1Api(kube_api)
    replicas = {identity: serves(identity, zone) for identity in (f"{zone}-a", f"{zone}-b")}
    wait_for(lambda: lease_holder(kube_api, zone) is not None, 60, "a leader")
    leader_id = lease_holder(kube_api, zone)
    assert leader_id in replicas
    leader = replicas[leader_id]
    (standby,) = (serve for identity, serve in replicas.items() if identity != leader_id)

    names = [f"p-{index}" for index in range(6)]
    for name in names:
        core.create_namespaced_pod(zone, pod(name, zone))
    wait_for(all_running(kube_api, zone, names), 60, f"every pod Running\n{leader.tail()}", step=0.2)
    assert sorted(bind_requests(kube_api, zone)) == names
    nodes, requests = history.snapshot()
    assert all(len(nodes[name]) == 1 and len(requests[name]) == 1 for name in names)
    # Several more periods pass with the standby up: it must stay quiet the whole time.
    cycles_before = leader.cycles()
    wait_for(lambda: leader.cycles() >= cycles_before + 4, 30, "more leader cycles")
    assert lease_holder(kube_api, zone) == leader_id
    assert standby.proc.poll() is None, standby.tail()
    assert standby.cycles() == 0, f"the standby ran cycles:\n{standby.tail()}"

    leader.proc.send_signal(signal.SIGTERM)
    stopped_at = time.monotonic()
    assert leader.proc.wait(timeout=15) == 0, leader.tail()
    stop_seconds = time.monotonic() - stopped_at
    assert stop_seconds < 10, f"SIGTERM took {stop_seconds:.1f}s"
    # The leader gave the lease up on its way out, so the standby need not wait for it to expire.
    wait_for(lambda: lease_holder(kube_api, zone) == standby.identity, 10, "the standby to lead")

    core.create_namespaced_pod(zone, pod("after-takeover", zone))
    wait_for(
        all_running(kube_api, zone, ["after-takeover"]),
        30,
        f"the new pod Running\n{standby.tail()}",
        step=0.2,
    )
    assert standby.cycles() >= 1
    nodes, requests = history.snapshot()
    for name in [*names, "after-takeover"]:
        assert len(nodes[name]) == 1, f"{name} was seen on nodes {nodes[name]}"
        assert len(requests[name]) == 1, f"{name} got BindRequests {requests[name]}"
    with contextlib.suppress(ProcessLookupError):
        standby.proc.send_signal(signal.SIGTERM)
    assert standby.proc.wait(timeout=15) == 0, standby.tail()
