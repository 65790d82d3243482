"""`kai-ray simulate` on every example of examples/workloads gives the gang outcome its comments promise.

Each directory is one workload kind as its users write it (no pods), on a small
cluster. The simulator expands it into the pods its controller would create, the
podgrouper groups them as KAI's does, and one cycle schedules them: whether each
pod is placed says whether the gang rules of that kind held.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kai_ray.cli import app

pytestmark = pytest.mark.unit

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "workloads"


def workers(prefix: str, count: int, start: int = 0) -> set[str]:
    return {f"{prefix}{index}" for index in range(start, start + count)}


OUTCOMES: dict[str, tuple[set[str], set[str]]] = {
    # (placed pods, pending pods)
    "raycluster": (
        {"llm-finetune-head", *workers("llm-finetune-gpu-workers-worker-", 4)},
        # 12 GPUs required where 8 are left: the whole cluster waits, the head too.
        {"too-wide-head", *workers("too-wide-gpu-workers-worker-", 6)},
    ),
    "rayjob": (
        {"batch-inference-raycluster-head", *workers("batch-inference-raycluster-gpu-workers-worker-", 2)},
        set(),
    ),
    "rayservice": (
        {"text-ranker-raycluster-head", *workers("text-ranker-raycluster-replicas-worker-", 2)},
        set(),
    ),
    "pytorchjob": (
        # The elastic job starts with its two required workers; the other two wait for room.
        {"resnet-ddp-master-0", *workers("resnet-ddp-worker-", 3), *workers("llm-elastic-worker-", 2)},
        workers("llm-elastic-worker-", 2, start=2),
    ),
    "mpijob": ({"allreduce-bench-launcher-0", *workers("allreduce-bench-worker-", 4)}, set()),
    "tfjob": (
        {"wide-and-deep-chief-0", *workers("wide-and-deep-ps-", 2), *workers("wide-and-deep-worker-", 4)},
        set(),
    ),
    "trainjob": (workers("llama-sft-node-0-", 2), set()),
    "job": (workers("hyperparam-sweep-", 2), workers("hyperparam-sweep-", 2, start=2)),
    "cronjob": ({"nightly-eval-0-0"}, set()),
    # Non-preemptible replicas must fit in the queue's 2-GPU quota, whatever the node has free.
    "deployment": (workers("llm-server-78c8bc7f87-", 2), {"llm-server-78c8bc7f87-2"}),
    "statefulset": (workers("feature-store-", 3), set()),
    "leaderworkerset": (
        {"vllm-405b-0", *workers("vllm-405b-0-", 3, 1), "vllm-405b-1", *workers("vllm-405b-1-", 3, 1)},
        {"vllm-405b-2", *workers("vllm-405b-2-", 3, 1)},
    ),
    "jobset": (
        {"pretrain-driver-0-0", *workers("pretrain-workers-0-", 4), *workers("pretrain-workers-1-", 4)},
        set(),
    ),
}


def outcome(example: str) -> tuple[dict[str, str], dict[str, str]]:
    """(pod → status, pod → its PodGroup) after one simulated cycle of the example."""
    result = CliRunner().invoke(app, ["simulate", str(EXAMPLES / example), "--output", "json"])
    assert result.exit_code == 0, result.stderr
    tasks = json.loads(result.stdout)["tasks"]
    statuses, groups = {}, {}
    for key, task in tasks.items():
        group, pod = key.split("/", 1)
        statuses[pod], groups[pod] = task["status"], group
    return statuses, groups


def test_every_example_directory_has_an_expected_outcome() -> None:
    assert {d.name for d in EXAMPLES.iterdir() if d.is_dir()} == {*OUTCOMES, "argo-workflow"}


@pytest.mark.parametrize("example", sorted(OUTCOMES))
def test_the_example_places_exactly_the_pods_its_gangs_allow(example: str) -> None:
    placed, pending = OUTCOMES[example]
    statuses, _ = outcome(example)
    assert {pod for pod, status in statuses.items() if status == "Allocated"} == placed
    assert {pod for pod, status in statuses.items() if status == "Pending"} == pending
    assert set(statuses) == placed | pending


def test_argo_steps_are_grouped_and_placed_one_pod_each() -> None:
    statuses, groups = outcome("argo-workflow")
    assert len(statuses) == 2 and set(statuses.values()) == {"Allocated"}  # the first step group's two pods
    for pod, group in groups.items():
        assert pod.startswith("train-and-compare-") and group.startswith(f"pg-{pod}-")


@pytest.mark.parametrize(
    ("example", "pods_per_group"),
    [("raycluster", {5, 7}), ("leaderworkerset", {4}), ("deployment", {1}), ("jobset", {9})],
)
def test_pods_share_the_podgroups_their_kind_calls_for(example: str, pods_per_group: set[int]) -> None:
    _, groups = outcome(example)
    sizes = {list(groups.values()).count(group) for group in set(groups.values())}
    assert sizes == pods_per_group
