"""The chart's RBAC grants exactly what kai_ray/cluster/kube/permissions.py lists, in both layouts.

`serve` and `podgrouper` check those lists at start-up (SelfSubjectAccessReview), so a rule
the chart forgot stops them with one line, and a rule it added is a privilege nothing uses.
The comparison is by what the rules grant (one Permission per group, resource, subresource
and verb), not by their text, so regrouping rules changes nothing here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from chart_support import NAMESPACE, PODGROUPER, ROOT, SCHEDULER, Renderer, find, granted, one

from kai_ray.cluster.kube.permissions import (
    API_PERMISSIONS,
    CLUSTER_PERMISSIONS,
    LEASE_PERMISSIONS,
    OWNER_READ_PERMISSIONS,
    PODGROUPER_PERMISSIONS,
    SCHEDULER_PERMISSIONS,
    USAGE_PERMISSIONS,
)

pytestmark = pytest.mark.kube  # needs the helm binary

SERVE_RBAC = ROOT / "examples" / "rbac" / "serve-rbac.yaml"
PODGROUPER_RBAC = ROOT / "examples" / "rbac" / "podgrouper-rbac.yaml"
SERVE_API_RBAC = ROOT / "examples" / "rbac" / "serve-api-rbac.yaml"


def cluster_role(objects: list[dict[str, Any]], name: str) -> set[Any]:
    return granted(one(objects, "ClusterRole", name)["rules"])


def example_cluster_role(manifest: Path) -> set[Any]:
    docs = [d for d in yaml.safe_load_all(manifest.read_text()) if d["kind"] == "ClusterRole"]
    return granted(rule for doc in docs for rule in doc["rules"])


def test_a_separate_podgrouper_splits_the_permissions_as_permissions_py_does(render: Renderer) -> None:
    objects = render()
    assert cluster_role(objects, SCHEDULER) == set(SCHEDULER_PERMISSIONS)
    assert cluster_role(objects, PODGROUPER) == {*PODGROUPER_PERMISSIONS, *OWNER_READ_PERMISSIONS}
    # The same rules as the documented manifest for the podgrouper alone.
    assert cluster_role(objects, PODGROUPER) == example_cluster_role(PODGROUPER_RBAC)
    assert sorted(r["metadata"]["name"] for r in find(objects, "ClusterRole")) == [PODGROUPER, SCHEDULER]


def test_an_in_process_podgrouper_gives_the_scheduler_both_sets_and_makes_no_podgrouper_account(
    render: Renderer,
) -> None:
    objects = render("podgrouper.inProcess=true")
    assert cluster_role(objects, SCHEDULER) == set(CLUSTER_PERMISSIONS)
    assert cluster_role(objects, SCHEDULER) == example_cluster_role(SERVE_RBAC)
    for kind in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "Deployment"):
        assert all(
            o["metadata"]["name"] != PODGROUPER and "podgrouper" not in o["metadata"]["name"]
            for o in find(objects, kind)
        ), kind


def leader_role_of(role: dict[str, Any]) -> set[Any]:
    """The lease, and for the scheduler also the ConfigMap of its recorded queue usage."""
    usage = set(USAGE_PERMISSIONS) if role["metadata"]["name"] == f"{SCHEDULER}-leader" else set()
    return set(LEASE_PERMISSIONS) | usage


@pytest.mark.parametrize("in_process", [False, True], ids=["separate", "in-process"])
def test_leases_are_granted_in_the_release_namespace_only(render: Renderer, in_process: bool) -> None:
    objects = render(f"podgrouper.inProcess={str(in_process).lower()}")
    components = [SCHEDULER] if in_process else [SCHEDULER, PODGROUPER]
    roles = find(objects, "Role")
    assert sorted(r["metadata"]["name"] for r in roles) == sorted(f"{c}-leader" for c in components)
    for role in roles:
        assert role["metadata"]["namespace"] == NAMESPACE
        assert granted(role["rules"]) == leader_role_of(role)
    # No cluster-wide lease rule: a component may take no other namespace's Lease.
    for role in find(objects, "ClusterRole"):
        assert not any(p.resource == "leases" for p in granted(role["rules"]))


@pytest.mark.parametrize("in_process", [False, True], ids=["separate", "in-process"])
def test_each_binding_gives_its_role_to_the_account_its_deployment_runs_as(
    render: Renderer, in_process: bool
) -> None:
    objects = render(f"podgrouper.inProcess={str(in_process).lower()}")
    accounts = {(a["metadata"]["namespace"], a["metadata"]["name"]) for a in find(objects, "ServiceAccount")}
    for deployment in find(objects, "Deployment"):
        name = deployment["metadata"]["name"]
        account = deployment["spec"]["template"]["spec"]["serviceAccountName"]
        assert account == name and (NAMESPACE, account) in accounts
        subject = [{"kind": "ServiceAccount", "name": account, "namespace": NAMESPACE}]
        cluster_binding = one(objects, "ClusterRoleBinding", name)
        assert cluster_binding["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": name,
        }
        assert cluster_binding["subjects"] == subject
        lease_binding = one(objects, "RoleBinding", f"{name}-leader")
        assert lease_binding["metadata"]["namespace"] == NAMESPACE
        assert lease_binding["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role",
            "name": f"{name}-leader",
        }
        assert lease_binding["subjects"] == subject
    assert len(accounts) == len(find(objects, "Deployment"))


@pytest.mark.parametrize("grpc", [False, True], ids=["no-api", "api"])
@pytest.mark.parametrize("in_process", [False, True], ids=["separate", "in-process"])
def test_the_grpc_api_adds_exactly_its_permissions_to_the_scheduler(
    render: Renderer, in_process: bool, grpc: bool
) -> None:
    """`serve --grpc-address` checks API_PERMISSIONS at start-up: the chart grants them with the
    API, and only then; the podgrouper's role never changes."""
    objects = render(
        f"podgrouper.inProcess={str(in_process).lower()}", f"scheduler.grpc.enabled={str(grpc).lower()}"
    )
    base = set(CLUSTER_PERMISSIONS) if in_process else set(SCHEDULER_PERMISSIONS)
    expected = base | set(API_PERMISSIONS) if grpc else base
    assert cluster_role(objects, SCHEDULER) == expected
    documented = example_cluster_role(SERVE_RBAC) if in_process else set(SCHEDULER_PERMISSIONS)
    if grpc:
        documented |= example_cluster_role(SERVE_API_RBAC)
    assert cluster_role(objects, SCHEDULER) == documented
    if not in_process:
        assert cluster_role(objects, PODGROUPER) == example_cluster_role(PODGROUPER_RBAC)
    for role in find(objects, "Role"):
        assert granted(role["rules"]) == leader_role_of(role)
