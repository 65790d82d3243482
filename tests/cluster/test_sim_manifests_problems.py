"""Bad content is reported once, precisely, and only the object concerned is skipped."""

from __future__ import annotations

from typing import Any

import pytest
from kai_ray_operators.identity import stable_uid
from manifest_builders import base, convert, node, pod, podgroup, queue

from kai_ray.model.objects import Blocker, BlockerCause

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
            ".nodeSelectorTerms[1].matchFields[0].key:"
            " only metadata.name is supported, got 'spec.unschedulable'",
        ),
    ],
)
def test_each_bad_object_gives_one_precise_problem(objects: list[dict[str, Any]], expected: str) -> None:
    _, problems = base(*objects)
    assert problems == [expected]


REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"
LABEL_OPERATORS = "(known: In, NotIn, Exists, DoesNotExist)"
NODE_TERM = f"spec.affinity.nodeAffinity.{REQUIRED}.nodeSelectorTerms[0].matchExpressions[0]"
SPREAD = "spec.topologySpreadConstraints[0]"


def pod_term(**fields: Any) -> dict[str, Any]:
    return {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "zone", **fields}


def pod_rules(kind: str, term: dict[str, Any], weight: int | None = None) -> dict[str, Any]:
    """`spec` fields giving the pod one `kind` (podAffinity, podAntiAffinity) term: required, or
    preferred with `weight`."""
    if weight is None:
        rules = {REQUIRED: [term]}
    else:
        rules = {PREFERRED: [{"weight": weight, "podAffinityTerm": term}]}
    return {"affinity": {kind: rules}}


def node_rule(operator: str, values: list[str], weight: int | None = None) -> dict[str, Any]:
    expression = {"key": "gpu", "operator": operator, "values": values}
    if weight is None:
        rules: dict[str, Any] = {REQUIRED: {"nodeSelectorTerms": [{"matchExpressions": [expression]}]}}
    else:
        rules = {PREFERRED: [{"weight": weight, "preference": {"matchExpressions": [expression]}}]}
    return {"affinity": {"nodeAffinity": rules}}


def selector_rule(*expressions: dict[str, Any]) -> dict[str, Any]:
    return pod_rules("podAntiAffinity", pod_term(labelSelector={"matchExpressions": list(expressions)}))


