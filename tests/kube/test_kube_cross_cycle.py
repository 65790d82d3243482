"""The clocks the engine keeps between cycles, kept by `serve` on the real API server (issue 35).

Every cycle opens a fresh session, so a clock started in one cycle lasts only if it is written
where the next reads it: KAI's PodGroup annotations.  Before this, nothing wrote them, and a
gang that lost a pod ran on for ever (its grace period started again every cycle) and a
gang's guaranteed runtime never protected it (its start was forgotten).  Each test runs its
cycles through a scheduler that is replaced half-way, as a restart or a new leader would.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kube_support import eventually
from kube_zone import GROUP, Zone
from kubernetes import client

from kai_ray.api.constants import LAST_START_TIMESTAMP_ANNOTATION, STALE_PODGROUP_TIMESTAMP_ANNOTATION
from kai_ray.server.scheduler import KubeScheduler

pytestmark = pytest.mark.kube

GRACE_SECONDS = 3


class Schedulers:
    """The test's scheduler, which `restart` replaces by a fresh one (nothing carried over)."""

    def __init__(self, api: Any, namespace: str) -> None:
        self.api, self.namespace = api, namespace
        self.current = self._start()

    def _start(self) -> KubeScheduler:
        scheduler = KubeScheduler(self.api, namespace=self.namespace)
        scheduler.start()
        return scheduler

    def cycle(self) -> None:
        self.current.run_cycle()

    def restart(self) -> None:
        self.current.stop()
        self.current = self._start()

    def cycles_around_a_restart(self, cycles: int) -> Iterator[None]:
        """`cycles` cycles, a pause for the caller's checks, a restart, `cycles` more, a pause."""
        for restart in (False, True):
            if restart:
                self.restart()
            for _ in range(cycles):
                self.cycle()
            yield

    def close(self) -> None:
        self.current.stop()


@pytest.fixture
def schedulers(kube_api: Any, zone: Zone) -> Iterator[Schedulers]:
    running = Schedulers(kube_api, zone.name)
    try:
        yield running
    finally:
        running.close()


def podgroup(zone: Zone, name: str, queue: str, min_member: int, **spec: Any) -> None:
    body = {
        "apiVersion": f"{GROUP}/v2alpha2",
        "kind": "PodGroup",
        "metadata": {"name": name},
        "spec": {"queue": queue, "minMember": min_member, "priorityClassName": "train", **spec},
    }
    client.CustomObjectsApi(zone.api).create_namespaced_custom_object(
        GROUP, "v2alpha2", zone.name, "podgroups", body
    )


def annotations(zone: Zone, name: str) -> dict[str, str]:
    found = client.CustomObjectsApi(zone.api).get_namespaced_custom_object(
        GROUP, "v2alpha2", zone.name, "podgroups", name
    )
    return dict(found["metadata"].get("annotations") or {})


def phases(zone: Zone) -> dict[str, str]:
    """Pod name → phase, for the pods not being deleted."""
    pods = client.CoreV1Api(zone.api).list_namespaced_pod(zone.name).items
    return {p.metadata.name: p.status.phase for p in pods if p.metadata.deletion_timestamp is None}


def gang(zone: Zone, schedulers: Schedulers, name: str, size: int, min_member: int) -> list[str]:
    """A running gang of `size` 1-GPU pods (minMember `min_member`, grace `GRACE_SECONDS`)."""
    queue = zone.queue(f"{name}-q")
    podgroup(zone, name, queue, min_member, stalenessGracePeriod=f"{GRACE_SECONDS}s")
    pods = [f"{name}-{index}" for index in range(size)]
    for pod in pods:
        zone.pod(pod, queue=queue, group=name)
    running = lambda: all(phases(zone).get(pod) == "Running" for pod in pods)  # noqa: E731
    assert eventually(running, 60, schedulers.cycle), f"the gang never ran: {phases(zone)}"
    return pods


def events(zone: Zone, reason: str) -> list[str]:
    found = client.CoreV1Api(zone.api).list_namespaced_event(
        zone.name, field_selector=f"involvedObject.kind=PodGroup,reason={reason}"
    )
    return [event.message or "" for event in found.items]


def stale_mark(zone: Zone, name: str) -> str | None:
    return annotations(zone, name).get(STALE_PODGROUP_TIMESTAMP_ANNOTATION)


def test_a_gang_that_lost_a_pod_is_evicted_once_its_grace_period_ran_out(
    zone: Zone, schedulers: Schedulers
) -> None:
    zone.node("n")
    pods = gang(zone, schedulers, "lost", 3, 3)
    client.CoreV1Api(zone.api).delete_namespaced_pod(pods[2], zone.name, grace_period_seconds=0)

    assert eventually(lambda: stale_mark(zone, "lost") is not None, 30, schedulers.cycle)
    mark = stale_mark(zone, "lost")
    schedulers.restart()
    schedulers.cycle()
    assert stale_mark(zone, "lost") == mark, "a restart started the grace period again"

    gone = lambda: not any(pod in phases(zone) for pod in pods)  # noqa: E731
    assert eventually(gone, 30, schedulers.cycle), f"the stale gang still runs: {phases(zone)}"
    assert schedulers.current.events.flush(timeout=30)
    assert events(zone, "StaleJob") == ["Job is stale. 2 pods are active, minMember is 3"]
    evicted = events(zone, "Evict")
    assert len(evicted) == 2 and all("stale gang: 2 of 3 running" in message for message in evicted)


