"""The scheduler's models of the cache: every object converted as manifests are, a pod the models
reject still counted on its node, each object parsed and validated once per resourceVersion
(issue 12)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from manifest_builders import node, pod, podgroup, queue

from kai_ray.api.config import SchedulerConfig
from kai_ray.cluster.kube.cache import CachedObject, CacheEntries
from kai_ray.cluster.kube.models import ModelCache
from kai_ray.convert import cluster_from_manifest_set
from kai_ray.engine.cycle import schedule
from kai_ray.model.snapshot import compile_snapshot

pytestmark = pytest.mark.unit

KINDS = ("Queue", "Node", "PodGroup", "Pod")


def cached(objects: list[dict[str, Any]], versions: dict[str, str] | None = None) -> CacheEntries:
    """The objects as the cache holds them, by kind and key; resourceVersion "1" unless given."""
    by_kind: dict[str, list[CachedObject]] = {}
    for obj in objects:
        meta = obj["metadata"]
        version = (versions or {}).get(meta["name"], "1")
        item = CachedObject(meta.get("namespace", ""), meta["name"], version, json.dumps(obj))
        by_kind.setdefault(obj["kind"], []).append(item)
    return CacheEntries(
        1, {kind: sorted(items, key=lambda i: (i.namespace, i.name)) for kind, items in by_kind.items()}
    )


def cluster() -> list[dict[str, Any]]:
    strange = pod("strange", gpus=8, tolerations=[{"key": "k", "value": 5}])  # the models reject it
    strange["spec"]["nodeName"] = "n1"
    strange["status"] = {"phase": "Running"}
    team = queue("team-a", gpu=16)
    unlimited = {"quota": -1, "limit": -1, "overQuotaWeight": 1}  # unset limits are 0 in KAI
    team["spec"]["resources"].update(cpu=dict(unlimited), memory=dict(unlimited))
    return [
        team,
        node("n1", gpus=8),
        node("n2", gpus=8),
        podgroup("p"),
        pod("p", gpus=8, group="p"),
        strange,
    ]


def test_a_pod_the_models_reject_is_reported_and_still_counted() -> None:
    loaded = ModelCache("cluster").load(cached(cluster()), KINDS)
    state, problems = cluster_from_manifest_set(loaded.loaded, now=0.0, occupants=loaded.occupants)
    assert [(p.kind, p.name) for p in problems] == [("Pod", "strange")]
    assert [(h.key, h.foreign, h.task.gpu, h.task.node) for h in state.held] == [
        ("team-a/strange", False, 8, "n1")
    ]
    assert [job.name for job in state.jobs] == ["p"] and [n.name for n in state.nodes] == ["n1", "n2"]
    plan = schedule(compile_snapshot(state), SchedulerConfig())
    assert [(b.task, b.node) for b in plan.binds] == [("p", "n2")]  # n1 is full with the rejected pod


def test_an_unchanged_version_is_the_same_model_and_a_new_one_is_rebuilt() -> None:
    models = ModelCache("cluster")
    first = {m.obj.metadata.name: m.obj for m in models.load(cached(cluster()), KINDS).loaded.manifests}
    changed = cluster()
    changed[1]["metadata"]["labels"] = {"zone": "a"}  # node n1, a new version
    again = {
        m.obj.metadata.name: m.obj
        for m in models.load(cached(changed, versions={"n1": "2"}), KINDS).loaded.manifests
    }
    assert again["n2"] is first["n2"] and again["p"] is first["p"]
    assert again["n1"] is not first["n1"] and again["n1"].metadata.labels == {"zone": "a"}


def test_objects_without_a_version_are_rebuilt_and_gone_ones_forgotten() -> None:
    models = ModelCache("cluster")
    unversioned = models.load(cached(cluster(), versions={"n2": ""}), KINDS).loaded.manifests
    again = models.load(cached(cluster(), versions={"n2": ""}), KINDS).loaded.manifests
    assert next(m.obj for m in again if m.obj.metadata.name == "n2") is not next(
        m.obj for m in unversioned if m.obj.metadata.name == "n2"
    )
    assert len(models) == 6
    models.load(cached(cluster()[:3]), KINDS)
    assert len(models) == 3


def test_a_pod_in_two_kinds_is_refused_the_second_time_as_the_loader_does() -> None:
    """Our pods and other schedulers' are followed apart; should one pod be in both (the API
    changed its scheduler), the second is refused as a duplicate, not counted twice."""
    ours = CachedObject("team-a", "p", "1", json.dumps(pod("p", gpus=1)))
    theirs = CachedObject("team-a", "p", "2", json.dumps(pod("p", gpus=1, schedulerName="other")))
    entries = CacheEntries(1, {"Pod": [ours], "ForeignPod": [theirs]})
    loaded = ModelCache("cluster").load(entries, ("Pod", "ForeignPod")).loaded
    assert len(loaded.manifests) == 1 and loaded.manifests[0].obj.spec.scheduler_name == "kai-scheduler"
    assert [p.message for p in loaded.problems] == ["defined twice; keeping the one from cluster"]


def test_by_kind_keeps_the_caches_kind_names_and_leaves_rejected_objects_out() -> None:
    objects = cluster()
    entries = cached(objects)
    foreign = CachedObject("other", "web", "3", json.dumps(pod("web", ns="other", gpus=1)))
    tables = ModelCache("cluster").by_kind(CacheEntries(1, {**entries.objects, "ForeignPod": [foreign]}))
    assert sorted(tables) == ["ForeignPod", "Node", "Pod", "PodGroup", "Queue"]
    assert sorted(tables["Pod"]) == [("team-a", "p")]  # "strange" is rejected: no model
    assert list(tables["ForeignPod"]) == [("other", "web")]
