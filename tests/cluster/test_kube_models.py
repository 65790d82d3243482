"""The scheduler's models of the cache: every object converted as manifests are, a pod the models
reject still counted on its node, each object parsed and validated once per resourceVersion
(issue 12)."""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime
from typing import Any

import pytest
from manifest_builders import node, pod, podgroup, queue, topology
from storage_builders import claim, claim_volume, config_map, config_map_volume, local_volume, storage_class

from kai_ray.api import Manifest, Pod
from kai_ray.api.config import SchedulerConfig
from kai_ray.api.manifests import ManifestCollector, validate_object
from kai_ray.cluster.kube.cache import CachedObject, CacheEntries, ClusterCache
from kai_ray.cluster.kube.models import ModelCache
from kai_ray.cluster.kube.planner import CyclePlanner
from kai_ray.cluster.kube.snapshot import CacheReader, snapshot
from kai_ray.convert import cluster_from_manifest_set, occupancy_only
from kai_ray.convert.live import KIND_ORDER, LiveCluster, ObjectModel
from kai_ray.engine.cycle import schedule
from kai_ray.model.objects import ClusterState, TaskStatus
from kai_ray.model.snapshot import Snapshot, SnapshotCompiler, compile_snapshot

pytestmark = pytest.mark.unit


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


def versioned(obj: dict[str, Any], version: str) -> dict[str, Any]:
    return {**obj, "metadata": {**obj["metadata"], "resourceVersion": version}}


def filled(objects: list[dict[str, Any]]) -> ClusterCache:
    """A cache (never started: no API server) that received these objects as watch events."""
    cache = ClusterCache(None)
    for number, obj in enumerate(objects, start=1):
        cache.apply_event("ADDED", obj["kind"], versioned(obj, str(number)))
    return cache


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
    state, problems = snapshot(filled(cluster()), now=0.0)
    assert [(p.kind, p.name) for p in problems] == [("Pod", "strange")]
    assert [(h.key, h.foreign, h.task.gpu, h.task.node) for h in state.held] == [
        ("team-a/strange", False, 8, "n1")
    ]
    assert [job.name for job in state.jobs] == ["p"] and [n.name for n in state.nodes] == ["n1", "n2"]
    plan = schedule(compile_snapshot(state), SchedulerConfig())
    assert [(b.task, b.node) for b in plan.binds] == [("p", "n2")]  # n1 is full with the rejected pod


def test_a_rejected_pod_being_deleted_turns_stuck_in_releasing_as_the_clock_moves() -> None:
    """What a rejected pod occupies is read again every cycle while it is being deleted, as a
    read pod's is: its status follows the clock."""
    strange = pod("strange", gpus=8, tolerations=[{"key": "k", "value": 5}], nodeName="n1")
    strange["status"] = {"phase": "Running"}
    strange["metadata"]["deletionTimestamp"] = rfc3339(0.0)
    reader = CacheReader("kai-scheduler")
    cache = filled([node("n1"), strange])
    first, _ = reader.read(cache, now=60.0)
    later, _ = reader.read(cache, now=200.0)
    assert [h.task.status for h in first.held] == [TaskStatus.RELEASING]
    assert [h.task.status for h in later.held] == [TaskStatus.STUCK_IN_RELEASING]


def test_a_change_converts_again_only_what_it_can_affect() -> None:
    """A node's new labels: the nodes are converted again, the jobs (their pods' nodes did not
    come or go) are the very same objects; a pod's new version rebuilds its job."""
    cache = filled(cluster())
    reader = CacheReader("kai-scheduler")
    first, _ = reader.read(cache, now=0.0)
    relabelled = node("n1", gpus=8, labels={"zone": "a"})
    cache.apply_event("MODIFIED", "Node", versioned(relabelled, "100"))
    second, _ = reader.read(cache, now=0.0)
    assert second.jobs[0] is first.jobs[0]
    assert second.nodes[0].labels == {"zone": "a"} and second.nodes[1] == first.nodes[1]
    moved = pod("p", gpus=8, group="p", nodeName="n2")
    cache.apply_event("MODIFIED", "Pod", versioned(moved, "101"))
    third, _ = reader.read(cache, now=0.0)
    assert third.jobs[0] is not second.jobs[0] and third.jobs[0].tasks[0].node == "n2"


