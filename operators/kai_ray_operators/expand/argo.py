"""Argo Workflow (argoproj.io/v1alpha1): the pods of the steps that can run first.

A workflow's later steps wait for earlier ones, so only its first wave of
pods exists before anything runs; those are the pods the expansion creates.
From the `spec.entrypoint` template:

- `container`, `script` or `containerSet`: one pod;
- `steps`: the first step group (`steps[0]`), each step expanded through the
  template it names, once per `withItems` item;
- `dag`: the tasks with neither `dependencies` nor `depends`, likewise;
- `suspend`, `resource`, `http`, `plugin`, `data`: no pod (the executor pods
  of resource, data and http templates are not modelled).

Steps and tasks name their template with `template`; `templateRef` (another
WorkflowTemplate), `inline` templates, `withParam`, `withSequence` and
`spec.workflowTemplateRef` are resolved by Argo at run time and are problems
here; `when` conditions are taken to hold. A template that reaches itself
again while looking for the first pods is a problem.

Pods are named as Argo names them (pod name format v2): the workflow's name
for the entrypoint's own pod, else `<workflow>-<template>-<FNV-1a of the node
name>`, node names as Argo builds them (`<workflow>[0].<step>`,
`<workflow>.<task>`, `(<i>:<item>)` for items). Each pod is owned directly by
the Workflow, labelled `workflows.argoproj.io/workflow` (and `…/completed:
"false"`), with `spec.podMetadata` then the template's `metadata` for labels
and annotations, and the node name in `workflows.argoproj.io/node-name`. Its
`main` container is the template's `container` (or `script` without its
source; a containerSet's containers as written) and its init containers the
template's; `schedulerName`, `nodeSelector`, `tolerations`, `affinity` come
from the template, else from the workflow spec, and `priorityClassName` from
the template, else `spec.podPriorityClassName`. Argo's `init`/`wait`
executor containers (no requests by default) and `podSpecPatch` are not
modelled. A suspended workflow (`spec.suspend`) creates nothing.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from typing import Any, Final

from kai_ray_operators.errors import InvalidWorkload, UnsupportedWorkload
from kai_ray_operators.expand.model import Child, Expanded, ExpansionContext
from kai_ray_operators.expand.objects import MAX_OBJECTS, fnv32a, new_object, required_map, required_name
from kai_ray_operators.fields import (
    KubeObject,
    Step,
    bool_field,
    describe,
    field,
    field_path,
    list_field,
    map_field,
    name,
    str_field,
)

__all__ = ["expand_workflow"]

WORKFLOW_LABEL = "workflows.argoproj.io/workflow"
COMPLETED_LABEL = "workflows.argoproj.io/completed"
NODE_NAME_ANNOTATION = "workflows.argoproj.io/node-name"
MAIN_CONTAINER = "main"
MAX_POD_NAME_PREFIX: Final = 253 - 10 - 1
"""Argo cuts `<workflow>-<template>` so that the name and its hash fit Kubernetes' 253 characters."""
POD_TEMPLATES = ("container", "script", "containerSet")
RUN_TIME_FIELDS = ("templateRef", "inline", "withParam", "withSequence")
INHERITED_SPEC_FIELDS = ("schedulerName", "nodeSelector", "tolerations", "affinity")


@dataclass(frozen=True)
class _Node:
    """A pod the workflow creates: Argo's node name and the template it runs."""

    node_name: str
    template_name: str
    template: tuple[Step, ...]


class _Templates:
    """The workflow's templates by name, and the walk from the entrypoint to the first pods."""

    def __init__(self, workflow: KubeObject) -> None:
        self._workflow = workflow
        self._paths: dict[str, tuple[Step, ...]] = {}
        for index in range(len(list_field(workflow, "spec", "templates") or [])):
            path: tuple[Step, ...] = ("spec", "templates", index)
            required_map(workflow, *path, what="a template")
            template_name = required_name(workflow, *path, "name")
            if template_name in self._paths:
                raise InvalidWorkload(
                    describe(workflow),
                    f"template {template_name!r} is defined twice",
                    field_path((*path, "name")),
                )
            self._paths[template_name] = path

    def path(self, template_name: str, at: tuple[Step, ...]) -> tuple[Step, ...]:
        if template_name not in self._paths:
            raise InvalidWorkload(
                describe(self._workflow), f"no template is named {template_name!r}", field_path(at)
            )
        return self._paths[template_name]

    def first_pods(
        self, template_name: str, at: tuple[Step, ...], node_name: str, calling: tuple[str, ...] = ()
    ) -> list[_Node]:
        """The pods the template at `node_name` creates before any of them has run."""
        path = self.path(template_name, at)
        if template_name in calling:
            raise InvalidWorkload(
                describe(self._workflow),
                f"template {template_name!r} reaches itself before any pod runs",
                field_path(at),
            )
        calling = (*calling, template_name)
        workflow = self._workflow
        if any(map_field(workflow, *path, kind) is not None for kind in POD_TEMPLATES):
            return [_Node(node_name, template_name, path)]
        calls: list[tuple[tuple[Step, ...], str]] = []
        if list_field(workflow, *path, "steps"):
            first_group = list_field(workflow, *path, "steps", 0) or []
            calls += [((*path, "steps", 0, index), f"{node_name}[0].") for index in range(len(first_group))]
        for index in range(len(list_field(workflow, *path, "dag", "tasks") or [])):
            task = (*path, "dag", "tasks", index)
            if not field(workflow, *task, "dependencies") and not field(workflow, *task, "depends"):
                calls.append((task, f"{node_name}."))
        return [node for call, prefix in calls for node in self._call(call, prefix, calling)]

    def _call(self, call: tuple[Step, ...], prefix: str, calling: tuple[str, ...]) -> list[_Node]:
        """A step or DAG task: its template's first pods, once per `withItems` item."""
        workflow = self._workflow
        required_map(workflow, *call, what="a step")
        call_name = required_name(workflow, *call, "name")
        for key in RUN_TIME_FIELDS:
            if field(workflow, *call, key) is not None:
                raise UnsupportedWorkload(
                    describe(workflow), "resolved by Argo at run time; not expanded", field_path((*call, key))
                )
        target = required_name(workflow, *call, "template")
        items = list_field(workflow, *call, "withItems")
        names = (
            [f"{prefix}{call_name}"]
            if items is None
            else [f"{prefix}{call_name}({index}:{_item(item)})" for index, item in enumerate(items)]
        )
        nodes: list[_Node] = []
        for node_name in names:
            nodes += self.first_pods(target, (*call, "template"), node_name, calling)
            if len(nodes) > MAX_OBJECTS:  # items of nested steps multiply
                raise InvalidWorkload(
                    describe(workflow),
                    f"creates more than the {MAX_OBJECTS} pods simulated",
                    field_path(call),
                )
        return nodes


