"""A pod's volumes and ConfigMaps become where it may run and what it waits for (issue 34, items
6, 7 and 10): kube-scheduler's VolumeBinding and KAI's ConfigMap predicate, read from the claims,
volumes, classes and ConfigMaps present."""

from __future__ import annotations

from typing import Any

import pytest
from manifest_builders import convert, node, pod, queue
from storage_builders import (
    claim,
    claim_volume,
    config_map,
    config_map_volume,
    local_volume,
    storage_class,
)

from kai_ray.model.objects import (
    AffinityRequirement,
    Blocker,
    BlockerCause,
    ClusterState,
    NodeSelectorTerm,
    TaskSpec,
)

pytestmark = pytest.mark.unit

HOST = "kubernetes.io/hostname"


def task(state: ClusterState, name: str) -> TaskSpec:
    found = [t for job in state.jobs for t in job.tasks if t.name == name]
    assert len(found) == 1, [t.name for job in state.jobs for t in job.tasks]
    return found[0]


def with_claims(name: str, *claims: str, **spec: Any) -> dict[str, Any]:
    volumes = [claim_volume(f"v{i}", c) for i, c in enumerate(claims)]
    return pod(name, gpus=1, volumes=volumes, **spec)


def cluster(*objects: dict[str, Any]) -> tuple[ClusterState, list[str]]:
    return convert(queue("team-a", gpu=8), node("n1"), node("n2"), *objects)


def on_host(name: str) -> tuple[NodeSelectorTerm, ...]:
    return (NodeSelectorTerm(expressions=(AffinityRequirement(HOST, "In", (name,)),)),)


def test_a_bound_claim_restricts_the_pod_to_its_volumes_node_affinity() -> None:
    state, problems = cluster(
        claim("data", storage_class="local", volume="pv-1"),
        local_volume("pv-1", "n2", claim_ref=("team-a", "data")),
        with_claims("p", "data"),
    )
    assert problems == []
    placed = task(state, "p")
    assert placed.volume_node_affinity == (on_host("n2"),)
    assert placed.blockers == () and placed.delayed_claims == ()


def test_a_volume_without_node_affinity_restricts_nothing_and_each_bound_volume_adds_its_own() -> None:
    state, _ = cluster(
        claim("shared", volume="pv-net"),
        claim("local", volume="pv-1"),
        local_volume("pv-net", None),
        local_volume("pv-1", "n1"),
        with_claims("p", "shared", "local", "shared"),
    )
    assert task(state, "p").volume_node_affinity == (on_host("n1"),)


def test_a_claim_bound_to_a_volume_that_does_not_exist_waits_for_it() -> None:
    state, problems = cluster(claim("data", volume="gone"), with_claims("p", "data"))
    assert problems == []
    assert task(state, "p").blockers == (
        Blocker(
            BlockerCause.VOLUME_MISSING,
            "persistentvolume gone not found (persistentvolumeclaim team-a/data is bound to it)",
        ),
    )


