"""PodDisruptionBudgets are respected (issue 8, item 5), on the real API server.

A reclaim needs the pods of an over-quota queue, but a budget allows no
disruption: the Eviction API refuses (429), nothing is forced with a DELETE, the
victims keep running cycle after cycle, and the PodGroup that needed the room
says which budget stopped it.  Once the budget goes, the reclaim goes through.
"""

from __future__ import annotations

from typing import Any

import pytest
from kai_ray_operators.controller import PodGroupController
from kube_support import eventually
from kube_zone import GROUP, Zone
from kubernetes import client
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from kai_ray.server.metrics import SchedulerMetrics
from kai_ray.server.scheduler import KubeScheduler

pytestmark = pytest.mark.kube


def samples(metrics: SchedulerMetrics, name: str) -> list[tuple[dict[str, str], float]]:
    text = generate_latest(metrics.registry).decode()
    return [
        (dict(s.labels), float(s.value))
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name
    ]


def running(kube_api: Any, namespace: str, prefix: str) -> set[str]:
    pods = client.CoreV1Api(kube_api).list_namespaced_pod(namespace).items
    return {
        p.metadata.name
        for p in pods
        if p.metadata.name.startswith(prefix)
        and p.status.phase == "Running"
        and not p.metadata.deletion_timestamp
    }


def test_a_budget_blocks_the_reclaim_and_the_reclaimer_says_which(kube_api: Any, zone: Zone) -> None:
    node = zone.node("n")
    dept = zone.queue("dept", gpu_quota=8)
    borrower, owner = zone.queue("borrower", dept, gpu_quota=0), zone.queue("owner", dept, gpu_quota=8)
    policy = client.PolicyV1Api(kube_api)
    policy.create_namespaced_pod_disruption_budget(
        zone.name,
        client.V1PodDisruptionBudget(
            metadata=client.V1ObjectMeta(name="keep-them"),
            spec=client.V1PodDisruptionBudgetSpec(
                max_unavailable=0, selector=client.V1LabelSelector(match_labels={"app": "borrowed"})
            ),
        ),
    )
    metrics = SchedulerMetrics()
    scheduler = KubeScheduler(
        kube_api, namespace=zone.name, metrics=metrics, grouper=PodGroupController(kube_api)
    )
    scheduler.start()
    try:
        victims = {f"b-{index}" for index in range(8)}
        for name in sorted(victims):
            zone.pod(name, queue=borrower, priority_class="train", labels={"app": "borrowed"})
        assert eventually(lambda: running(kube_api, zone.name, "b-") == victims, 60, scheduler.run_cycle)

        zone.pod("rightful", queue=owner, gpus=8)
        outcomes = [scheduler.run_cycle() for _ in range(4)]
        blocked = [b for o in outcomes for b in o.applied.blocked]
        assert blocked and {b.pod.split("/")[1] for b in blocked} <= victims
        assert all(o.applied.evicted == [] for o in outcomes)  # refused, and nothing forced
        assert running(kube_api, zone.name, "b-") == victims
        groups = client.CustomObjectsApi(kube_api).list_namespaced_custom_object(
            GROUP, "v2alpha2", zone.name, "podgroups"
        )["items"]
        (reclaimer,) = [g for g in groups if g["spec"]["queue"] == owner]
        condition = reclaimer["status"]["schedulingConditions"][-1]
        assert condition["reasons"][0]["reason"] == "EvictionBlocked"
        assert "keep-them" in condition["message"] and "was refused" in condition["message"]
        events = (
            client.CoreV1Api(kube_api)
            .list_namespaced_event(
                zone.name, field_selector=f"involvedObject.name={reclaimer['metadata']['name']}"
            )
            .items
        )
        assert any("keep-them" in e.message for e in events)
        [(_, count)] = samples(metrics, "kai_ray_evictions_blocked_total")
        assert count == len(blocked)

        policy.delete_namespaced_pod_disruption_budget("keep-them", zone.name)

        def rightful_bound() -> bool:
            return bool(
                client.CoreV1Api(kube_api).read_namespaced_pod("rightful", zone.name).spec.node_name == node
            )

        assert eventually(rightful_bound, 90, scheduler.run_cycle), "the reclaim never went through"
        evicted = samples(metrics, "kai_pod_group_evicted_pods_total")
        assert evicted and {labels["action"] for labels, _ in evicted} == {"reclaim"}
    finally:
        scheduler.stop()
