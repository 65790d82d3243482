"""Every pod that holds node resources counts on its node, whoever scheduled it (issue 8, item 1)."""

from __future__ import annotations

from typing import Any

import pytest
from manifest_builders import convert, node, pod, podgroup, queue

from kai_ray.api.config import SchedulerConfig
from kai_ray.cluster.sim.simulator import SimulatedCluster
from kai_ray.engine.cycle import open_session, schedule
from kai_ray.model.objects import ClusterState, HostPort, TaskStatus
from kai_ray.model.snapshot import compile_snapshot

pytestmark = pytest.mark.unit


def team(name: str = "team-a", gpu: float = 16) -> dict[str, Any]:
    """A queue with every resource unlimited but the GPU quota (unset limits are 0 in KAI)."""
    unlimited = {"quota": -1, "limit": -1, "overQuotaWeight": 1}
    body = queue(name, gpu=gpu)
    body["spec"]["resources"].update(cpu=dict(unlimited), memory=dict(unlimited))
    return body


def running(obj: dict[str, Any], node_name: str = "n1") -> dict[str, Any]:
    obj["spec"]["nodeName"] = node_name
    obj["status"] = {"phase": "Running"}
    return obj


def foreign(name: str, gpus: int, phase: str = "Running", node_name: str = "n1") -> dict[str, Any]:
    body = pod(name, ns="other", gpus=gpus, labels={}, schedulerName="default-scheduler")
    body["spec"]["nodeName"] = node_name
    body["status"] = {"phase": phase}
    return body


def free_gpus_after(state: ClusterState, *pending: str) -> dict[str, str]:
    """Where the engine puts the named pending pods (pod name → node)."""
    plan = schedule(compile_snapshot(state), SchedulerConfig())
    return {b.task: b.node for b in plan.binds if b.task in pending}


def test_another_schedulers_pod_occupies_its_node() -> None:
    state, problems = convert(
        team("team-a", gpu=16),
        node("n1", gpus=8),
        node("n2", gpus=8),
        foreign("web", gpus=8),
        foreign("done", gpus=8, phase="Succeeded", node_name="n2"),
        pod("p", gpus=8),
    )
    assert problems == []
    assert [(h.key, h.foreign, h.task.node, h.task.gpu) for h in state.held] == [("other/web", True, "n1", 8)]
    assert free_gpus_after(state, "p") == {"p": "n2"}  # n1 is full, n2's finished pod holds nothing


def test_pods_we_cannot_interpret_still_hold_their_node() -> None:
    state, problems = convert(
        team("team-a", gpu=16),
        node("n1", gpus=8),
        podgroup("orphan", queue="deleted-queue"),
        running(pod("orphan-0", gpus=4, group="orphan")),
        running(pod("bad-fraction", annotations={"gpu-fraction": "lots"})),
        pod("new", gpus=4),
    )
    assert len(problems) == 3  # the PodGroup, its pod, the bad annotation
    held = {h.key: (h.foreign, h.task.gpu) for h in state.held}
    assert held == {"team-a/orphan-0": (False, 4), "team-a/bad-fraction": (False, 1)}
    # 8 GPUs - 4 (orphan) - 1 (unreadable fraction held as a whole device) leave 3: the 4-GPU pod waits.
    assert free_gpus_after(state, "new") == {}


@pytest.mark.parametrize(
    "annotations",
    [
        {"gpu-fraction": "0.5"},
        {"gpu-fraction": "lots"},
        {"gpu-memory": "1024", "gpu-fraction-num-devices": "2"},
    ],
)
@pytest.mark.parametrize("ours", [True, False])
def test_a_whole_gpu_pod_with_sharing_annotations_holds_its_whole_gpus(
    annotations: dict[str, str], ours: bool
) -> None:
    """The kubelet gave the pod its 4 `nvidia.com/gpu` whatever the annotations say: 4 are held
    (once 1 was, and 158 pods were bound where 152 GPUs were free), and the guess is reported."""
    body = pod("annotated", gpus=4, group="g" if ours else None, annotations=annotations)
    if not ours:
        body["metadata"]["namespace"], body["spec"]["schedulerName"] = "other", "default-scheduler"
    state, problems = convert(team(), node("n1", gpus=8), running(body), pod("new", gpus=5))
    assert [(h.task.node, h.task.gpu) for h in state.held] == [("n1", 4)]
    words = "" if ours else "counted as holding 4 GPUs"  # ours: whatever made the pod unreadable
    assert any("annotated" in p and "metadata.annotations.gpu-" in p and words in p for p in problems)
    assert free_gpus_after(state, "new") == {}  # 8 - 4 leaves room for 4, not 5


def test_ungrouped_pods_wait_for_the_grouper_but_a_placed_one_counts() -> None:
    state, problems = convert(
        team("team-a", gpu=16),
        node("n1", gpus=8),
        pod("waiting", gpus=1),
        running(pod("already-there", gpus=2)),
        group_pods=False,
    )
    assert problems == [] and state.jobs == []
    assert [(h.key, h.foreign, h.task.gpu) for h in state.held] == [("team-a/already-there", False, 2)]


