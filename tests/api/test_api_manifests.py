"""The manifest loader reports every problem on one line naming file, object and field."""

from __future__ import annotations

from pathlib import Path

import pytest

from kai_ray.api import Node, PodGroup, Queue, load_manifest_text, load_manifests

pytestmark = pytest.mark.unit

QUEUE = "apiVersion: scheduling.run.ai/v2\nkind: Queue\nmetadata: {name: team-a}\n"
PODGROUP = "apiVersion: scheduling.run.ai/v2alpha2\nkind: PodGroup\nmetadata: {name: pg, namespace: ns}\n"
POD = "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n"


def problems(text: str) -> list[str]:
    return [str(problem) for problem in load_manifest_text(text, "bad.yaml").problems]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            QUEUE + "spec: {resources: {gpu: {quota: -3}}}",
            "bad.yaml: Queue/team-a: spec.resources.gpu.quota: must be >= 0 or -1, got -3",
        ),
        (
            QUEUE + "spec: {resources: {memory: {limit: -2.5}}}",
            "bad.yaml: Queue/team-a: spec.resources.memory.limit: must be >= 0 or -1, got -2.5",
        ),
        (
            QUEUE + "spec: {resources: {cpu: {overQuotaWeight: -1}}}",
            "bad.yaml: Queue/team-a: spec.resources.cpu.overQuotaWeight: must be >= 0, got -1",
        ),
        (
            QUEUE + "spec: {resources: {gpu: {qouta: 4}}}",
            "bad.yaml: Queue/team-a: spec.resources.gpu.qouta: unknown field (did you mean 'quota'?)",
        ),
        (
            QUEUE + "spec: {parentQueu: x, resources: {}}",
            "bad.yaml: Queue/team-a: spec.parentQueu: unknown field (did you mean 'parentQueue'?)",
        ),
        (
            QUEUE + "sepc: {resources: {}}\nspec: {resources: {}}",
            "bad.yaml: Queue/team-a: sepc: unknown field (did you mean 'spec'?)",
        ),
        (
            QUEUE + "spec: {parentQueue: x}",
            "bad.yaml: Queue/team-a: spec.resources: required field is missing",
        ),
        (
            QUEUE + "spec: {resources: {gpu: {quota: lots}}}",
            "bad.yaml: Queue/team-a: spec.resources.gpu.quota: input should be a valid number, got 'lots'",
        ),
        (
            QUEUE + "spec: {resources: {}, preemptMinRuntime: 5 minutes}",
            "bad.yaml: Queue/team-a: spec.preemptMinRuntime: invalid duration '5 minutes'"
            " (expected e.g. '30s', '5m', '1h30m')",
        ),
        (
            PODGROUP + "spec: {minMember: two}",
            "bad.yaml: PodGroup/ns/pg: spec.minMember: input should be a valid integer, got 'two'",
        ),
        (
            PODGROUP + "spec: {minMember: -1}",
            "bad.yaml: PodGroup/ns/pg: spec.minMember: input should be greater than or equal to 0, got -1",
        ),
        (
            PODGROUP + "spec: {preemptibility: sometimes}",
            "bad.yaml: PodGroup/ns/pg: spec.preemptibility:"
            " input should be 'preemptible' or 'non-preemptible', got 'sometimes'",
        ),
        (
            PODGROUP + "spec: {subGroups: [{name: Workers, minMember: 1}]}",
            "bad.yaml: PodGroup/ns/pg: spec.subGroups[0].name:"
            " string should match pattern '^[a-z0-9]([-a-z0-9]*[a-z0-9])?$', got 'Workers'",
        ),
        (
            PODGROUP + "spec: {subGroups: [{name: w, minMembers: 1}]}",
            "bad.yaml: PodGroup/ns/pg: spec.subGroups[0].minMembers:"
            " unknown field (did you mean 'minMember'?)",
        ),
        (
            PODGROUP + "spec: {preemptionDelay: -5s}",
            "bad.yaml: PodGroup/ns/pg: spec.preemptionDelay: must not be negative, got '-5s'",
        ),
        (
            POD + "spec: {containers: [{name: c, resources: {requests: {cpu: lots}}}]}",
            "bad.yaml: Pod/default/p: spec.containers[0].resources.requests.cpu: invalid quantity 'lots'",
        ),
        (
            "apiVersion: v1\nkind: Pod\nmetadata: {name: p, labels: {kai.scheduler/queue: 7}}",
            "bad.yaml: Pod/default/p: metadata.labels[kai.scheduler/queue]:"
            " input should be a valid string, got 7",
        ),
        (
            "apiVersion: v1\nkind: Pod\nmetadata: {namespace: ns}",
            "bad.yaml: Pod: metadata.name: required field is missing",
        ),
        (
            "apiVersion: scheduling.run.ai/v2\nkind: Queues\nmetadata: {name: q}",
            "bad.yaml: Queues/q: kind: unsupported kind 'Queues' (did you mean 'Queue'?)",
        ),
        (
            "apiVersion: v1\nkind: Secret\nmetadata: {name: cfg}",
            "bad.yaml: Secret/cfg: kind: unsupported kind 'Secret'",
        ),
        ("apiVersion: v1\nmetadata: {name: x}", "bad.yaml: kind: required field is missing"),
        (
            "apiVersion: scheduling.run.ai/v1\nkind: Queue\nmetadata: {name: q}",
            "bad.yaml: Queue/q: apiVersion:"
            " Queue is served as scheduling.run.ai/v2, got 'scheduling.run.ai/v1'",
        ),
        (
            "apiVersion: kai.scheduler/v1alpha1\nkind: Topology\nmetadata: {name: t}\n"
            "spec: {levels: [{nodeLabel: kubernetes.io/hostname}, {nodeLabel: rack}]}",
            "bad.yaml: Topology/t: spec.levels: kubernetes.io/hostname is only allowed as the last level",
        ),
        (
            "kind: Queue\nmetadata:\n  name: a: b\n",
            "bad.yaml:3: invalid YAML: mapping values are not allowed here",
        ),
        ("- just\n- a list", "bad.yaml:1: expected a Kubernetes object (a mapping), got list"),
    ],
)
def test_each_bad_input_gives_one_precise_problem(text: str, expected: str) -> None:
    assert problems(text) == [expected]


