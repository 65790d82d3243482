"""Every pod that holds node resources counts on its node, whoever scheduled it (issue 8, item 1)."""

from __future__ import annotations

from typing import Any

import pytest
from manifest_builders import convert, node, pod, podgroup, queue

from kai_ray.api.config import SchedulerConfig
from kai_ray.engine.cycle import open_session, schedule
from kai_ray.model.objects import ClusterState, TaskStatus
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
