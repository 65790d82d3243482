"""What a PodGroup or pod that is scheduled oddly, or not at all, says on the real API server
(issue 35, item 5): a PriorityClass that does not exist is reported while the PodGroup is
scheduled at the default priority, and a pod waiting on a missing queue says so in its
`PodScheduled` condition.  Before, the first was scheduled silently and the second had only an
Event."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kube_support import eventually
from kube_zone import GROUP, Zone
from kubernetes import client

from kai_ray.server.scheduler import KubeScheduler

pytestmark = pytest.mark.kube


@pytest.fixture
def scheduler(kube_api: Any, zone: Zone) -> Iterator[KubeScheduler]:
    running = KubeScheduler(kube_api, namespace=zone.name)
    running.start()
    try:
        yield running
    finally:
        running.stop()


def podgroup(zone: Zone, name: str, queue: str, **spec: Any) -> None:
    body = {
        "apiVersion": f"{GROUP}/v2alpha2",
        "kind": "PodGroup",
        "metadata": {"name": name},
        "spec": {"queue": queue, "minMember": 1, **spec},
    }
    client.CustomObjectsApi(zone.api).create_namespaced_custom_object(
        GROUP, "v2alpha2", zone.name, "podgroups", body
    )


def status(zone: Zone, name: str) -> dict[str, Any]:
    found = client.CustomObjectsApi(zone.api).get_namespaced_custom_object(
        GROUP, "v2alpha2", zone.name, "podgroups", name
    )
    return dict(found.get("status") or {})


def conditions(zone: Zone, name: str) -> list[dict[str, Any]]:
    return list(status(zone, name).get("conditions") or [])


def warnings(zone: Zone, kind: str, name: str) -> list[tuple[str, str]]:
    selector = f"involvedObject.kind={kind},involvedObject.name={name},type=Warning"
    found = client.CoreV1Api(zone.api).list_namespaced_event(zone.name, field_selector=selector).items
    return [(event.reason or "", event.message or "") for event in found]


def test_a_missing_priority_class_is_reported_and_the_default_is_used(
    kube_api: Any, zone: Zone, scheduler: KubeScheduler
) -> None:
    zone.node("n")
    queue = zone.queue("q")
    podgroup(zone, "gold", queue, priorityClassName=f"{zone.name}-gold")
    zone.pod("gold-0", queue=queue, group="gold")
    bound = lambda: client.CoreV1Api(kube_api).read_namespaced_pod("gold-0", zone.name).spec.node_name  # noqa: E731
    assert eventually(lambda: bool(bound()), 60, scheduler.run_cycle), "not scheduled at the default priority"
    words = (
        f"PriorityClass '{zone.name}-gold' does not exist; scheduled at the default priority 50 (preemptible)"
    )
    assert eventually(lambda: bool(conditions(zone, "gold")), 30, scheduler.run_cycle)
    (condition,) = conditions(zone, "gold")
    assert (condition["type"], condition["status"], condition["reason"]) == (
        "PriorityClassNotFound",
        "True",
        "PriorityClassNotFound",
    )
    assert condition["message"] == f"spec.priorityClassName: {words}"
    assert scheduler.events.flush(timeout=30)
    assert warnings(zone, "PodGroup", "gold") == [
        ("PriorityClassNotFound", f"spec.priorityClassName: {words}")
    ]
    assert not status(zone, "gold").get("schedulingConditions")  # it is not waiting

    priority_class = client.V1PriorityClass(metadata=client.V1ObjectMeta(name=f"{zone.name}-gold"), value=70)
    client.SchedulingV1Api(kube_api).create_priority_class(priority_class)
    try:
        assert eventually(lambda: conditions(zone, "gold") == [], 30, scheduler.run_cycle), (
            "the fixed warning stayed"
        )
    finally:
        client.SchedulingV1Api(kube_api).delete_priority_class(f"{zone.name}-gold")


def test_a_pod_waiting_on_a_missing_queue_says_so_in_its_condition(
    kube_api: Any, zone: Zone, scheduler: KubeScheduler
) -> None:
    zone.node("n")
    missing = f"{zone.name}-gone"
    podgroup(zone, "lost", missing)
    zone.pod("lost-0", queue=missing, group="lost")

    def scheduled_condition() -> dict[str, Any] | None:
        pod = client.CoreV1Api(kube_api).read_namespaced_pod("lost-0", zone.name)
        found = [c for c in pod.status.conditions or [] if c.type == "PodScheduled"]
        return kube_api.sanitize_for_serialization(found[0]) if found else None

    assert eventually(lambda: scheduled_condition() is not None, 30, scheduler.run_cycle)
    condition = scheduled_condition()
    assert condition is not None and (condition["status"], condition["reason"]) == ("False", "Unschedulable")
    assert f"queue '{missing}' does not exist" in condition["message"]
    assert client.CoreV1Api(kube_api).read_namespaced_pod("lost-0", zone.name).spec.node_name is None
