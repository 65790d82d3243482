"""Bad content is reported once, precisely, and only the object concerned is skipped."""

from __future__ import annotations

from typing import Any

import pytest
from kai_ray_operators.identity import stable_uid
from manifest_builders import base, convert, node, pod, podgroup, queue

pytestmark = pytest.mark.unit

POD = "test.yaml: Pod/team-a/p"
POD_PG = f"pg-p-{stable_uid('v1', 'Pod', 'team-a', 'p')}"
"""The PodGroup the podgrouper makes for the bare pod `p` (its uid is stable in manifests)."""
PG = "test.yaml: PodGroup/team-a/pg"
SUBGROUP_LABEL = "metadata.labels[kai.scheduler/subgroup-name]"
TREE = [{"name": "workers", "minMember": 1}, {"name": "head", "minMember": 1}]


def annotated(**annotations: str) -> dict[str, Any]:
    return pod("p", annotations=annotations)


@pytest.mark.parametrize(
    ("objects", "expected"),
    [
        (
            [pod("p", labels={"kai.scheduler/queue": "nope"})],
            f"{POD}: spec.queue of its PodGroup {POD_PG}: queue 'nope' does not exist",
        ),
        (
            [pod("p", labels={})],
            f"{POD}: spec.queue of its PodGroup {POD_PG}: queue 'default-queue' does not exist"
            " (a workload without a kai.scheduler/queue label goes to default-queue)",
        ),
        ([podgroup("pg", queue="nope")], f"{PG}: spec.queue: queue 'nope' does not exist"),
        ([podgroup("pg", queue="")], f"{PG}: spec.queue: no queue given"),
        (
            [pod("p", group="ghost")],
            f"{POD}: metadata.annotations.pod-group-name:"
            " PodGroup 'ghost' does not exist in namespace 'team-a'",
        ),
        (
            [podgroup("pg", subGroups=TREE), pod("p", group="pg")],
            f"{POD}: {SUBGROUP_LABEL}: required, PodGroup 'pg' has subGroups (leaves: workers, head)",
        ),
        (
            [
                podgroup("pg", subGroups=TREE),
                pod("p", group="pg", labels={"kai.scheduler/subgroup-name": "tail"}),
            ],
            f"{POD}: {SUBGROUP_LABEL}:"
            " SubGroup 'tail' is not a leaf of PodGroup 'pg' (leaves: workers, head)",
        ),
        (
            [pod("p", labels={"kai.scheduler/queue": "team-a", "kai.scheduler/subgroup-name": "x"})],
            f"{POD}: {SUBGROUP_LABEL}: SubGroup 'x' is not a leaf of PodGroup '{POD_PG}' (leaves: default)",
        ),
        (
            [podgroup("pg", subGroups=[*TREE, {"name": "head"}])],
            f"{PG}: spec.subGroups[2].name: duplicate SubGroup name 'head'",
        ),
        (
            [podgroup("pg", subGroups=[{"name": "a", "parent": "b"}])],
            f"{PG}: spec.subGroups[0].parent: SubGroup 'b' does not exist",
        ),
        (
            [podgroup("pg", subGroups=[{"name": "a", "parent": "b"}, {"name": "b", "parent": "a"}])],
            f"{PG}: spec.subGroups: parent links form a cycle among a, b",
        ),
        (
            [annotated(**{"gpu-fraction": "half"})],
            f"{POD}: metadata.annotations.gpu-fraction: must be a number in (0, 1], got 'half'",
        ),
        (
            [annotated(**{"gpu-fraction": "1.5"})],
            f"{POD}: metadata.annotations.gpu-fraction: must be a number in (0, 1], got '1.5'",
        ),
        (
            [annotated(**{"gpu-memory": "-5"})],
            f"{POD}: metadata.annotations.gpu-memory: must be a positive integer, got '-5'",
        ),
        (
            [annotated(**{"gpu-fraction-num-devices": "2"})],
            f"{POD}: metadata.annotations.gpu-fraction-num-devices: needs gpu-fraction or gpu-memory",
        ),
        (
            [pod("p", gpus=1, annotations={"gpu-fraction": "0.5"})],
            f"{POD}: metadata.annotations.gpu-fraction: cannot be combined with a nvidia.com/gpu request",
        ),
        (
            [pod("p", labels={"kai.scheduler/queue": "team-a", "kai.scheduler/task-priority": "high"})],
            f"{POD}: metadata.labels[kai.scheduler/task-priority]: must be an integer, got 'high'",
        ),
        (
            [
                {
                    **podgroup("pg"),
                    "metadata": {
                        "name": "pg",
                        "namespace": "team-a",
                        "annotations": {"kai.scheduler/last-start-timestamp": "yesterday"},
                    },
                }
            ],
            f"{PG}: metadata.annotations[kai.scheduler/last-start-timestamp]:"
            " expected an RFC3339 timestamp, got 'yesterday'",
        ),
        ([pod("p", nodeName="ghost")], f"{POD}: spec.nodeName: node 'ghost' does not exist"),
        ([{**pod("p"), "status": {"phase": "Unknown"}}], f"{POD}: status.phase: unsupported phase 'Unknown'"),
        (
            [{**pod("p"), "status": {"phase": "Running"}}],
            f"{POD}: spec.nodeName: a Running pod must name its node",
        ),
        (
            [node("bad", labels={"nvidia.com/gpu.memory": "80GB"})],
            "test.yaml: Node/bad: metadata.labels[nvidia.com/gpu.memory]:"
            " must be a whole number of MiB, got '80GB'",
        ),
        (
            [
                pod(
                    "p",
                    affinity={
                        "nodeAffinity": {
                            "requiredDuringSchedulingIgnoredDuringExecution": {
                                "nodeSelectorTerms": [
                                    {"matchExpressions": []},
                                    {"matchFields": [{"key": "spec.unschedulable", "operator": "Exists"}]},
                                ]
                            }
                        }
                    },
                )
            ],
            f"{POD}: spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
            ".nodeSelectorTerms[1].matchFields[0].key: only metadata.name is supported, got 'spec.unschedulable'",
        ),
    ],
)
def test_each_bad_object_gives_one_precise_problem(objects: list[dict[str, Any]], expected: str) -> None:
    _, problems = base(*objects)
    assert problems == [expected]


