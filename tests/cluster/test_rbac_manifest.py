"""The shipped RBAC grants exactly what serve checks for at start-up (issue 8, item 4)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from kai_ray.cluster.kube.permissions import CLUSTER_PERMISSIONS, LEASE_PERMISSIONS, Permission

pytestmark = pytest.mark.unit

MANIFEST = Path(__file__).resolve().parents[2] / "examples" / "rbac" / "serve-rbac.yaml"


def granted(kind: str) -> set[Permission]:
    found: set[Permission] = set()
    for doc in yaml.safe_load_all(MANIFEST.read_text()):
        if doc["kind"] != kind:
            continue
        for rule in doc["rules"]:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    name, _, sub = resource.partition("/")
                    found.update(Permission(group, name, verb, sub) for verb in rule["verbs"])
    return found


def test_the_cluster_role_grants_exactly_what_serve_needs() -> None:
    assert granted("ClusterRole") == set(CLUSTER_PERMISSIONS)


def test_the_lease_role_is_namespaced_and_exact() -> None:
    assert granted("Role") == set(LEASE_PERMISSIONS)


def test_bindings_name_the_service_account_the_docs_name() -> None:
    docs: list[dict[str, Any]] = list(yaml.safe_load_all(MANIFEST.read_text()))
    account = next(d for d in docs if d["kind"] == "ServiceAccount")["metadata"]
    for binding in (d for d in docs if d["kind"] in ("ClusterRoleBinding", "RoleBinding")):
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": account["name"], "namespace": account["namespace"]}
        ]


def test_permissions_print_as_kubectl_would_name_them() -> None:
    assert str(Permission("", "pods", "create", "binding")) == "create pods/binding"
    assert (
        str(Permission("scheduling.run.ai", "queues", "patch", "status"))
        == "patch queues/status.scheduling.run.ai"
    )


def test_the_docs_show_the_manifest_as_it_is() -> None:
    docs = (MANIFEST.parents[2] / "docs" / "kubernetes.md").read_text()
    shown = "\n".join(line.removeprefix("   ") for line in docs.splitlines())
    assert MANIFEST.read_text().strip() in shown