def test_a_missing_or_deleted_claim_keeps_the_pod_waiting_with_its_name() -> None:
    deleting = claim("old", volume="pv-1")
    deleting["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    deleting["metadata"]["finalizers"] = ["kubernetes.io/pvc-protection"]
    state, problems = cluster(deleting, local_volume("pv-1", "n1"), with_claims("p", "data", "old"))
    assert problems == []
    assert task(state, "p").blockers == (
        Blocker(BlockerCause.CLAIM_MISSING, "persistentvolumeclaim team-a/data not found"),
        Blocker(BlockerCause.CLAIM_MISSING, "persistentvolumeclaim team-a/old is being deleted"),
    )


def test_an_unbound_claim_of_an_immediate_class_waits_for_the_volume_controller() -> None:
    state, _ = cluster(storage_class("fast"), claim("data", storage_class="fast"), with_claims("p", "data"))
    assert task(state, "p").blockers == (
        Blocker(
            BlockerCause.CLAIM_UNBOUND,
            "persistentvolumeclaim team-a/data is not bound yet (waiting for its volume)",
        ),
    )
    assert task(state, "p").delayed_claims == ()


def test_an_unbound_wait_for_first_consumer_claim_is_delayed_and_held_to_the_allowed_topologies() -> None:
    zones = [{"zone": ["a", "b"], "rack": ["r1"]}, {"zone": ["c"]}]
    state, problems = cluster(
        storage_class("zonal", "WaitForFirstConsumer", topologies=zones),
        claim("data", storage_class="zonal"),
        with_claims("p", "data"),
    )
    assert problems == []
    placed = task(state, "p")
    assert placed.blockers == ()
    assert placed.delayed_claims == ("data",)
    assert placed.volume_node_affinity == (
        (
            NodeSelectorTerm(
                expressions=(
                    AffinityRequirement("zone", "In", ("a", "b")),
                    AffinityRequirement("rack", "In", ("r1",)),
                )
            ),
            NodeSelectorTerm(expressions=(AffinityRequirement("zone", "In", ("c",)),)),
        ),
    )


def test_a_delayed_claim_without_allowed_topologies_restricts_nothing() -> None:
    state, _ = cluster(
        storage_class("local", "WaitForFirstConsumer"),
        claim("data", storage_class="local"),
        with_claims("p", "data"),
    )
    placed = task(state, "p")
    assert placed.volume_node_affinity == () and placed.blockers == () and placed.delayed_claims == ("data",)


def test_a_delayed_claim_with_a_selected_node_holds_the_pod_to_that_node() -> None:
    state, _ = cluster(
        storage_class("zonal", "WaitForFirstConsumer", topologies=[{"zone": ["a"]}]),
        claim("data", storage_class="zonal", annotations={"volume.kubernetes.io/selected-node": "n2"}),
        with_claims("p", "data"),
    )
    placed = task(state, "p")
    assert placed.volume_node_affinity == (
        (NodeSelectorTerm(fields=(AffinityRequirement("metadata.name", "In", ("n2",)),)),),
    )
    assert placed.delayed_claims == ("data",)


def test_a_claim_naming_no_class_takes_the_default_one_and_without_a_default_waits_for_its_volume() -> None:
    delayed = storage_class("local", "WaitForFirstConsumer", default=True)
    state, _ = cluster(
        delayed,
        claim("implicit"),
        claim("none", storage_class=""),
        with_claims("a", "implicit"),
        with_claims("b", "none"),
    )
    assert task(state, "a").delayed_claims == ("implicit",) and task(state, "a").blockers == ()
    # An explicit "" asks for no class at all: only the volume controller can bind it.
    assert [b.cause for b in task(state, "b").blockers] == [BlockerCause.CLAIM_UNBOUND]
    state, _ = cluster(claim("implicit"), with_claims("a", "implicit"))
    assert [b.cause for b in task(state, "a").blockers] == [BlockerCause.CLAIM_UNBOUND]


def test_of_several_default_classes_the_newest_is_the_default() -> None:
    state, _ = cluster(
        storage_class("old", default=True, created="2025-01-01T00:00:00Z"),
        storage_class("new", "WaitForFirstConsumer", default=True, created="2026-01-01T00:00:00Z"),
        claim("data"),
        with_claims("p", "data"),
    )
    assert task(state, "p").delayed_claims == ("data",)


def test_a_claim_naming_a_storage_class_that_does_not_exist_reports_the_pod_and_others_schedule() -> None:
    state, problems = cluster(
        claim("data", storage_class="fast"),
        claim("bound", storage_class="gone-too", volume="pv-1"),
        local_volume("pv-1", "n1"),
        with_claims("p", "data"),
        with_claims("q", "bound"),
        pod("r", gpus=1),
    )
    assert problems == [
        "test.yaml: Pod/team-a/p: spec.volumes[0].persistentVolumeClaim: persistentvolumeclaim team-a/data"
        " names storageClassName 'fast', which does not exist"
    ]
    # A bound claim no longer needs its class; the pods without a problem are converted as usual,
    # and p waits in its job with a blocker naming the field (its PodGroup's condition says it).
    assert sorted(t.name for job in state.jobs for t in job.tasks) == ["p", "q", "r"]
    assert [(b.cause, b.message) for b in task(state, "p").blockers] == [
        (
            BlockerCause.INVALID_CONSTRAINT,
            "spec.volumes[0].persistentVolumeClaim: persistentvolumeclaim team-a/data"
            " names storageClassName 'fast', which does not exist",
        )
    ]
    assert not task(state, "q").blockers


def test_an_ephemeral_volume_stands_for_the_claim_its_controller_makes() -> None:
    ephemeral = {
        "name": "scratch",
        "ephemeral": {"volumeClaimTemplate": {"spec": {"storageClassName": "local"}}},
    }
    state, _ = cluster(pod("p", gpus=1, volumes=[ephemeral]))
    assert task(state, "p").blockers == (
        Blocker(BlockerCause.CLAIM_MISSING, "persistentvolumeclaim team-a/p-scratch not found"),
    )
    state, _ = cluster(
        claim("p-scratch", volume="pv-1"), local_volume("pv-1", "n1"), pod("p", gpus=1, volumes=[ephemeral])
    )
    assert task(state, "p").volume_node_affinity == (on_host("n1"),)


def test_a_missing_required_config_map_keeps_the_pod_waiting_wherever_the_pod_names_it() -> None:
    init = {
        "name": "init",
        "envFrom": [
            {"configMapRef": {"name": "from-init"}},
            {"configMapRef": {"name": "maybe", "optional": True}},
        ],
    }
    main = {
        "name": "main",
        "env": [
            {"name": "A", "valueFrom": {"configMapKeyRef": {"name": "from-env", "key": "a"}}},
            {"name": "B", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {
                "name": "C",
                "valueFrom": {"configMapKeyRef": {"name": "maybe-too", "key": "c", "optional": True}},
            },
        ],
        "envFrom": [{"configMapRef": {"name": "present"}}],
    }
    projected = {
        "name": "p",
        "projected": {"sources": [{"configMap": {"name": "projected"}}, {"secret": {"name": "s"}}]},
    }
    volumes = [
        config_map_volume("a", "from-volume"),
        config_map_volume("b", "optional", optional=True),
        projected,
        config_map_volume("c", "from-volume"),
    ]
    state, problems = cluster(
        config_map("present"),
        config_map("from-env", ns="elsewhere"),
        pod("p", gpus=1, volumes=volumes, initContainers=[init], containers=[main]),
    )
    assert problems == []
    assert task(state, "p").blockers == tuple(
        Blocker(BlockerCause.CONFIG_MAP_MISSING, f"configmap team-a/{name} not found")
        for name in ("from-volume", "projected", "from-init", "from-env")
    )
    present = [config_map(name) for name in ("from-volume", "projected", "from-init", "from-env", "present")]
    state, _ = cluster(*present, pod("p", gpus=1, volumes=volumes, initContainers=[init], containers=[main]))
    assert task(state, "p").blockers == ()


def test_a_pod_held_on_its_node_is_counted_whatever_its_volumes_name() -> None:
    volumes = [claim_volume("v", "missing"), config_map_volume("c", "missing")]
    foreign = pod("web", ns="other", gpus=8, labels={}, schedulerName="default-scheduler", nodeName="n1")
    foreign["spec"]["volumes"] = volumes
    foreign["status"] = {"phase": "Running"}
    state, problems = cluster(foreign, pod("ours", ns="other", gpus=1, volumes=volumes))
    assert problems == []
    assert [(h.key, h.task.node, h.task.blockers, h.task.gpu) for h in state.held] == [
        ("other/web", "n1", (), 8)
    ]
    assert [b.cause for b in task(state, "ours").blockers] == [
        BlockerCause.CLAIM_MISSING,
        BlockerCause.CONFIG_MAP_MISSING,
    ]
