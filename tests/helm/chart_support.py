"""What the chart tests share besides fixtures: where the chart is, how it is rendered, and how
its RBAC rules read as `Permission`s (the unit kai_ray/cluster/kube/permissions.py lists)."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from kai_ray.cluster.kube.permissions import Permission

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "kai-ray"
EXAMPLES = ROOT / "examples" / "helm"
RELEASE = "kai-ray"
NAMESPACE = "kai-ray-system"
SCHEDULER = f"{RELEASE}-scheduler"
PODGROUPER = f"{RELEASE}-podgrouper"

HelmRunner = Callable[..., subprocess.CompletedProcess[str]]
"""The ``helm`` fixture: ``helm(*args, kubeconfig=None, check=True, timeout=300)``."""
Renderer = Callable[..., list[dict[str, Any]]]
"""The ``render`` fixture: ``render(*values)`` (see ``template_args``), the parsed objects."""


def template_args(*values: str | Path) -> list[str]:
    """``helm template`` of the chart as release kai-ray in kai-ray-system (the names the docs use):
    each value is a values file (a Path) or a ``--set`` assignment (a str)."""
    args = ["template", RELEASE, str(CHART), "--namespace", NAMESPACE]
    for value in values:
        args += ["--values", str(value)] if isinstance(value, Path) else ["--set", value]
    return args


def find(objects: Iterable[dict[str, Any]], kind: str, name: str | None = None) -> list[dict[str, Any]]:
    """The objects of that kind (and name, when given)."""
    return [o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]


def one(objects: Iterable[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    (found,) = find(objects, kind, name)
    return found


def granted(rules: Iterable[dict[str, Any]]) -> set[Permission]:
    """Every (group, resource, verb, subresource) the rules allow, one `Permission` each, so two
    rule lists compare by what they grant, not by how they are grouped or ordered."""
    found: set[Permission] = set()
    for rule in rules:
        assert not rule.get("resourceNames") and not rule.get("nonResourceURLs"), rule
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                name, _, sub = resource.partition("/")
                found.update(Permission(group, name, verb, sub) for verb in rule["verbs"])
    return found
