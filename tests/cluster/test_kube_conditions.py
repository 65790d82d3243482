"""A PodGroup's scheduling condition carries the engine's typed node refusals in `reasons[]`."""

from __future__ import annotations

import datetime

import pytest
from builders import cluster, run_cycle

from kai_ray.cluster.kube.status import desired_conditions
from kai_ray.engine.reasons import (
    GENERIC_KAI_REASON,
    NodeFilterCause,
    NodeRefusal,
    PendingCause,
    PendingReason,
)
from kai_ray.model.objects import HostPort

pytestmark = pytest.mark.unit

NOW = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)


def test_each_refusal_follows_its_reason_named_after_its_filter() -> None:
    refusals = (
        NodeRefusal(
            NodeFilterCause.POD_ANTI_AFFINITY,
            3,
            "pod anti-affinity with team-a/web-0 on kubernetes.io/hostname",
        ),
        NodeRefusal(NodeFilterCause.INSUFFICIENT_RESOURCES, 1, "insufficient rdma/hca"),
    )
    reason = PendingReason(PendingCause.NO_ROOM, "pod web-3: 0 of 4 nodes fit (...)", refusals)
    (condition,) = desired_conditions([], "default", [reason], NOW) or []
    assert condition["message"] == reason.message
    assert condition["reasons"] == [
        {"reason": GENERIC_KAI_REASON, "message": reason.message},
        {
            "reason": "InterPodAntiAffinity",
            "message": "3 nodes: pod anti-affinity with team-a/web-0 on kubernetes.io/hostname",
        },
        {"reason": "NodeResourcesFit", "message": "1 node: insufficient rdma/hca"},
    ]


def test_a_plans_port_conflict_reaches_the_condition() -> None:
    builder = cluster().queue("q")
    for i in range(2):
        builder.node(f"n{i}", gpus=8)
    for i in range(3):
        builder.job(f"p{i}", queue="q", gpus=1, pods=0, created=float(i)).task(host_ports=(HostPort(8080),))
    reason = run_cycle(builder.build()).pending_reasons["p2"]
    (condition,) = desired_conditions([], "default", [reason], NOW) or []
    assert {"reason": "NodePorts", "message": "2 nodes: host port 8080/TCP in use"} in condition["reasons"]