def _item(item: Any) -> str:
    """An item as Argo prints it in a node name: strings bare, anything else as compact JSON."""
    return item if isinstance(item, str) else json.dumps(item, sort_keys=True, separators=(",", ":"))


def _pod_name(workflow_name: str, node: _Node) -> str:
    if node.node_name == workflow_name:
        return workflow_name
    prefix = f"{workflow_name}-{node.template_name}"[:MAX_POD_NAME_PREFIX]
    return f"{prefix}-{fnv32a(node.node_name)}"


def _containers(workflow: KubeObject, template: tuple[Step, ...]) -> list[Any]:
    if (container := map_field(workflow, *template, "container")) is not None:
        return [{**copy.deepcopy(dict(container)), "name": MAIN_CONTAINER}]
    if (script := map_field(workflow, *template, "script")) is not None:
        body = {key: copy.deepcopy(value) for key, value in script.items() if key != "source"}
        return [{**body, "name": MAIN_CONTAINER}]
    containers = list_field(workflow, *template, "containerSet", "containers")
    if not containers:
        raise InvalidWorkload(
            describe(workflow),
            "at least one container is required",
            field_path((*template, "containerSet", "containers")),
        )
    return copy.deepcopy(containers)


def _string_map(workflow: KubeObject, *path: Step) -> dict[str, str]:
    value = map_field(workflow, *path)
    return {str(key): str(item) for key, item in (value or {}).items()}


def _pod(workflow: KubeObject, node: _Node) -> dict[str, Any]:
    template = node.template
    spec: dict[str, Any] = {"containers": _containers(workflow, template), "restartPolicy": "Never"}
    init_containers = list_field(workflow, *template, "initContainers")
    if init_containers:
        spec["initContainers"] = copy.deepcopy(init_containers)
    for key in INHERITED_SPEC_FIELDS:
        value = field(workflow, *template, key) or field(workflow, "spec", key)
        if value:
            spec[key] = copy.deepcopy(value)
    priority_class = str_field(workflow, *template, "priorityClassName") or str_field(
        workflow, "spec", "podPriorityClassName"
    )
    if priority_class:
        spec["priorityClassName"] = priority_class
    labels = {
        **_string_map(workflow, "spec", "podMetadata", "labels"),
        **_string_map(workflow, *template, "metadata", "labels"),
        WORKFLOW_LABEL: name(workflow),
        COMPLETED_LABEL: "false",
    }
    annotations = {
        **_string_map(workflow, "spec", "podMetadata", "annotations"),
        **_string_map(workflow, *template, "metadata", "annotations"),
        NODE_NAME_ANNOTATION: node.node_name,
    }
    return new_object(
        "v1",
        "Pod",
        workflow,
        _pod_name(name(workflow), node),
        labels=labels,
        annotations=annotations,
        spec=spec,
    )


def expand_workflow(context: ExpansionContext, workflow: KubeObject) -> Expanded:
    if field(workflow, "spec", "workflowTemplateRef") is not None:
        raise UnsupportedWorkload(
            describe(workflow),
            "a WorkflowTemplate is resolved by Argo; not expanded",
            "spec.workflowTemplateRef",
        )
    templates = _Templates(workflow)
    entrypoint = required_name(workflow, "spec", "entrypoint")
    nodes = templates.first_pods(entrypoint, ("spec", "entrypoint"), name(workflow))
    pods = [_pod(workflow, node) for node in nodes]
    if bool_field(workflow, "spec", "suspend"):
        return Expanded()
    return Expanded([Child(pod) for pod in pods])
