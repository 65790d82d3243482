"""apps/v1 Deployment, ReplicaSet and StatefulSet expansion, grouped as on a cluster (§5.3, §5.4)."""

from __future__ import annotations

from typing import Any

import pytest
from expand_builders import (
    deployment,
    expand,
    names,
    one,
    only_problem,
    plans,
    replica_set,
    stateful_set,
    template,
)
from grouping_builders import kube
from kai_ray_operators.identity import stable_uid

pytestmark = pytest.mark.unit


def _replica_set_name(expansion: Any) -> str:
    (name,) = names(expansion, "ReplicaSet")
    return str(name)


def test_deployment_creates_one_replicaset_named_by_its_template_hash() -> None:
    expansion = expand(deployment())
    rs_name = _replica_set_name(expansion)
    template_hash = rs_name.removeprefix("llm-")
    assert rs_name.startswith("llm-") and template_hash.isalnum()
    rs = one(expansion, "ReplicaSet", rs_name)
    assert rs["metadata"]["ownerReferences"][0]["kind"] == "Deployment"
    assert rs["spec"]["replicas"] == 2
    assert rs["spec"]["selector"] == {"matchLabels": {"app": "llm", "pod-template-hash": template_hash}}
    assert names(expansion, "Pod") == [f"{rs_name}-0", f"{rs_name}-1"]
    pod = one(expansion, "Pod", f"{rs_name}-1")
    assert pod["metadata"]["labels"] == {"app": "llm", "pod-template-hash": template_hash}
    assert pod["metadata"]["ownerReferences"][0]["name"] == rs_name
    assert _replica_set_name(expand(deployment(replicas=5))) == rs_name, "the hash is the template's"
    changed = deployment()
    changed["spec"]["template"]["metadata"]["labels"]["version"] = "2"
    assert _replica_set_name(expand(changed)) != rs_name


def test_deployment_pods_get_one_podgroup_each() -> None:
    workload = deployment()
    expansion = expand(workload)
    planned = plans(expansion, workload)
    assert len(planned) == 2
    for pod_name, plan in planned.items():
        pod_uid = stable_uid("v1", "Pod", "ml", pod_name)
        assert (plan.metadata.name, plan.metadata.owner.kind) == (f"pg-{pod_name}-{pod_uid}", "Pod")
        assert (plan.metadata.queue, plan.metadata.priority_class_name, plan.metadata.min_available) == (
            "serving",
            "inference",
            1,
        )


def test_replicaset_pods_share_its_podgroup() -> None:
    workload = replica_set()
    expansion = expand(workload)
    assert names(expansion, "Pod") == ["rs-0", "rs-1"]
    assert {p.metadata.name for p in plans(expansion, workload).values()} == {"pg-rs-rs-uid"}


def test_statefulset_pods_by_ordinal_share_one_podgroup() -> None:
    workload = stateful_set()
    expansion = expand(workload)
    assert names(expansion, "Pod") == ["db-0", "db-1", "db-2"]
    assert one(expansion, "Pod", "db-2")["metadata"]["labels"] == {
        "statefulset.kubernetes.io/pod-name": "db-2",
        "apps.kubernetes.io/pod-index": "2",
    }
    planned = plans(expansion, workload)
    assert {(p.metadata.name, p.metadata.min_available) for p in planned.values()} == {("pg-db-db-uid", 1)}
    assert names(expand(stateful_set(ordinals={"start": 5}, replicas=2)), "Pod") == ["db-5", "db-6"]


def test_replicas_default_to_one() -> None:
    workload = stateful_set()
    del workload["spec"]["replicas"]
    assert names(expand(workload), "Pod") == ["db-0"]


def test_a_replicaset_the_manifests_already_hold_is_not_created_again() -> None:
    workload = deployment()
    exported = kube(
        "apps/v1", "ReplicaSet", "llm-5d9c7b8f4", owner=workload, spec={"replicas": 1, "template": template()}
    )
    expansion = expand(workload, exported)
    assert names(expansion, "ReplicaSet") == []
    assert names(expansion, "Pod") == ["llm-5d9c7b8f4-0"]
    assert ("apps", "ReplicaSet", "ml", "llm-5d9c7b8f4") in expansion.consumed


@pytest.mark.parametrize(
    ("workload", "field", "message"),
    [
        (
            kube("apps/v1", "Deployment", "bad", spec={"replicas": -1, "template": template()}),
            "spec.replicas",
            "at least 0",
        ),
        (
            kube("apps/v1", "Deployment", "bad", spec={"replicas": 1}),
            "spec.template",
            "pod template is required",
        ),
        (
            kube("apps/v1", "ReplicaSet", "bad", spec={"template": {"spec": {"containers": []}}}),
            "spec.template.spec.containers",
            "at least one container",
        ),
        (
            kube("apps/v1", "StatefulSet", "bad", spec={"replicas": "2", "template": template()}),
            "spec.replicas",
            "expected an integer, got '2'",
        ),
        (
            kube("apps/v1", "StatefulSet", "bad", spec={"ordinals": {"start": -1}, "template": template()}),
            "spec.ordinals.start",
            "at least 0",
        ),
    ],
)
def test_a_bad_apps_workload_is_one_problem_and_others_still_expand(
    workload: dict[str, Any], field: str, message: str
) -> None:
    expansion = expand(workload, stateful_set())
    problem = only_problem(expansion)
    assert (problem.kind, problem.name, problem.field) == (workload["kind"], "bad", field)
    assert message in problem.message
    assert names(expansion, "Pod") == ["db-0", "db-1", "db-2"]