def test_raising_min_member_above_the_running_pods_makes_the_gang_stale(
    zone: Zone, schedulers: Schedulers
) -> None:
    zone.node("n")
    pods = gang(zone, schedulers, "raised", 2, 2)
    patch = {"spec": {"minMember": 3}}
    client.CustomObjectsApi(zone.api).patch_namespaced_custom_object(
        GROUP, "v2alpha2", zone.name, "podgroups", "raised", patch
    )
    gone = lambda: not any(pod in phases(zone) for pod in pods)  # noqa: E731
    assert eventually(gone, 40, schedulers.cycle), f"the stale gang still runs: {phases(zone)}"


def test_a_gang_finishing_successfully_is_never_evicted(zone: Zone, schedulers: Schedulers) -> None:
    """KAI v0.17.1's fix: a pod that succeeded leaves the gang below its minimum, and it is done."""
    zone.node("n")
    pods = gang(zone, schedulers, "done", 3, 3)
    client.CoreV1Api(zone.api).patch_namespaced_pod_status(
        pods[0], zone.name, {"status": {"phase": "Succeeded"}}
    )
    finished = lambda: phases(zone).get(pods[0]) == "Succeeded"  # noqa: E731
    assert eventually(finished, 30, schedulers.cycle)
    deadline = time.monotonic() + GRACE_SECONDS + 3
    while time.monotonic() < deadline:
        schedulers.cycle()
    assert phases(zone) == {pods[0]: "Succeeded", pods[1]: "Running", pods[2]: "Running"}
    assert stale_mark(zone, "done") is None


def test_a_gangs_start_is_kept_so_its_guaranteed_runtime_protects_it(
    zone: Zone, schedulers: Schedulers
) -> None:
    """Queue A runs over its quota of 0 on the only node; B is owed the node, but A's gang is
    within its queue's 10-minute reclaim runtime however many cycles and restarts pass, until
    its recorded start says otherwise."""
    zone.node("n")
    dept = zone.queue("dept", gpu_quota=8)
    over, owed = zone.queue("a", dept, 0), zone.queue("b", dept, 8)
    runtime = {"spec": {"reclaimMinRuntime": "10m"}}
    client.CustomObjectsApi(zone.api).patch_cluster_custom_object(GROUP, "v2", "queues", over, runtime)
    podgroup(zone, "a-job", over, 1)
    zone.pod("a-0", queue=over, group="a-job", gpus=8)
    assert eventually(lambda: phases(zone).get("a-0") == "Running", 60, schedulers.cycle)
    started = annotations(zone, "a-job").get(LAST_START_TIMESTAMP_ANNOTATION)
    assert started is not None, "the gang's start was not recorded"

    podgroup(zone, "b-job", owed, 1)
    zone.pod("b-0", queue=owed, group="b-job", gpus=8)
    for _ in schedulers.cycles_around_a_restart(4):
        assert phases(zone) == {"a-0": "Running", "b-0": "Pending"}
    assert annotations(zone, "a-job")[LAST_START_TIMESTAMP_ANNOTATION] == started

    long_ago = (dt.datetime.now(dt.UTC) - dt.timedelta(minutes=20)).strftime("%Y-%m-%dT%H:%M:%SZ")
    patch = {"metadata": {"annotations": {LAST_START_TIMESTAMP_ANNOTATION: long_ago}}}
    client.CustomObjectsApi(zone.api).patch_namespaced_custom_object(
        GROUP, "v2alpha2", zone.name, "podgroups", "a-job", patch
    )
    assert eventually(lambda: phases(zone).get("b-0") == "Running", 60, schedulers.cycle)
    assert "a-0" not in phases(zone)


def test_a_releasing_pod_is_waited_for_across_cycles_and_restarts(zone: Zone, schedulers: Schedulers) -> None:
    """A pod being deleted still holds its GPUs until it is gone (the API server keeps its
    deletionTimestamp, nothing else does): the pod placed onto them is pipelined, cycle after
    cycle and across a restart, and bound once they are free."""
    zone.node("n")
    queue = zone.queue("q")
    core = client.CoreV1Api(zone.api)
    for name in ("leaving", "next"):
        podgroup(zone, name, queue, 1)
    zone.pod("leaving", queue=queue, group="leaving", gpus=8)
    assert eventually(lambda: phases(zone).get("leaving") == "Running", 60, schedulers.cycle)
    held = {"metadata": {"finalizers": ["kai-ray.test/hold"]}}
    core.patch_namespaced_pod("leaving", zone.name, held)
    core.delete_namespaced_pod("leaving", zone.name)
    zone.pod("next", queue=queue, group="next", gpus=8)
    for _ in schedulers.cycles_around_a_restart(3):
        assert core.read_namespaced_pod("next", zone.name).spec.node_name is None
    assert schedulers.current.events.flush(timeout=30)
    pipelined = core.list_namespaced_event(
        zone.name, field_selector="involvedObject.name=next,reason=Pipelined"
    )
    assert pipelined.items, "the pod waiting for the releasing one was not announced as pipelined"

    core.patch_namespaced_pod("leaving", zone.name, {"metadata": {"finalizers": None}})
    assert eventually(lambda: phases(zone).get("next") == "Running", 60, schedulers.cycle)