def test_every_queue_of_a_parent_cycle_is_reported() -> None:
    state, problems = convert(
        queue("ok"), queue("a", parent="b"), queue("b", parent="a"), queue("c", parent="a")
    )
    assert problems == [
        "test.yaml: Queue/a: spec.parentQueue: parent chain forms a cycle: a -> b -> a",
        "test.yaml: Queue/b: spec.parentQueue: parent chain forms a cycle: a -> b -> a",
        "test.yaml: Queue/c: spec.parentQueue: parent queue 'a' was skipped",
    ]
    assert [q.name for q in state.queues] == ["ok"]


def test_an_orphan_queue_takes_its_descendants_with_it() -> None:
    state, problems = convert(queue("leaf", parent="mid"), queue("mid", parent="ghost"), queue("root"))
    assert problems == [
        "test.yaml: Queue/leaf: spec.parentQueue: parent queue 'mid' was skipped",
        "test.yaml: Queue/mid: spec.parentQueue: queue 'ghost' does not exist",
    ]
    assert [q.name for q in state.queues] == ["root"]


def test_pods_of_a_skipped_podgroup_point_at_it() -> None:
    _, problems = base(podgroup("pg", queue="nope"), pod("p", group="pg"))
    assert problems == [
        f"{PG}: spec.queue: queue 'nope' does not exist",
        f"{POD}: metadata.annotations.pod-group-name: PodGroup 'pg' was skipped (see its own problem)",
    ]


def test_a_malformed_object_is_skipped_and_the_rest_is_kept() -> None:
    typo = queue("team-b")
    typo["spec"]["resources"]["gpu"]["qouta"] = 3
    state, problems = base(
        typo, queue("team-c"), podgroup("pg"), pod("good", group="pg"), pod("bad", group="nope")
    )
    assert problems == [
        "test.yaml: Queue/team-b: spec.resources.gpu.qouta: unknown field (did you mean 'quota'?)",
        "test.yaml: Pod/team-a/bad: metadata.annotations.pod-group-name:"
        " PodGroup 'nope' does not exist in namespace 'team-a'",
    ]
    assert [q.name for q in state.queues] == ["team-a", "team-c"]
    assert [n.name for n in state.nodes] == ["n1"]
    assert [(job.name, [t.name for t in job.tasks]) for job in state.jobs] == [("pg", ["good"])]
