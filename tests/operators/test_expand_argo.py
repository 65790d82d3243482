"""Argo Workflow expansion: the first runnable steps' pods, one PodGroup each (spec/integrations.md §4)."""

from __future__ import annotations

from typing import Any

import pytest
from expand_builders import created, expand, names, one, only_problem, plans, workflow
from kai_ray_operators.expand import argo
from kai_ray_operators.expand.objects import fnv32a
from kai_ray_operators.identity import stable_uid

pytestmark = pytest.mark.unit

NODE_NAME = "workflows.argoproj.io/node-name"


def _container(name: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "container": {"image": "busybox", "resources": {"requests": {"cpu": "1"}}}, **extra}


def _node_names(expansion: Any) -> list[str]:
    return [pod["metadata"]["annotations"][NODE_NAME] for pod in created(expansion, "Pod")]


@pytest.mark.parametrize(("text", "value"), [("", 0x811C9DC5), ("a", 0xE40C292C), ("foobar", 0xBF9CF968)])
def test_fnv1a_matches_the_reference_vectors(text: str, value: int) -> None:
    assert fnv32a(text) == value


def test_a_container_entrypoint_is_one_pod_named_after_the_workflow() -> None:
    wf = workflow()
    expansion = expand(wf)
    assert names(expansion, "Pod") == ["wf"]
    pod = one(expansion, "Pod", "wf")
    assert pod["metadata"]["labels"] == {
        "workflows.argoproj.io/workflow": "wf",
        "workflows.argoproj.io/completed": "false",
    }
    assert pod["metadata"]["ownerReferences"][0]["kind"] == "Workflow"
    assert pod["spec"] == {
        "containers": [{"name": "main", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}],
        "restartPolicy": "Never",
        "schedulerName": "kai-scheduler",
    }
    (plan,) = plans(expansion, wf).values()
    pod_uid = stable_uid("v1", "Pod", "ml", "wf")
    assert (plan.metadata.name, plan.metadata.owner.kind) == (f"pg-wf-{pod_uid}", "Pod")
    assert (plan.metadata.queue, plan.metadata.min_available) == ("team-a", 1)


def test_steps_expand_the_first_group_once_per_item_with_argo_names() -> None:
    steps = {
        "name": "main",
        "steps": [
            [
                {"name": "prepare", "template": "work"},
                {"name": "fan", "template": "work", "withItems": ["a", 2]},
            ],
            [{"name": "later", "template": "work"}],
        ],
    }
    wf = workflow(templates=[steps, _container("work")])
    expansion = expand(wf)
    assert _node_names(expansion) == ["wf[0].prepare", "wf[0].fan(0:a)", "wf[0].fan(1:2)"]
    assert names(expansion, "Pod") == [f"wf-work-{fnv32a(node)}" for node in _node_names(expansion)]
    planned = plans(expansion, wf)
    assert len({plan.metadata.name for plan in planned.values()}) == 3, "one PodGroup per step pod"


def test_dag_expands_the_tasks_without_dependencies_and_nested_templates() -> None:
    dag = {
        "name": "main",
        "dag": {
            "tasks": [
                {"name": "a", "template": "inner"},
                {"name": "b", "template": "work", "dependencies": ["a"]},
                {"name": "c", "template": "work", "depends": "a.Succeeded"},
                {"name": "d", "template": "work", "dependencies": []},
                {"name": "e", "template": "wait"},
            ]
        },
    }
    inner = {"name": "inner", "steps": [[{"name": "s", "template": "work"}]]}
    wf = workflow(templates=[dag, inner, _container("work"), {"name": "wait", "suspend": {}}])
    expansion = expand(wf)
    assert _node_names(expansion) == ["wf.a[0].s", "wf.d"]


