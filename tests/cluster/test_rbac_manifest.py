"""The shipped RBAC grants exactly what serve and podgrouper check for at start-up (issues 8 and 9)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from kai_ray.cluster.kube.permissions import (
    CLUSTER_PERMISSIONS,
    LEASE_PERMISSIONS,
    OWNER_READ_PERMISSIONS,
    PODGROUPER_PERMISSIONS,
    SCHEDULER_PERMISSIONS,
    Permission,
)

pytestmark = pytest.mark.unit

RBAC = Path(__file__).resolve().parents[2] / "examples" / "rbac"
SERVE = RBAC / "serve-rbac.yaml"
PODGROUPER = RBAC / "podgrouper-rbac.yaml"


def granted(manifest: Path, kind: str) -> set[Permission]:
    found: set[Permission] = set()
    for doc in yaml.safe_load_all(manifest.read_text()):
        if doc["kind"] != kind:
            continue
        for rule in doc["rules"]:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    name, _, sub = resource.partition("/")
                    found.update(Permission(group, name, verb, sub) for verb in rule["verbs"])
    return found


def test_serve_grants_exactly_what_the_scheduler_and_its_podgrouper_need() -> None:
    assert granted(SERVE, "ClusterRole") == set(CLUSTER_PERMISSIONS)
    assert set(CLUSTER_PERMISSIONS) == {
        *SCHEDULER_PERMISSIONS,
        *PODGROUPER_PERMISSIONS,
        *OWNER_READ_PERMISSIONS,
    }


def test_the_standalone_podgrouper_grants_exactly_what_it_needs() -> None:
    assert granted(PODGROUPER, "ClusterRole") == {*PODGROUPER_PERMISSIONS, *OWNER_READ_PERMISSIONS}


def test_the_scheduler_alone_never_creates_or_updates_podgroups() -> None:
    """`serve --no-podgrouper` leaves PodGroups to whoever groups pods: it only patches them."""
    verbs = {p.verb for p in SCHEDULER_PERMISSIONS if p.resource == "podgroups" and not p.subresource}
    assert verbs == {"get", "list", "watch", "patch"}


@pytest.mark.parametrize("manifest", [SERVE, PODGROUPER], ids=lambda p: p.name)
def test_the_lease_role_is_namespaced_and_exact(manifest: Path) -> None:
    assert granted(manifest, "Role") == set(LEASE_PERMISSIONS)


@pytest.mark.parametrize("manifest", [SERVE, PODGROUPER], ids=lambda p: p.name)
def test_bindings_name_the_service_account_the_docs_name(manifest: Path) -> None:
    docs: list[dict[str, Any]] = list(yaml.safe_load_all(manifest.read_text()))
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


def test_the_docs_show_the_serve_manifest_as_it_is() -> None:
    docs = (RBAC.parents[1] / "docs" / "kubernetes.md").read_text()
    shown = "\n".join(line.removeprefix("   ") for line in docs.splitlines())
    assert SERVE.read_text().strip() in shown
