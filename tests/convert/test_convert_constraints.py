"""Every constraint a pod carries reaches its `TaskSpec` as the API server states it (issue 34):
preferred node affinity, inter-pod (anti-)affinity with namespaces resolved and label keys
folded, topology spread constraints, host ports and extended resources; and a node's extended
allocatable reaches its `NodeSpec`."""

from __future__ import annotations

from typing import Any

import pytest
from manifest_builders import base, convert, node, pod, queue

from kai_ray.model.objects import (
    AffinityRequirement,
    HostPort,
    LabelRequirement,
    LabelSelector,
    NodeSelectorTerm,
    PodAffinitySpec,
    PodAffinityTerm,
    PreferredNodeTerm,
    SpreadConstraint,
    TaskSpec,
)

pytestmark = pytest.mark.unit

ZONE = "topology.kubernetes.io/zone"
HOST = "kubernetes.io/hostname"
APP_DB = {"matchLabels": {"app": "db"}}
DB = LabelSelector(match_labels=(("app", "db"),))


def task_of(*objects: dict[str, Any], name: str = "p") -> TaskSpec:
    """The task of pod `name` after converting the objects on one node and a team-a queue."""
    state, problems = base(*objects)
    assert problems == []
    (task,) = [task for job in state.jobs for task in job.tasks if task.name == name]
    return task


def namespace(name: str, **labels: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


def term(**fields: Any) -> dict[str, Any]:
    return {"labelSelector": APP_DB, "topologyKey": ZONE, **fields}


def with_pod_affinity(
    required: list[dict[str, Any]] | None = None,
    anti: list[dict[str, Any]] | None = None,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    affinity: dict[str, Any] = {}
    if required is not None:
        affinity["podAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": required}
    if anti is not None:
        affinity["podAntiAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": anti}
    queue_label = {"kai.scheduler/queue": "team-a"}
    return pod("p", labels=queue_label | (labels or {}), affinity=affinity)


def test_a_pod_without_pod_affinity_has_none() -> None:
    assert task_of(pod("p")).pod_affinity is None
    assert task_of(pod("p", affinity={"podAffinity": {}, "podAntiAffinity": {}})).pod_affinity is None


def test_required_and_preferred_terms_of_both_kinds() -> None:
    affinity = {
        "podAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [term()],
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 30, "podAffinityTerm": term(topologyKey=HOST)}
            ],
        },
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [term(topologyKey=HOST)],
            "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "podAffinityTerm": term()}],
        },
    }
    own = frozenset({"team-a"})
    assert task_of(pod("p", affinity=affinity)).pod_affinity == PodAffinitySpec(
        required=(PodAffinityTerm(ZONE, DB, own),),
        required_anti=(PodAffinityTerm(HOST, DB, own),),
        preferred=(PodAffinityTerm(HOST, DB, own, weight=30),),
        preferred_anti=(PodAffinityTerm(ZONE, DB, own, weight=100),),
    )


def test_a_term_without_label_selector_selects_no_pod() -> None:
    spec = task_of(with_pod_affinity(anti=[{"topologyKey": HOST}])).pod_affinity
    assert spec is not None and spec.required_anti[0].selector is None


def test_match_expressions_are_kept_in_order() -> None:
    selector = {
        "matchExpressions": [
            {"key": "app", "operator": "In", "values": ["db", "cache"]},
            {"key": "tier", "operator": "DoesNotExist"},
        ]
    }
    spec = task_of(with_pod_affinity(anti=[{"labelSelector": selector, "topologyKey": HOST}])).pod_affinity
    assert spec is not None
    assert spec.required_anti[0].selector == LabelSelector(
        expressions=(LabelRequirement("app", "In", ("db", "cache")), LabelRequirement("tier", "DoesNotExist"))
    )


@pytest.mark.parametrize(
    ("fields", "namespaces"),
    [
        ({}, {"team-a"}),
        ({"namespaces": ["team-b", "team-c"]}, {"team-b", "team-c"}),
        ({"namespaceSelector": {}}, None),
        ({"namespaces": ["team-c"], "namespaceSelector": {}}, None),
        ({"namespaceSelector": {"matchLabels": {"tier": "gold"}}}, {"team-b", "gold-2"}),
        (
            {"namespaces": ["team-c"], "namespaceSelector": {"matchLabels": {"tier": "gold"}}},
            {"team-b", "gold-2", "team-c"},
        ),
        ({"namespaceSelector": {"matchLabels": {"tier": "none"}}}, set()),
        (
            {
                "namespaceSelector": {
                    "matchExpressions": [
                        {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["team-a"]}
                    ]
                }
            },
            {"team-a"},
        ),
        (
            {"namespaceSelector": {"matchExpressions": [{"key": "tier", "operator": "DoesNotExist"}]}},
            {"team-a", "team-c"},
        ),
    ],
)
def test_a_terms_namespaces_are_its_list_and_those_its_selector_picks(
    fields: dict[str, Any], namespaces: set[str] | None
) -> None:
    """team-b and gold-2 are Namespace objects labelled gold, team-c one without labels; team-a has
    no object (only a pod): it carries only its name label, as every namespace on a cluster does."""
    spec = task_of(
        namespace("team-b", tier="gold"),
        namespace("gold-2", tier="gold"),
        namespace("team-c"),
        with_pod_affinity(required=[term(**fields)]),
    ).pod_affinity
    assert spec is not None
    assert spec.required[0].namespaces == (None if namespaces is None else frozenset(namespaces))


