"""The scheduler's models of the cache: every object converted as manifests are, a pod the models
reject still counted on its node, each object parsed and validated once per resourceVersion
(issue 12)."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from manifest_builders import node, pod, podgroup, queue

from kai_ray.api.config import SchedulerConfig
from kai_ray.cluster.kube.cache import CachedObject, CacheEntries, ClusterCache
from kai_ray.cluster.kube.models import ModelCache
from kai_ray.cluster.kube.snapshot import snapshot
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


@pytest.mark.parametrize("seed", range(8))
def test_after_any_stream_of_changes_the_kept_models_convert_as_fresh_ones(seed: int) -> None:
    """Random adds, updates (a new resourceVersion) and deletes of queues, nodes, PodGroups and
    pods, some the models reject, some without a version: after every batch, converting the
    models kept across batches gives the `ClusterState` and problems of models built afresh."""
    rng = random.Random(seed)
    store: dict[tuple[str, str], dict[str, Any]] = {}
    versions: dict[str, str] = {}
    revision = 0

    def put(obj: dict[str, Any]) -> None:
        nonlocal revision
        revision += 1
        name = obj["metadata"]["name"]
        store[(obj["kind"], name)] = obj
        versions[name] = "" if rng.random() < 0.1 else str(revision)

    def random_object() -> dict[str, Any]:
        choice = rng.randrange(4)
        if choice == 0:
            return queue(f"q{rng.randrange(2)}", gpu=rng.choice([8, 16]))
        if choice == 1:
            return node(f"n{rng.randrange(4)}", gpus=rng.choice([4, 8]))
        group = f"g{rng.randrange(4)}"
        if choice == 2:
            return podgroup(group, queue=f"q{rng.randrange(2)}")
        extra: dict[str, Any] = {"tolerations": [{"key": "k", "value": 5}]} if rng.random() < 0.15 else {}
        body = pod(f"{group}-{rng.randrange(3)}", gpus=rng.choice([1, 2, 4]), group=group, **extra)
        if rng.random() < 0.5:
            body["spec"]["nodeName"] = f"n{rng.randrange(4)}"
            body["status"] = {"phase": rng.choice(["Running", "Pending", "Succeeded"])}
        return body

    kept = ModelCache("cluster")
    for _ in range(25):
        for _ in range(rng.randrange(1, 6)):
            if store and rng.random() < 0.25:
                del store[rng.choice(sorted(store))]
            else:
                put(random_object())
        entries = cached(list(store.values()), versions)
        incremental = kept.load(entries, KINDS)
        fresh = ModelCache("cluster").load(entries, KINDS)
        assert cluster_from_manifest_set(
            incremental.loaded, now=0.0, occupants=incremental.occupants
        ) == cluster_from_manifest_set(fresh.loaded, now=0.0, occupants=fresh.occupants)
        assert len(kept) == len(store)


def test_the_snapshot_keeps_the_readers_models_from_its_first_read() -> None:
    """The scheduler hands `snapshot` its models, empty at first: they must fill then and serve
    the next read (an empty model cache is still the caller's, not a reason for a fresh one)."""
    cache = ClusterCache(None)
    for obj in cluster():
        cache.apply_event(
            "ADDED", obj["kind"], {**obj, "metadata": {**obj["metadata"], "resourceVersion": "7"}}
        )
    models = ModelCache("cluster")
    first, _ = snapshot(cache, now=0.0, models=models)
    assert len(models) == len(cluster())
    again, _ = snapshot(cache, now=0.0, models=models)
    assert again == first


def test_watch_events_applied_in_process_change_the_cache_as_a_watch_does() -> None:
    cache = ClusterCache(None)
    body = {**node("n1"), "metadata": {"name": "n1", "resourceVersion": "5"}}
    assert cache.apply_event("ADDED", "Node", dict(body))
    assert not cache.apply_event("MODIFIED", "Node", dict(body))  # same version: nothing new
    foreign = pod("web", gpus=1, schedulerName="other")  # not ours, and on no node: not followed
    assert not cache.apply_event("ADDED", "Pod", foreign) and not cache.apply_event(
        "ADDED", "ForeignPod", foreign
    )
    assert cache.apply_event("DELETED", "Node", {**body, "metadata": {"name": "n1", "resourceVersion": "6"}})
    assert cache.sizes()["Node"] == 0
    with pytest.raises(ValueError, match="unknown watch event type 'BOOKMARK'"):
        cache.apply_event("BOOKMARK", "Node", dict(body))