def test_a_pod_in_two_kinds_is_refused_the_second_time_as_the_loader_does() -> None:
    """Our pods and other schedulers' are followed apart; should one pod be in both (the API
    changed its scheduler), the second is refused as a duplicate, not counted twice."""
    ours = ObjectModel(Pod.model_validate(pod("p", gpus=1, nodeName="n1")))
    theirs = ObjectModel(Pod.model_validate(pod("p", gpus=1, schedulerName="other", nodeName="n1")))
    live = LiveCluster("cluster")
    live.apply({"Pod": {("team-a", "p"): ours}, "ForeignPod": {("team-a", "p"): theirs}})
    state, problems = live.state(0.0)
    assert [p.message for p in problems] == ["defined twice; keeping the one from cluster"]
    assert state.held == []  # ours names no PodGroup yet, and its node does not exist
    live.apply({"Pod": {("team-a", "p"): None}})
    _, problems = live.state(0.0)
    assert problems == []  # ours is gone: theirs is no longer a duplicate


def test_by_kind_keeps_the_caches_kind_names_and_leaves_rejected_objects_out() -> None:
    objects = cluster()
    entries = cached(objects)
    foreign = CachedObject("other", "web", "3", json.dumps(pod("web", ns="other", gpus=1)))
    tables = ModelCache("cluster").by_kind(CacheEntries(1, {**entries.objects, "ForeignPod": [foreign]}))
    assert sorted(tables) == ["ForeignPod", "Node", "Pod", "PodGroup", "Queue"]
    assert sorted(tables["Pod"]) == [("team-a", "p")]  # "strange" is rejected: no model
    assert list(tables["ForeignPod"]) == [("other", "web")]


def reference(cache: ClusterCache, now: float) -> tuple[ClusterState, list[Any]]:
    """The cache converted the way manifests are: every object validated afresh, in the cache's
    order, through `cluster_from_manifest_set`."""
    collector = ManifestCollector()
    occupants: list[Manifest[Pod]] = []
    entries = cache.entries(KIND_ORDER)
    for kind in KIND_ORDER:
        for item in entries.objects[kind]:
            data = json.loads(item.text)
            obj, problems = validate_object(data, "cluster")
            collector.result.problems.extend(problems)
            if obj is not None:
                collector.add(obj, "cluster")
                continue
            reduced, _ = validate_object(occupancy_only(data), "cluster")
            if isinstance(reduced, Pod):
                occupants.append(Manifest("cluster", 0, len(occupants), reduced))
    return cluster_from_manifest_set(collector.result, now=now, occupants=occupants)


def comparable(snapshot: Snapshot) -> tuple[Any, ...]:
    """A snapshot as plain values (its node table holds numpy arrays, which `==` cannot compare)."""
    table = snapshot.nodes
    arrays = (table.allocatable, table.gpu_memory, table.gpu_memory_synced, table.schedulable)
    rows = (table.names, table.specs, [array.tolist() for array in arrays])
    return (
        rows,
        snapshot.queues,
        snapshot.children,
        snapshot.jobs,
        snapshot.problems,
        snapshot.held,
        snapshot.topologies,
    )