def test_reports_every_problem_of_one_object() -> None:
    text = QUEUE + "spec: {resources: {gpu: {quota: -3, limit: -4}}}"
    assert problems(text) == [
        "bad.yaml: Queue/team-a: spec.resources.gpu.quota: must be >= 0 or -1, got -3",
        "bad.yaml: Queue/team-a: spec.resources.gpu.limit: must be >= 0 or -1, got -4",
    ]


def test_a_broken_document_does_not_hide_the_next_ones() -> None:
    text = (
        "---\nkind: [unclosed\n---\n" + QUEUE + "spec: {resources: {}}\n---\n" + QUEUE.replace("team-a", "b")
    )
    loaded = load_manifest_text(text + "spec: {resources: {}}", "x.yaml")
    assert [m.obj.metadata.name for m in loaded.of_type(Queue)] == ["team-a", "b"]
    assert [p.line for p in loaded.problems] == [3]
    assert [m.line for m in loaded.manifests] == [4, 9]


def test_duplicates_keep_the_first_definition() -> None:
    text = (
        QUEUE + "spec: {resources: {gpu: {quota: 1}}}\n---\n" + QUEUE + "spec: {resources: {gpu: {quota: 2}}}"
    )
    loaded = load_manifest_text(text, "x.yaml")
    assert [str(p) for p in loaded.problems] == [
        "x.yaml: Queue/team-a: metadata.name: defined twice; keeping the one from x.yaml"
    ]
    assert loaded.of_type(Queue)[0].obj.spec.resources.gpu.quota == 1


def test_namespaced_objects_default_to_the_default_namespace() -> None:
    loaded = load_manifest_text(POD + "---\n" + PODGROUP.replace(", namespace: ns", ""))
    assert {m.obj.metadata.namespace for m in loaded.manifests} == {"default"}


def test_unwraps_kubectl_lists() -> None:
    text = "apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: Node, metadata: {name: n1}}\n"
    assert [m.obj.metadata.name for m in load_manifest_text(text).of_type(Node)] == ["n1"]


def test_loads_a_directory_recursively_in_sorted_order(tmp_path: Path) -> None:
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "nodes.yml").write_text("apiVersion: v1\nkind: Node\nmetadata: {name: n2}\n")
    (tmp_path / "a.yaml").write_text("apiVersion: v1\nkind: Node\nmetadata: {name: n1}\n")
    (tmp_path / "notes.txt").write_text("not yaml: [")
    loaded = load_manifests(tmp_path)
    assert loaded.problems == []
    assert [(Path(m.file).name, m.position) for m in loaded.manifests] == [("a.yaml", 0), ("nodes.yml", 1)]


def test_a_missing_path_is_a_problem_not_an_exception(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    assert [str(p) for p in load_manifests(missing).problems] == [f"{missing}: no such file or directory"]


def test_of_type_filters_by_model() -> None:
    loaded = load_manifest_text(QUEUE + "spec: {resources: {}}\n---\n" + PODGROUP)
    assert [m.obj.kind for m in loaded.of_type(PodGroup)] == ["PodGroup"]