def spread(**fields: Any) -> dict[str, Any]:
    constraint = {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule", **fields}
    return {"topologySpreadConstraints": [constraint]}


def ports(*entries: dict[str, Any], init: bool = False) -> dict[str, Any]:
    container = {"name": "main", "ports": list(entries)}
    return {"initContainers": [container]} if init else {"containers": [container]}


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        (
            selector_rule({"key": "app", "operator": "Has", "values": ["db"]}),
            f"spec.affinity.podAntiAffinity.{REQUIRED}[0].labelSelector.matchExpressions[0].operator:"
            f" unknown value 'Has' {LABEL_OPERATORS}",
        ),
        (
            selector_rule({"key": "app", "operator": "In"}),
            f"spec.affinity.podAntiAffinity.{REQUIRED}[0].labelSelector.matchExpressions[0].values:"
            " required with operator In",
        ),
        (
            selector_rule({"key": "app", "operator": "NotIn", "values": []}),
            f"spec.affinity.podAntiAffinity.{REQUIRED}[0].labelSelector.matchExpressions[0].values:"
            " required with operator NotIn",
        ),
        (
            selector_rule({"key": "app", "operator": "Exists", "values": ["db"]}),
            f"spec.affinity.podAntiAffinity.{REQUIRED}[0].labelSelector.matchExpressions[0].values:"
            " must be empty with operator Exists",
        ),
        (
            pod_rules(
                "podAffinity",
                pod_term(
                    namespaceSelector={"matchExpressions": [{"key": "t", "operator": "Gt", "values": ["1"]}]}
                ),
            ),
            f"spec.affinity.podAffinity.{REQUIRED}[0].namespaceSelector.matchExpressions[0].operator:"
            f" unknown value 'Gt' {LABEL_OPERATORS}",
        ),
        (
            pod_rules("podAffinity", pod_term(topologyKey="")),
            f"spec.affinity.podAffinity.{REQUIRED}[0].topologyKey: required",
        ),
        (
            pod_rules("podAntiAffinity", pod_term(topologyKey=""), weight=10),
            f"spec.affinity.podAntiAffinity.{PREFERRED}[0].podAffinityTerm.topologyKey: required",
        ),
        (
            pod_rules("podAffinity", pod_term(), weight=0),
            f"spec.affinity.podAffinity.{PREFERRED}[0].weight: must be between 1 and 100, got 0",
        ),
        (
            pod_rules("podAffinity", {"topologyKey": "zone", "matchLabelKeys": ["rev"]}),
            f"spec.affinity.podAffinity.{REQUIRED}[0].matchLabelKeys:"
            " must not be set without a labelSelector",
        ),
        (
            pod_rules("podAffinity", pod_term(matchLabelKeys=["rev"], mismatchLabelKeys=["rev"])),
            f"spec.affinity.podAffinity.{REQUIRED}[0].mismatchLabelKeys: 'rev' is also in matchLabelKeys",
        ),
        (
            node_rule("Near", ["x"]),
            f"{NODE_TERM}.operator: unknown value 'Near' (known: In, NotIn, Exists, DoesNotExist, Gt, Lt)",
        ),
        (node_rule("In", []), f"{NODE_TERM}.values: required with operator In"),
        (node_rule("DoesNotExist", ["x"]), f"{NODE_TERM}.values: must be empty with operator DoesNotExist"),
        (node_rule("Gt", ["1", "2"]), f"{NODE_TERM}.values: takes exactly one value with operator Gt"),
        (
            node_rule("In", ["x"], weight=101),
            f"spec.affinity.nodeAffinity.{PREFERRED}[0].weight: must be between 1 and 100, got 101",
        ),
        (
            node_rule("Lt", [], weight=1),
            f"spec.affinity.nodeAffinity.{PREFERRED}[0].preference.matchExpressions[0].values:"
            " takes exactly one value with operator Lt",
        ),
        (spread(maxSkew=0), f"{SPREAD}.maxSkew: must be at least 1, got 0"),
        (spread(topologyKey=""), f"{SPREAD}.topologyKey: required"),
        (
            spread(whenUnsatisfiable="Sometimes"),
            f"{SPREAD}.whenUnsatisfiable: unknown value 'Sometimes' (known: DoNotSchedule, ScheduleAnyway)",
        ),
        (spread(minDomains=0), f"{SPREAD}.minDomains: must be at least 1, got 0"),
        (
            spread(minDomains=2, whenUnsatisfiable="ScheduleAnyway"),
            f"{SPREAD}.minDomains: only allowed with whenUnsatisfiable: DoNotSchedule",
        ),
        (
            spread(nodeAffinityPolicy="Always"),
            f"{SPREAD}.nodeAffinityPolicy: unknown value 'Always' (known: Honor, Ignore)",
        ),
        (
            spread(nodeTaintsPolicy="honor"),
            f"{SPREAD}.nodeTaintsPolicy: unknown value 'honor' (known: Honor, Ignore)",
        ),
        (
            spread(
                labelSelector={"matchExpressions": [{"key": "app", "operator": "Exists", "values": ["x"]}]}
            ),
            f"{SPREAD}.labelSelector.matchExpressions[0].values: must be empty with operator Exists",
        ),
        (spread(matchLabelKeys=["rev"]), f"{SPREAD}.matchLabelKeys: must not be set without a labelSelector"),
        (
            {"topologySpreadConstraints": [spread()["topologySpreadConstraints"][0]] * 2},
            "spec.topologySpreadConstraints[1]: a second constraint on 'zone' with DoNotSchedule",
        ),
        (
            ports({"containerPort": 80, "hostPort": 65536}),
            "spec.containers[0].ports[0].hostPort: must be between 1 and 65535, got 65536",
        ),
        (
            ports({"containerPort": 80, "hostPort": -1}),
            "spec.containers[0].ports[0].hostPort: must be between 1 and 65535, got -1",
        ),
        (
            ports({"hostPort": 8080}),
            "spec.containers[0].ports[0].containerPort: must be between 1 and 65535, got 0",
        ),
        (
            ports({"containerPort": 80}, {"containerPort": 81, "protocol": "HTTP"}),
            "spec.containers[0].ports[1].protocol: unknown value 'HTTP' (known: TCP, UDP, SCTP)",
        ),
        (
            ports({"containerPort": 80, "hostPort": 80, "protocol": "tcp"}, init=True),
            "spec.initContainers[0].ports[0].protocol: unknown value 'tcp' (known: TCP, UDP, SCTP)",
        ),
    ],
)
def test_each_constraint_the_api_server_refuses_is_reported_and_the_rest_scheduled(
    spec: dict[str, Any], expected: str
) -> None:
    state, problems = base(pod("p", **spec), pod("ok", gpus=1))
    assert problems == [f"{POD}: {expected}"]
    # The refused pod waits in its job, blocked with the field named (its PodGroup's condition
    # says it); the other pod is converted as usual.
    blockers = {task.name: task.blockers for job in state.jobs for task in job.tasks}
    assert blockers == {"p": (Blocker(BlockerCause.INVALID_CONSTRAINT, expected),), "ok": ()}


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


def test_pods_of_a_skipped_podgroup_say_why_it_was() -> None:
    _, problems = base(podgroup("pg", queue="nope"), pod("p", group="pg"))
    assert problems == [
        f"{PG}: spec.queue: queue 'nope' does not exist",
        f"{POD}: metadata.annotations.pod-group-name: PodGroup 'pg' is not scheduled: "
        "spec.queue: queue 'nope' does not exist",
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