def rfc3339(moment: float) -> str:
    return datetime.fromtimestamp(moment, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def random_object(rng: random.Random, now: float) -> tuple[str, dict[str, Any]]:
    """(the cache's kind, object): queues, nodes (some in topology domains), PodGroups (some
    topology-constrained), Topologies, BindRequests, our pods (some the models reject, some
    deleted, some placed, some naming claims and ConfigMaps), other schedulers' pods on nodes, and
    claims, volumes, StorageClasses and ConfigMaps."""
    choice = rng.randrange(12)
    group = f"g{rng.randrange(4)}"
    name = f"{group}-{rng.randrange(3)}"
    if choice == 0:
        return "Queue", queue(
            f"q{rng.randrange(3)}", parent=rng.choice(["", "", "q0"]), gpu=rng.choice([8, 16])
        )
    if choice == 1:
        labels = {"nvidia.com/gpu.memory": "81920"}
        if rng.random() < 0.7:
            labels |= {"zone": f"z{rng.randrange(2)}", "rack": f"r{rng.randrange(2)}"}
        return "Node", node(f"n{rng.randrange(4)}", gpus=rng.choice([4, 8]), labels=labels)
    if choice == 2:
        spec: dict[str, Any] = {"minMember": rng.randrange(1, 3)}
        if rng.random() < 0.5:
            spec["topologyConstraint"] = {"topology": f"t{rng.randrange(2)}", "requiredTopologyLevel": "rack"}
        return "PodGroup", podgroup(group, queue=f"q{rng.randrange(3)}", **spec)
    if choice == 7:
        return "Topology", topology(f"t{rng.randrange(2)}", *rng.choice([("zone", "rack"), ("rack",)]))
    if choice in (8, 9, 10):
        return random_storage_object(rng, name)
    if choice == 3:
        request = {"podName": name, "selectedNode": f"n{rng.randrange(5)}", "selectedGPUGroups": ["x"]}
        body = {"metadata": {"name": name, "namespace": "team-a"}, "spec": request}
        status = {"status": {"phase": rng.choice(["", "Failed"])}}
        return "BindRequest", {
            "apiVersion": "scheduling.run.ai/v1alpha2",
            "kind": "BindRequest",
            **body,
            **status,
        }
    if choice == 4:
        # Sometimes named as one of ours: the API lets a pod's scheduler change, and the cache
        # follows the two kinds apart.
        name, namespace = rng.choice([(f"web-{rng.randrange(3)}", "other"), (name, "team-a")])
        foreign = pod(name, ns=namespace, gpus=1, schedulerName="default-scheduler")
        foreign["spec"]["nodeName"] = f"n{rng.randrange(5)}"
        return "ForeignPod", foreign
    extra: dict[str, Any] = {"tolerations": [{"key": "k", "value": 5}]} if rng.random() < 0.15 else {}
    annotations = {"gpu-fraction": "0.5"} if rng.random() < 0.2 else None
    gpus = 0 if annotations else rng.choice([1, 2, 4])
    body = pod(name, gpus=gpus, group=group if rng.random() < 0.9 else None, annotations=annotations, **extra)
    if rng.random() < 0.6:
        body["spec"]["volumes"] = random_volumes(rng)
    if rng.random() < 0.5:
        body["spec"]["nodeName"] = f"n{rng.randrange(5)}"
        body["status"] = {"phase": rng.choice(["Running", "Pending", "Succeeded"])}
    if rng.random() < 0.15:  # deleted a little before `now`: stuck in releasing two minutes after
        body["metadata"]["deletionTimestamp"] = rfc3339(now - rng.choice([0, 60, 110]))
    return "Pod", body


def random_storage_object(rng: random.Random, pod_name: str) -> tuple[str, dict[str, Any]]:
    """A claim (sometimes the one a pod's ephemeral volume stands for), a volume, a class (some
    delayed, some the default) or a ConfigMap, of a few names, so pods' references come and go."""
    kind = rng.choice(["PersistentVolumeClaim", "PersistentVolume", "StorageClass", "ConfigMap"])
    if kind == "PersistentVolumeClaim":
        selected = (
            {"volume.kubernetes.io/selected-node": f"n{rng.randrange(4)}"} if rng.random() < 0.2 else None
        )
        return kind, claim(
            rng.choice(["c0", "c1", f"{pod_name}-scratch"]),
            storage_class=rng.choice([None, "", "s0", "s1", "missing"]),
            volume=rng.choice(["", "", "pv0", "pv1"]),
            annotations=selected,
        )
    if kind == "PersistentVolume":
        return kind, local_volume(f"pv{rng.randrange(2)}", rng.choice([None, "n0", "n1"]))
    if kind == "StorageClass":
        zones = [{"zone": ["z0"]}] if rng.random() < 0.5 else None
        mode = rng.choice(["Immediate", "WaitForFirstConsumer"])
        return kind, storage_class(f"s{rng.randrange(2)}", mode, topologies=zones, default=rng.random() < 0.3)
    return kind, config_map(f"m{rng.randrange(2)}")


def random_volumes(rng: random.Random) -> list[dict[str, Any]]:
    volumes = [
        claim_volume("data", rng.choice(["c0", "c1"])),
        {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}},
        config_map_volume("settings", f"m{rng.randrange(2)}", optional=rng.choice([None, True])),
    ]
    return rng.sample(volumes, rng.randrange(1, len(volumes) + 1))