def test_match_label_keys_fold_into_the_selector_for_the_keys_the_pod_has() -> None:
    labels = {"rev": "r7", "tenant": "blue"}
    folded = term(matchLabelKeys=["rev", "absent"], mismatchLabelKeys=["tenant"])
    spec = task_of(with_pod_affinity(required=[folded], labels=labels)).pod_affinity
    assert spec is not None
    assert spec.required[0].selector == LabelSelector(
        match_labels=(("app", "db"),),
        expressions=(LabelRequirement("rev", "In", ("r7",)), LabelRequirement("tenant", "NotIn", ("blue",))),
    )


def test_a_selector_the_api_server_already_folded_is_not_folded_twice() -> None:
    """A `kubectl get -o yaml` dump carries both the keys and the expressions they became."""
    dumped = {
        "labelSelector": {
            "matchLabels": {"app": "db"},
            "matchExpressions": [{"key": "rev", "operator": "In", "values": ["r7"]}],
        },
        "topologyKey": ZONE,
        "matchLabelKeys": ["rev"],
    }
    spec = task_of(with_pod_affinity(required=[dumped], labels={"rev": "r7"})).pod_affinity
    assert spec is not None
    assert spec.required[0].selector == LabelSelector(
        match_labels=(("app", "db"),), expressions=(LabelRequirement("rev", "In", ("r7",)),)
    )


def test_preferred_node_affinity_keeps_weight_and_term() -> None:
    preference = {"matchExpressions": [{"key": "gpu", "operator": "In", "values": ["h100"]}]}
    affinity = {
        "nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 20, "preference": preference}]
        }
    }
    assert task_of(pod("p", affinity=affinity)).preferred_node_affinity == (
        PreferredNodeTerm(20, NodeSelectorTerm(expressions=(AffinityRequirement("gpu", "In", ("h100",)),))),
    )


def test_spread_constraints_with_their_defaults_and_policies() -> None:
    constraints = [
        {"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule", "labelSelector": APP_DB},
        {
            "maxSkew": 2,
            "topologyKey": HOST,
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": APP_DB,
            "nodeAffinityPolicy": "Ignore",
            "nodeTaintsPolicy": "Honor",
            "matchLabelKeys": ["rev"],
        },
        {"maxSkew": 1, "topologyKey": HOST, "whenUnsatisfiable": "DoNotSchedule", "minDomains": 3},
    ]
    labels = {"kai.scheduler/queue": "team-a", "rev": "r1"}
    assert task_of(pod("p", labels=labels, topologySpreadConstraints=constraints)).spread == (
        SpreadConstraint(1, ZONE, DB),
        SpreadConstraint(
            2,
            HOST,
            LabelSelector(
                match_labels=(("app", "db"),), expressions=(LabelRequirement("rev", "In", ("r1",)),)
            ),
            hard=False,
            honor_node_affinity=False,
            honor_node_taints=True,
        ),
        SpreadConstraint(1, HOST, None, min_domains=3),
    )


def test_host_ports_of_every_container_only_where_bound_on_the_node() -> None:
    main = {
        "name": "main",
        "ports": [
            {"containerPort": 80, "hostPort": 8080},
            {"containerPort": 53, "hostPort": 53, "protocol": "UDP", "hostIP": "0.0.0.0"},
            {"containerPort": 9000},
            {"containerPort": 443, "hostPort": 443, "hostIP": "10.0.0.1"},
        ],
    }
    init = {"name": "init", "ports": [{"containerPort": 80, "hostPort": 8081, "protocol": "SCTP"}]}
    assert task_of(pod("p", containers=[main], initContainers=[init])).host_ports == (
        HostPort(53, "UDP"),
        HostPort(443, "TCP", "10.0.0.1"),
        HostPort(8080, "TCP"),
        HostPort(8081, "SCTP"),
    )


def test_extended_requests_are_every_resource_outside_the_node_vector() -> None:
    resources = {
        "requests": {
            "cpu": "1",
            "memory": "1Gi",
            "rdma/hca": "1",
            "hugepages-2Mi": "1Gi",
            "example.com/zero": "0",
        },
        "limits": {"nvidia.com/gpu": "1", "ephemeral-storage": "2Gi", "nvidia.com/mig-1g.10gb": "2"},
    }
    task = task_of(pod("p", containers=[{"name": "main", "resources": resources}]))
    assert task.extended == (
        ("ephemeral-storage", 2 * 2.0**30),
        ("hugepages-2Mi", 2.0**30),
        ("nvidia.com/mig-1g.10gb", 2.0),
        ("rdma/hca", 1.0),
    )
    assert (task.cpu_millis, task.gpu) == (1000, 1)


def test_a_node_lists_every_allocatable_resource_outside_the_node_vector() -> None:
    allocatable = {
        "cpu": "8",
        "memory": "64Gi",
        "nvidia.com/gpu": "0",
        "pods": "110",
        "rdma/hca": "4",
        "hugepages-2Mi": "1Gi",
        "nvidia.com/mig-1g.10gb": "0",
    }
    body = node("n1", gpus=0)
    body["status"] = {"allocatable": allocatable, "capacity": {**allocatable, "ephemeral-storage": "100Gi"}}
    state, problems = convert(queue("team-a"), body)
    assert problems == []
    assert state.nodes[0].extended == {
        "ephemeral-storage": 100 * 2.0**30,
        "hugepages-2Mi": 2.0**30,
        "nvidia.com/mig-1g.10gb": 0.0,
        "rdma/hca": 4.0,
    }


def test_on_the_hosts_network_every_container_port_is_a_host_port() -> None:
    main = {"name": "main", "ports": [{"containerPort": 9090}, {"containerPort": 80, "hostPort": 8080}]}
    assert task_of(pod("p", hostNetwork=True, containers=[main])).host_ports == (
        HostPort(8080, "TCP"),
        HostPort(9090, "TCP"),
    )
