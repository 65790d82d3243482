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
import signal
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kube_serve import GROUP, History, Serve
from kube_serve import lease_holder as holder_of
from kube_serve import wait_until as wait_for
from kubernetes import client

from kai_ray import devcluster
from kai_ray.cluster.kube.leader import lease_name

LEASE_NAME = lease_name("kai-scheduler")

pytestmark = pytest.mark.kube


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


def lease_holder(kube_api: Any, namespace: str) -> str | None:
    return holder_of(kube_api, namespace, LEASE_NAME)


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
    kube_api: Any, zone: str, history: History, serves: Callable[..., Serve], kill_at: str
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
    kube_api: Any, zone: str, history: History, serves: Callable[..., Serve]
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