@pytest.mark.parametrize("seed", range(12))
def test_after_any_stream_of_watch_events_the_incremental_snapshot_is_a_rebuilt_one(seed: int) -> None:
    """Random adds, updates and deletes of every kind, in any order, in batches; after every
    batch the reader that kept its models and conversions gives exactly the `ClusterState` and
    problems of a fresh reader and of the manifest conversion of the same objects, the
    compiler that kept its compiled jobs the snapshot compiled afresh, and the planner that
    keeps its compiled and session jobs (`JobPool`) the plan of a fresh session.  The clock
    moves too (a deleted pod turns stuck in releasing after two minutes)."""
    rng = random.Random(seed)
    cache = ClusterCache(None)
    kept = CacheReader("kai-scheduler")
    compiler = SnapshotCompiler()
    planner = CyclePlanner(SchedulerConfig())
    revision = 0
    now = 1_767_225_600.0
    for _ in range(30):
        for _ in range(rng.randrange(1, 8)):
            revision += 1
            kind, obj = random_object(rng, now)
            obj["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z"
            stored = cache.sizes()[kind]
            event = "DELETED" if stored and rng.random() < 0.25 else rng.choice(["ADDED", "MODIFIED"])
            version = "" if rng.random() < 0.05 and event != "DELETED" else str(revision)
            cache.apply_event(event, kind, versioned(obj, version))
        now += rng.choice([0.0, 30.0, 90.0])
        incremental = kept.read(cache, now)
        assert incremental == CacheReader("kai-scheduler").read(cache, now)
        assert incremental == reference(cache, now)
        assert comparable(compiler.compile(incremental[0])) == comparable(compile_snapshot(incremental[0]))
        fresh = schedule(compile_snapshot(incremental[0]), SchedulerConfig())
        assert planner.decide(incremental[0])[1] == fresh
        assert len(kept) == sum(cache.sizes().values())


@pytest.mark.parametrize("seed", range(12))
def test_after_any_stream_of_storage_changes_the_incremental_snapshot_is_a_rebuilt_one(seed: int) -> None:
    """Claims, volumes, classes and ConfigMaps coming, changing and going under pods that all
    join valid PodGroups, so every change reaches a task: the reader converts again exactly the
    pods whose volumes or environment name what changed (a class: every pod naming a claim)."""
    rng = random.Random(seed)
    base = [queue("team-a", gpu=16), node("n0"), node("n1"), *(podgroup(f"g{i}") for i in range(3))]
    for obj in base:
        obj["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z"
    cache = filled(base)
    kept = CacheReader("kai-scheduler")
    revision = 100
    for _ in range(40):
        for _ in range(rng.randrange(1, 4)):
            revision += 1
            name = f"g{rng.randrange(3)}-{rng.randrange(2)}"
            if rng.random() < 0.3:
                kind, obj = "Pod", pod(name, gpus=1, group=name[:2], volumes=random_volumes(rng))
            else:
                kind, obj = random_storage_object(rng, name)
            obj["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z"
            stored = cache.sizes()[kind]
            event = "DELETED" if stored and rng.random() < 0.2 else "MODIFIED"
            cache.apply_event(event, kind, versioned(obj, str(revision)))
        incremental = kept.read(cache, 0.0)
        assert incremental == reference(cache, 0.0)
        assert incremental == CacheReader("kai-scheduler").read(cache, 0.0)


def test_the_reader_keeps_what_it_read_from_its_first_read() -> None:
    """A reader that knows nothing yet fills up on its first read and serves the next from it."""
    cache = filled(cluster())
    reader = CacheReader("kai-scheduler")
    first, _ = reader.read(cache, now=0.0)
    assert len(reader) == len(cluster())
    again, _ = reader.read(cache, now=0.0)
    assert again == first and again.jobs[0] is first.jobs[0]


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


def test_what_the_reader_remembers_follows_the_objects_that_exist_not_their_history() -> None:
    """Pods and PodGroups of new names come and go (churn): once they are gone, nothing about
    them is kept."""
    cache = filled(cluster())
    reader = CacheReader("kai-scheduler")
    reader.read(cache, now=0.0)
    settled = reader.remembered()
    for number in range(50):
        name = f"short-{number}"
        cache.apply_event("ADDED", "PodGroup", versioned(podgroup(name), str(1000 + 4 * number)))
        cache.apply_event("ADDED", "Pod", versioned(pod(name, gpus=1, group=name), str(1001 + 4 * number)))
        reader.read(cache, now=0.0)
        cache.apply_event("DELETED", "Pod", versioned(pod(name), str(1002 + 4 * number)))
        cache.apply_event("DELETED", "PodGroup", versioned(podgroup(name), str(1003 + 4 * number)))
        reader.read(cache, now=0.0)
    assert reader.remembered() == settled and len(reader) == len(cluster())