def test_template_settings_override_the_workflow_ones() -> None:
    work = _container(
        "work",
        schedulerName="other",
        priorityClassName="inference",
        metadata={"labels": {"step": "yes"}},
        nodeSelector={"pool": "gpu"},
    )
    wf = workflow(
        "work",
        templates=[work],
        podMetadata={"labels": {"team": "a", "step": "no"}},
        podPriorityClassName="train",
        tolerations=[{"key": "gpu", "operator": "Exists"}],
    )
    pod = one(expand(wf), "Pod", "wf")
    assert pod["spec"]["schedulerName"] == "other"
    assert pod["spec"]["priorityClassName"] == "inference"
    assert pod["spec"]["nodeSelector"] == {"pool": "gpu"}
    assert pod["spec"]["tolerations"] == [{"key": "gpu", "operator": "Exists"}]
    assert {"team": "a", "step": "yes"}.items() <= pod["metadata"]["labels"].items()


def test_script_and_container_set_templates() -> None:
    script = {
        "name": "main",
        "script": {"image": "python", "source": "print(1)", "resources": {"requests": {"cpu": "2"}}},
    }
    pod = one(expand(workflow(templates=[script])), "Pod", "wf")
    assert pod["spec"]["containers"] == [
        {"name": "main", "image": "python", "resources": {"requests": {"cpu": "2"}}}
    ]
    container_set = {"name": "main", "containerSet": {"containers": [{"name": "a"}, {"name": "b"}]}}
    pod = one(expand(workflow(templates=[container_set])), "Pod", "wf")
    assert [c["name"] for c in pod["spec"]["containers"]] == ["a", "b"]


def test_a_suspended_workflow_creates_nothing() -> None:
    assert expand(workflow(suspend=True)).children == []


def _steps(**step: Any) -> list[dict[str, Any]]:
    return [{"name": "main", "steps": [[{"name": "s", "template": "work", **step}]]}, _container("work")]


@pytest.mark.parametrize(
    ("workload", "field", "message"),
    [
        (workflow(entrypoint=""), "spec.entrypoint", "name is required"),
        (workflow(entrypoint="nope"), "spec.entrypoint", "no template is named 'nope'"),
        (
            workflow(templates=_steps(templateRef={"name": "x"})),
            "spec.templates[0].steps[0][0].templateRef",
            "run time",
        ),
        (
            workflow(templates=_steps(withParam="{{x}}")),
            "spec.templates[0].steps[0][0].withParam",
            "run time",
        ),
        (
            workflow(templates=_steps(template="main")),
            "spec.templates[0].steps[0][0].template",
            "reaches itself",
        ),
        (
            workflow(templates=_steps(template="gone")),
            "spec.templates[0].steps[0][0].template",
            "no template",
        ),
        (workflow(workflowTemplateRef={"name": "t"}), "spec.workflowTemplateRef", "WorkflowTemplate"),
        (
            workflow(templates=[{"name": "main", "containerSet": {"containers": []}}]),
            "spec.templates[0].containerSet.containers",
            "at least one container",
        ),
        (
            workflow(templates=[_container("main"), _container("main")]),
            "spec.templates[1].name",
            "defined twice",
        ),
    ],
)
def test_a_bad_workflow_is_one_problem_and_others_still_expand(
    workload: dict[str, Any], field: str, message: str
) -> None:
    workload["metadata"]["name"] = "bad"
    expansion = expand(workload, workflow())
    problem = only_problem(expansion)
    assert (problem.kind, problem.name, problem.field) == ("Workflow", "bad", field)
    assert message in problem.message
    assert names(expansion, "Pod") == ["wf"]


def test_an_empty_template_setting_falls_back_to_the_workflow_one() -> None:
    wf = workflow(
        templates=[_container("main", schedulerName="", nodeSelector={})], nodeSelector={"pool": "a"}
    )
    pod = one(expand(wf), "Pod", "wf")
    assert (pod["spec"]["schedulerName"], pod["spec"]["nodeSelector"]) == ("kai-scheduler", {"pool": "a"})


def test_items_that_multiply_past_the_limit_are_a_problem(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(argo, "MAX_OBJECTS", 2)
    problem = only_problem(expand(workflow(templates=_steps(withItems=[1, 2, 3]))))
    assert (problem.field, problem.message) == (
        "spec.templates[0].steps[0][0]",
        "creates more than the 2 pods simulated",
    )
