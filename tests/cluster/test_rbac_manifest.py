"""The shipped RBAC grants exactly what serve and podgrouper check for at start-up (issues 8 and 9)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from kai_ray.cluster.kube.permissions import (
    API_PERMISSIONS,
    CLUSTER_PERMISSIONS,
    LEASE_PERMISSIONS,
    OWNER_READ_PERMISSIONS,
    PODGROUPER_PERMISSIONS,
    SCHEDULER_PERMISSIONS,
    USAGE_PERMISSIONS,
    Permission,
)
from kai_ray.server import serve
from kai_ray.server.api_serve import GrpcOptions

pytestmark = pytest.mark.unit

RBAC = Path(__file__).resolve().parents[2] / "examples" / "rbac"
SERVE = RBAC / "serve-rbac.yaml"
PODGROUPER = RBAC / "podgrouper-rbac.yaml"
SERVE_API = RBAC / "serve-api-rbac.yaml"


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


@pytest.mark.parametrize(
    ("manifest", "namespaced"),
    [(SERVE, (*LEASE_PERMISSIONS, *USAGE_PERMISSIONS)), (PODGROUPER, LEASE_PERMISSIONS)],
    ids=lambda v: v.name if isinstance(v, Path) else "",
)
def test_the_lease_role_is_namespaced_and_exact(manifest: Path, namespaced: tuple[Permission, ...]) -> None:
    """Serve's Role also covers the ConfigMap of its recorded queue usage (time-based fair share)."""
    assert granted(manifest, "Role") == set(namespaced)


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


def test_the_api_manifest_grants_exactly_what_the_apis_kubernetes_backend_calls() -> None:
    assert granted(SERVE_API, "ClusterRole") == set(API_PERMISSIONS)
    # Writes of pods and PodGroups only, and reads back only by name: its listing and watching
    # is the scheduler's cache, granted by serve-rbac.yaml already.
    assert {(p.group, p.resource, p.subresource) for p in API_PERMISSIONS} == {
        ("", "pods", ""),
        ("scheduling.run.ai", "podgroups", ""),
    }
    assert {p.verb for p in API_PERMISSIONS} == {"get", "create", "delete"}


def test_the_api_manifest_binds_the_account_of_serve_rbac() -> None:
    (account,) = (
        d["metadata"] for d in yaml.safe_load_all(SERVE.read_text()) if d["kind"] == "ServiceAccount"
    )
    docs: list[dict[str, Any]] = list(yaml.safe_load_all(SERVE_API.read_text()))
    assert sorted(d["kind"] for d in docs) == ["ClusterRole", "ClusterRoleBinding"]
    (binding,) = (d for d in docs if d["kind"] == "ClusterRoleBinding")
    (role,) = (d for d in docs if d["kind"] == "ClusterRole")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account["name"], "namespace": account["namespace"]}
    ]


def test_the_grpc_docs_show_the_api_manifest_as_it_is() -> None:
    docs = (RBAC.parents[1] / "docs" / "grpc.md").read_text()
    assert SERVE_API.read_text().strip() in docs


class _Connected(Exception):
    """Raised by the fake `connect`: the test needs its arguments, not a cluster."""


@pytest.mark.parametrize("grouping", [False, True], ids=["no-podgrouper", "podgrouper"])
@pytest.mark.parametrize("grpc", [False, True], ids=["no-api", "api"])
def test_serve_checks_the_api_permissions_only_when_it_serves_the_api(
    monkeypatch: pytest.MonkeyPatch, grouping: bool, grpc: bool
) -> None:
    checked: list[tuple[Permission, ...]] = []

    def connect(*args: Any) -> Any:
        checked.append(tuple(args[5]))
        raise _Connected

    monkeypatch.setattr(serve, "connect", connect)
    options = serve.ServeOptions(
        kubeconfig=None,
        grouper=(lambda api: None) if grouping else None,
        api=GrpcOptions("127.0.0.1:0") if grpc else None,
    )
    with pytest.raises(_Connected):
        serve._serve(options, None)
    (permissions,) = checked
    assert len(permissions) == len(set(permissions))
    expected = {*SCHEDULER_PERMISSIONS}
    if grouping:
        expected |= set(PODGROUPER_PERMISSIONS)
    if grpc:
        expected |= set(API_PERMISSIONS)
    assert set(permissions) == expected
