"""A pending reason carries the typed node refusals of the pod that found no node, the same ones
`node_refusals` gives every explanation."""

from __future__ import annotations

import pytest
from builders import ClusterBuilder, cluster, config, find_task, open_session, run_cycle

from kai_ray.engine.explanation import admitted_rows, node_refusals
from kai_ray.engine.reasons import NodeFilterCause, NodeRefusal, PendingCause
from kai_ray.model.objects import HostPort, LabelSelector, PodAffinitySpec, PodAffinityTerm, TaskStatus

pytestmark = pytest.mark.unit

HOST = "kubernetes.io/hostname"
ANTI_WEB = PodAffinitySpec(
    required_anti=(PodAffinityTerm(HOST, LabelSelector(match_labels=(("app", "web"),)), frozenset({""})),)
)


def three_nodes(builder: ClusterBuilder, gpus: int = 8) -> ClusterBuilder:
    for i in range(3):
        builder.node(f"n{i}", gpus=gpus, labels={HOST: f"n{i}"})
    return builder.queue("q")


def test_a_lone_pods_reason_carries_the_anti_affinity_refusal() -> None:
    builder = three_nodes(cluster())
    for i in range(4):
        builder.job(f"web{i}", queue="q", gpus=1, pods=0, created=float(i))
        builder.task(labels={"app": "web"}, pod_affinity=ANTI_WEB)
    reason = run_cycle(builder.build()).pending_reasons["web3"]
    assert reason.cause is PendingCause.NO_ROOM
    # The rule is symmetric: the placed replicas' own anti-affinity refuses the same nodes.
    assert reason.refusals == (
        NodeRefusal(
            NodeFilterCause.POD_ANTI_AFFINITY, 3, "pod anti-affinity with web0-0 on kubernetes.io/hostname"
        ),
        NodeRefusal(
            NodeFilterCause.EXISTING_ANTI_AFFINITY,
            3,
            "anti-affinity of web0-0 on kubernetes.io/hostname keeps the pod away",
        ),
    )
    assert all(str(refusal) in reason.message for refusal in reason.refusals)


def test_a_gangs_reason_keeps_its_pods_refusals_and_a_fitting_job_has_none() -> None:
    builder = three_nodes(cluster()).job("g", queue="q", gpus=1, pods=0)
    for _ in range(4):
        builder.task(labels={"app": "web"}, pod_affinity=ANTI_WEB)
    builder.job("fits", queue="q", gpus=1, pods=1)
    plan = run_cycle(builder.build())
    reason = plan.pending_reasons["g"]
    assert reason.message.startswith("gang needs 4 more pods together, only 3 fit")
    assert [(r.cause, r.nodes) for r in reason.refusals] == [
        (NodeFilterCause.POD_ANTI_AFFINITY, 3),
        (NodeFilterCause.EXISTING_ANTI_AFFINITY, 3),
    ]
    assert "fits" not in plan.pending_reasons


def test_refusals_are_in_filter_order_then_by_message() -> None:
    builder = cluster().node("n0", gpus=2, extended={"rdma/hca": 1.0}).queue("q")
    builder.node("n1", gpus=2).node("n2", gpus=2)
    builder.node("cordoned", gpus=8, unschedulable=True, labels={HOST: "cordoned"})
    builder.job("port", queue="q", gpus=1, pods=0).task(
        status=TaskStatus.RUNNING, node="n1", host_ports=(HostPort(80),)
    )
    builder.job("p", queue="q", gpus=4, pods=0).task(
        host_ports=(HostPort(80),), extended=(("rdma/hca", 1.0),)
    )
    reason = run_cycle(builder.build()).pending_reasons["p"]
    assert [(r.cause, r.nodes, r.message) for r in reason.refusals] == [
        (NodeFilterCause.UNSCHEDULABLE, 1, "unschedulable, not ready or under pressure"),
        (NodeFilterCause.HOST_PORTS, 1, "host port 80/TCP in use"),
        # n0 alone passes the rest; the rules' extended resources come before it unsorted.
        (NodeFilterCause.INSUFFICIENT_RESOURCES, 1, "insufficient nvidia.com/gpu (the pod asks 4)"),
        (NodeFilterCause.INSUFFICIENT_RESOURCES, 3, "insufficient rdma/hca"),
    ]


def test_reclaims_reason_joins_allocates_and_keeps_its_refusals() -> None:
    builder = cluster().node("n0", gpus=1, labels={HOST: "n0"}).queue("a", gpu_quota=1).queue("b")
    builder.job("holder", queue="a", gpus=1, pods=0).task(status=TaskStatus.RUNNING, node="n0")
    builder.job("late", queue="b", gpus=1, pods=1)
    reason = run_cycle(builder.build(), config(actions=("allocate", "reclaim"))).pending_reasons["late"]
    assert reason.message.startswith("allocate: ") and "; reclaim: " in reason.message
    assert reason.refusals == (
        NodeRefusal(
            NodeFilterCause.INSUFFICIENT_RESOURCES, 1, "insufficient nvidia.com/gpu (the pod asks 1)"
        ),
    )


def test_without_the_predicates_plugin_no_static_filter_is_named() -> None:
    builder = three_nodes(cluster())
    builder.node("cordoned", gpus=8, unschedulable=True, labels={HOST: "cordoned"})
    builder.job("p", queue="q", gpus=16, pods=1)
    for predicates, static in ((True, 1), (False, 0)):
        session = open_session(builder.build(), config(predicates=predicates))
        task = find_task(session, "p-0")
        causes = [r.cause for r in node_refusals(session, task)]
        assert causes.count(NodeFilterCause.UNSCHEDULABLE) == static
        assert int(admitted_rows(session, task).sum()) == 4 - static