def test_a_terminating_foreign_pod_is_releasing() -> None:
    leaving = foreign("leaving", gpus=8)
    leaving["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    state, _ = convert(team("team-a", gpu=8), node("n1", gpus=8), leaving, pod("p", gpus=8))
    assert [h.task.status for h in state.held] == [TaskStatus.RELEASING]
    plan = schedule(compile_snapshot(state), SchedulerConfig())
    assert [(b.task, b.node) for b in plan.pipelined] == [("p", "n1")]  # waits for the release


def test_fair_share_divides_what_other_schedulers_leave() -> None:
    state, _ = convert(
        team("team-a", gpu=0),
        team("team-b", gpu=0),
        node("n1", gpus=8),
        node("n2", gpus=8),
        foreign("web", gpus=4),
        podgroup("orphan", queue="gone"),
        running(pod("orphan-0", gpus=2, group="orphan"), node_name="n2"),
    )

    session = open_session(compile_snapshot(state), SchedulerConfig())
    assert session.fairness_totals()[2] == 12  # 16 GPUs less the foreign 4; our orphan is not subtracted


@pytest.mark.parametrize(
    ("conditions", "usable"),
    [
        ([], True),
        ([{"type": "Ready", "status": "True"}], True),
        ([{"type": "Ready", "status": "False"}], False),
        ([{"type": "Ready", "status": "Unknown"}], False),
        ([{"type": "Ready", "status": "True"}, {"type": "DiskPressure", "status": "True"}], False),
        ([{"type": "Ready", "status": "True"}, {"type": "MemoryPressure", "status": "False"}], True),
        ([{"type": "NetworkUnavailable", "status": "True"}], False),
    ],
)
def test_only_ready_nodes_without_pressure_take_pods(conditions: list[dict[str, str]], usable: bool) -> None:
    state, problems = convert(team(), node("n1", gpus=8, conditions=conditions), pod("p", gpus=1))
    assert problems == [] and state.nodes[0].ready is usable
    assert free_gpus_after(state, "p") == ({"p": "n1"} if usable else {})


def constrained(body: dict[str, Any], host_port: int = 8080) -> dict[str, Any]:
    """The pod with labels, a host port, an extended request and required anti-affinity."""
    body["metadata"]["labels"] = {**body["metadata"]["labels"], "app": "db"}
    container = body["spec"]["containers"][0]
    container["ports"] = [{"containerPort": 80, "hostPort": host_port}]
    container["resources"]["requests"]["rdma/hca"] = "1"
    anti = {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "kubernetes.io/hostname"}
    body["spec"]["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [anti]}}
    return body


def held_constraints(state: ClusterState) -> dict[str, tuple[Any, ...]]:
    """Per held pod: its app label, host ports, extended requests and anti-affinity namespaces."""
    found = {}
    for held in state.held:
        task = held.task
        anti = task.pod_affinity.required_anti if task.pod_affinity else ()
        found[held.key] = (
            task.labels.get("app"),
            task.host_ports,
            task.extended,
            tuple(term.namespaces for term in anti),
        )
    return found


def test_a_held_pod_keeps_what_binds_the_pods_beside_it() -> None:
    """Kubernetes applies a pod's labels, host ports, extended requests and required anti-affinity
    to every pod on its node, whoever scheduled it and whether or not we can read the rest."""
    state, problems = convert(
        team(),
        node("n1", gpus=8),
        constrained(foreign("web", gpus=1)),
        constrained(running(pod("bad-fraction", annotations={"gpu-fraction": "lots"}))),
        constrained(running(pod("bad-port", gpus=1)), host_port=70000),
    )
    assert [problem.split(": ")[2] for problem in problems] == [
        "metadata.annotations.gpu-fraction",
        "spec.containers[0].ports[0].hostPort",
    ]
    expected = (frozenset({"other"}),)
    assert held_constraints(state) == {
        "other/web": ("db", (HostPort(8080),), (("rdma/hca", 1.0),), expected),
        "team-a/bad-fraction": ("db", (HostPort(8080),), (("rdma/hca", 1.0),), (frozenset({"team-a"}),)),
        "team-a/bad-port": ("db", (), (("rdma/hca", 1.0),), (frozenset({"team-a"}),)),
    }


def test_a_pod_created_on_a_node_is_bound_there_and_counts_there() -> None:
    """`spec.nodeName` set at creation is a bind to Kubernetes (the kubelet starts the pod): the
    pod is ours, BOUND to that node, never placed again, and what it requests is taken there."""
    state, problems = convert(
        team(),
        node("n1", gpus=8),
        node("n2", gpus=8),
        pod("pinned", gpus=6, nodeName="n1"),
        pod("other", gpus=4),
    )
    assert problems == []
    pinned = next(task for job in state.jobs for task in job.tasks if task.name == "pinned")
    assert (pinned.status, pinned.node) == (TaskStatus.BOUND, "n1")
    sim = SimulatedCluster(state, SchedulerConfig())
    results = sim.run(3)
    assert all(b.task != "pinned" for result in results for b in result.plan.binds)
    assert [(b.task, b.node) for b in results[0].plan.binds] == [("other", "n2")]  # n1 has 2 GPUs left
    assert (pinned.status, pinned.node) == (TaskStatus.BOUND, "n1")
