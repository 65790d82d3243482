"""A live cluster resolves `namespaceSelector`s as manifests do, and again when what they read
changes: a Namespace's labels, or a namespace gaining its first pod or losing its last."""

from __future__ import annotations

from typing import Any

import pytest
from manifest_builders import node, pod, podgroup, queue

from kai_ray.api import ApiObject, Manifest, ManifestSet
from kai_ray.api.manifests import validate_object
from kai_ray.cluster.kube.cache import ClusterCache
from kai_ray.cluster.kube.snapshot import CacheReader
from kai_ray.convert import cluster_from_manifest_set
from kai_ray.convert.live import LiveCluster, ObjectModel
from kai_ray.model.objects import ClusterState

pytestmark = pytest.mark.unit

NAME_LABEL = "kubernetes.io/metadata.name"


def namespace(name: str, **labels: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


def selecting(name: str, selector: dict[str, Any]) -> dict[str, Any]:
    """A pod of PodGroup `pg` repelling app=db pods of the namespaces `selector` picks."""
    term = {
        "labelSelector": {"matchLabels": {"app": "db"}},
        "topologyKey": "zone",
        "namespaceSelector": selector,
    }
    return pod(
        name,
        group="pg",
        affinity={"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}},
    )


def base_objects() -> list[dict[str, Any]]:
    return [queue("team-a", gpu=8), node("n1"), podgroup("pg")]


def key(obj: dict[str, Any]) -> tuple[str, tuple[str, str]]:
    meta = obj["metadata"]
    return obj["kind"], (meta.get("namespace", ""), meta["name"])


def model(obj: dict[str, Any]) -> ObjectModel:
    validated, problems = validate_object(obj, "cluster")
    assert problems == []
    return ObjectModel(validated)


def selected(state: ClusterState, pod_name: str = "p") -> frozenset[str] | None:
    (task,) = [task for job in state.jobs for task in job.tasks if task.name == pod_name]
    assert task.pod_affinity is not None
    return task.pod_affinity.required_anti[0].namespaces


class Live:
    """A LiveCluster fed objects one change at a time, checked against the manifest conversion of
    the same objects after every change."""

    def __init__(self, *objects: dict[str, Any]) -> None:
        self.live = LiveCluster("cluster")
        self.objects: dict[tuple[str, tuple[str, str]], dict[str, Any]] = {}
        for obj in objects:
            self.put(obj)

    def put(self, obj: dict[str, Any]) -> None:
        kind, name = key(obj)
        self.objects[(kind, name)] = obj
        self.live.apply({kind: {name: model(obj)}})

    def delete(self, obj: dict[str, Any]) -> None:
        kind, name = key(obj)
        del self.objects[(kind, name)]
        self.live.apply({kind: {name: None}})

    def state(self) -> ClusterState:
        state, problems = self.live.state(0.0)
        assert problems == []
        manifests: list[Manifest[ApiObject]] = []
        for obj in self.objects.values():
            validated = model(obj).obj
            assert validated is not None
            manifests.append(Manifest("cluster", 0, 0, validated))
        reference, _ = cluster_from_manifest_set(ManifestSet(manifests=manifests), now=0.0)
        assert state.jobs == reference.jobs
        return state


def test_relabelling_a_namespace_changes_the_terms_that_select_it() -> None:
    cluster = Live(*base_objects(), namespace("team-b", tier="gold"), namespace("team-c"))
    cluster.put(selecting("p", {"matchLabels": {"tier": "gold"}}))
    assert selected(cluster.state()) == {"team-b"}
    cluster.put(namespace("team-c", tier="gold"))
    assert selected(cluster.state()) == {"team-b", "team-c"}
    cluster.delete(namespace("team-b", tier="gold"))
    assert selected(cluster.state()) == {"team-c"}


def test_a_namespace_without_an_object_is_selectable_while_it_holds_a_pod() -> None:
    """Pods' namespaces exist on a cluster even when no Namespace object was given; they carry
    their name label only."""
    cluster = Live(*base_objects())
    cluster.put(
        selecting("p", {"matchExpressions": [{"key": NAME_LABEL, "operator": "In", "values": ["web"]}]})
    )
    assert selected(cluster.state()) == frozenset()
    web = pod("w", ns="web", labels={"app": "db"}, schedulerName="default-scheduler", nodeName="n1")
    cluster.put(web)
    assert selected(cluster.state()) == {"web"}
    cluster.delete(web)
    assert selected(cluster.state()) == frozenset()


def test_the_cache_follows_namespaces_into_the_state() -> None:
    cache = ClusterCache(None)
    for number, obj in enumerate(
        [
            *base_objects(),
            namespace("team-b", tier="gold"),
            selecting("p", {"matchLabels": {"tier": "gold"}}),
        ],
        start=1,
    ):
        obj["metadata"]["resourceVersion"] = str(number)
        cache.apply_event("ADDED", obj["kind"], obj)
    reader = CacheReader("kai-scheduler")
    state, problems = reader.read(cache, now=0.0)
    assert problems == [] and selected(state) == {"team-b"}
    relabelled = namespace("team-b", tier="silver")
    relabelled["metadata"]["resourceVersion"] = "100"
    cache.apply_event("MODIFIED", "Namespace", relabelled)
    state, _ = reader.read(cache, now=0.0)
    assert selected(state) == frozenset()
