"""LeaderWorkerSet expansion: leader and worker StatefulSets, their pods, grouped as on a cluster (§6)."""

from __future__ import annotations

from typing import Any

import pytest
from expand_builders import expand, leader_worker_set, names, one, only_problem, plans, subgroups, template
from kai_ray_operators.fields import labels_of
from kai_ray_operators.identity import stable_uid

pytestmark = pytest.mark.unit

INDEX_LABELS = ("leaderworkerset.sigs.k8s.io/group-index", "leaderworkerset.sigs.k8s.io/worker-index")
PODS = ["vllm-0", "vllm-1", "vllm-0-1", "vllm-0-2", "vllm-0-3", "vllm-1-1", "vllm-1-2", "vllm-1-3"]


def _indexes(pod: dict[str, Any]) -> tuple[str | None, ...]:
    return tuple(labels_of(pod).get(label) for label in INDEX_LABELS)


def test_leader_and_worker_statefulsets_as_lws_creates_them() -> None:
    expansion = expand(leader_worker_set())
    assert expansion.problems == []
    assert names(expansion, "StatefulSet") == ["vllm", "vllm-0", "vllm-1"]
    assert names(expansion, "Pod") == PODS
    assert (
        one(expansion, "StatefulSet", "vllm")["metadata"]["ownerReferences"][0]["kind"] == "LeaderWorkerSet"
    )
    workers = one(expansion, "StatefulSet", "vllm-1")
    assert workers["metadata"]["ownerReferences"][0] | {"uid": None} == {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": "vllm-1",
        "uid": None,
        "controller": True,
        "blockOwnerDeletion": True,
    }
    assert (
        workers["metadata"]["ownerReferences"][0]["uid"] == one(expansion, "Pod", "vllm-1")["metadata"]["uid"]
    )
    assert workers["spec"]["replicas"] == 3
    assert _indexes(one(expansion, "Pod", "vllm-1")) == ("1", "0")
    assert _indexes(one(expansion, "Pod", "vllm-1-3")) == ("1", "3")
    assert labels_of(one(expansion, "Pod", "vllm-0-2"))["role"] == "worker"
    assert labels_of(one(expansion, "Pod", "vllm-0"))["role"] == "leader"
    assert one(expansion, "Pod", "vllm-0-2")["metadata"]["annotations"] == {
        "leaderworkerset.sigs.k8s.io/size": "4"
    }


def test_lws_groups_as_the_spec_example() -> None:
    workload = leader_worker_set()
    planned = plans(expand(workload), workload)
    assert sorted(planned) == sorted(PODS)
    for pod_name, plan in planned.items():
        group = pod_name.split("-")[1]
        assert plan.metadata.name == f"pg-vllm-vllm-uid-group-{group}"
        assert (plan.metadata.min_available, plan.metadata.queue) == (4, "serving")
        assert subgroups(plan) == [("leader", 1, None, None), ("workers", 3, None, None)]
        assert plan.metadata.subgroup_of(pod_name) == ("leader" if pod_name.count("-") == 1 else "workers")


def test_size_one_has_no_workers_and_leaders_default_to_the_worker_template() -> None:
    workload = leader_worker_set(size=1)
    del workload["spec"]["leaderWorkerTemplate"]["leaderTemplate"]
    expansion = expand(workload)
    assert names(expansion, "StatefulSet") == ["vllm"]
    assert names(expansion, "Pod") == ["vllm-0", "vllm-1"]
    assert labels_of(one(expansion, "Pod", "vllm-0"))["role"] == "worker"


def test_a_leader_pod_of_the_manifests_owns_its_workers() -> None:
    workload = leader_worker_set()
    expected_uid = stable_uid("v1", "Pod", "ml", "vllm-0")
    written = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "vllm-0", "namespace": "ml", "uid": "real"},
    }
    expansion = expand(workload, written)
    assert "vllm-0" not in names(expansion, "Pod")
    assert (
        one(expansion, "StatefulSet", "vllm-0")["metadata"]["ownerReferences"][0]["uid"]
        == "real"
        != expected_uid
    )


@pytest.mark.parametrize(
    ("fields", "field", "message"),
    [
        ({"size": 0}, "spec.leaderWorkerTemplate.size", "must be at least 1, got 0"),
        ({"size": None}, "spec.leaderWorkerTemplate.size", "a size is required"),
        ({"workerTemplate": None}, "spec.leaderWorkerTemplate.workerTemplate", "pod template is required"),
        (
            {"leaderTemplate": template() | {"spec": {}}},
            "spec.leaderWorkerTemplate.leaderTemplate.spec.containers",
            "at least one container",
        ),
    ],
)
def test_a_bad_lws_is_one_problem_and_others_still_expand(
    fields: dict[str, Any], field: str, message: str
) -> None:
    bad = leader_worker_set(**fields)
    bad["metadata"]["name"] = "bad"
    expansion = expand(bad, leader_worker_set())
    problem = only_problem(expansion)
    assert (problem.kind, problem.name, problem.field) == ("LeaderWorkerSet", "bad", field)
    assert message in problem.message
    assert names(expansion, "Pod") == PODS


def test_negative_group_count_is_a_problem() -> None:
    bad = leader_worker_set()
    bad["spec"]["replicas"] = -2
    problem = only_problem(expand(bad))
    assert (problem.field, problem.message) == ("spec.replicas", "must be at least 0, got -2")
