"""The cluster cache, the snapshot built from it, and problem reporting, on the real API server.

The session cluster is shared: namespaced objects live in the test's namespace (and the
caches under test are restricted to it where that keeps other tests' objects out), and the
cluster-scoped Queues and Nodes created here carry a unique prefix and are deleted again.
Waiting is always on a condition with a deadline (`ClusterCache.wait_until`), never a sleep.
"""

from __future__ import annotations

import contextlib
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kube_proxy import FlakyProxy
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kai_ray.cluster.kube.cache import ClusterCache
from kai_ray.cluster.kube.reporting import INVALID_OBJECT, ProblemReporter
from kai_ray.cluster.kube.snapshot import snapshot
from kai_ray.devcluster import DevCluster
from kai_ray.model.objects import ClusterState, JobSpec, TaskStatus

pytestmark = pytest.mark.kube

TIMEOUT = 30.0
GROUP, QUEUES, PODGROUPS, BINDREQUESTS = "scheduling.run.ai", "queues", "podgroups", "bindrequests"


# ------------------------------------------------------------------------------------ helpers


class ClusterObjects:
    """Creates test objects through the real API and removes the cluster-scoped ones afterwards."""

    def __init__(self, api: Any, namespace: str) -> None:
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.namespace = namespace
        self.prefix = f"k{uuid.uuid4().hex[:8]}"
        self._queues: list[str] = []
        self._nodes: list[str] = []

    def queue(self, name: str, parent: str = "", gpu: float = -1) -> dict[str, Any]:
        quota = {"quota": gpu, "limit": -1, "overQuotaWeight": 1}
        body = {
            "apiVersion": f"{GROUP}/v2",
            "kind": "Queue",
            "metadata": {"name": name},
            "spec": {"parentQueue": parent, "resources": {"gpu": quota, "cpu": quota, "memory": quota}},
        }
        self._queues.append(name)
        return dict(self.custom.create_cluster_custom_object(GROUP, "v2", QUEUES, body))

    def node(self, name: str, gpus: int = 8) -> None:
        """A GPU node that no pod runner manages, so bound pods stay as the test leaves them."""
        resources = {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": str(gpus)}
        body = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "status": {
                "capacity": resources,
                "allocatable": resources,
                "conditions": [{"type": "Ready", "status": "True", "reason": "Test", "message": "test"}],
            },
        }
        self._nodes.append(name)
        self.core.create_node(body)

    def podgroup(self, name: str, queue: str, **spec: Any) -> dict[str, Any]:
        body = {
            "apiVersion": f"{GROUP}/v2alpha2",
            "kind": "PodGroup",
            "metadata": {"name": name, "namespace": self.namespace},
            "spec": {"queue": queue, **spec},
        }
        return dict(
            self.custom.create_namespaced_custom_object(GROUP, "v2alpha2", self.namespace, PODGROUPS, body)
        )

    def pod(
        self,
        name: str,
        group: str | None = None,
        *,
        gpus: int = 1,
        node: str | None = None,
        scheduler: str = "kai-scheduler",
        annotations: dict[str, str] | None = None,
    ) -> Any:
        notes = dict(annotations or {})
        if group is not None:
            notes["pod-group-name"] = group
        limits = {"nvidia.com/gpu": str(gpus)} if gpus else {}
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": self.namespace, "annotations": notes},
            "spec": {
                "schedulerName": scheduler,
                "containers": [{"name": "main", "image": "busybox", "resources": {"limits": limits}}],
                **({"nodeName": node} if node else {}),
            },
        }
        return self.core.create_namespaced_pod(self.namespace, body)

    def set_running(self, pod: str) -> None:
        status = {"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}
        self.core.patch_namespaced_pod_status(pod, self.namespace, status)

    def bind_request(self, pod: str, node: str) -> None:
        body = {
            "apiVersion": f"{GROUP}/v1alpha2",
            "kind": "BindRequest",
            "metadata": {"name": pod, "namespace": self.namespace},
            "spec": {"podName": pod, "selectedNode": node, "receivedResourceType": "Regular"},
        }
        self.custom.create_namespaced_custom_object(GROUP, "v1alpha2", self.namespace, BINDREQUESTS, body)

    def cleanup(self) -> None:
        for name in self._queues:
            with contextlib.suppress(ApiException):
                self.custom.delete_cluster_custom_object(GROUP, "v2", QUEUES, name)
        for name in self._nodes:
            with contextlib.suppress(ApiException):
                self.core.delete_node(name)


@pytest.fixture
def objects(kube_api: Any, namespace: str) -> Iterator[ClusterObjects]:
    made = ClusterObjects(kube_api, namespace)
    try:
        yield made
    finally:
        made.cleanup()


@contextlib.contextmanager
def running(cache: ClusterCache) -> Iterator[ClusterCache]:
    cache.start()
    try:
        assert cache.wait_synced(TIMEOUT), "cache did not finish its first list"
        yield cache
    finally:
        cache.stop()


def names(cache: ClusterCache, kind: str) -> set[str]:
    return {str(obj["metadata"]["name"]) for obj in cache.objects(kind)}


def until(cache: ClusterCache, what: str, predicate: Callable[[], bool]) -> None:
    assert cache.wait_until(predicate, TIMEOUT), f"timed out waiting for {what}"


def job(state: ClusterState, key: str) -> JobSpec:
    found = [j for j in state.jobs if j.key == key]
    assert found, f"job {key} not in the snapshot (jobs: {sorted(j.key for j in state.jobs)})"
    return found[0]


# ------------------------------------------------------------------------------------ cache


def test_lists_then_follows_creates_updates_and_deletes(
    kube_api: Any, namespace: str, objects: ClusterObjects
) -> None:
    q = f"{objects.prefix}-q"
    objects.queue(q)
    objects.pod("before", "pg")
    objects.pod("other-scheduler", "pg", scheduler="default-scheduler")
    with running(ClusterCache(kube_api)) as cache:
        # The first list saw what already existed; pods of other schedulers never arrive.
        assert q in names(cache, "Queue")
        assert {"gpu-node-0", "gpu-node-1"} <= names(cache, "Node")
        assert {"train", "inference"} <= names(cache, "PriorityClass")
        pods = {(p["metadata"]["namespace"], p["metadata"]["name"]) for p in cache.objects("Pod")}
        assert (namespace, "before") in pods
        assert (namespace, "other-scheduler") not in pods
        pod = cache.get("Pod", namespace, "before")
        assert pod is not None and pod["kind"] == "Pod" and pod["apiVersion"] == "v1"
        assert "managedFields" not in pod["metadata"]

        generation = cache.generation
        objects.pod("after", "pg")
        until(cache, "the new pod", lambda: cache.get("Pod", namespace, "after") is not None)
        assert cache.generation > generation

        generation = cache.generation
        objects.core.patch_namespaced_pod("after", namespace, {"metadata": {"labels": {"step": "2"}}})
        until(
            cache,
            "the label",
            lambda: (cache.get("Pod", namespace, "after") or {})["metadata"].get("labels") == {"step": "2"},
        )
        assert cache.generation > generation

        generation = cache.generation
        objects.custom.delete_cluster_custom_object(GROUP, "v2", QUEUES, q)
        until(cache, "the queue to go", lambda: q not in names(cache, "Queue"))
        assert cache.generation > generation
        assert cache.relists("Queue") == 0 and cache.relists("Pod") == 0


def test_reads_are_copies_and_generation_only_moves_on_change(
    kube_api: Any, namespace: str, objects: ClusterObjects
) -> None:
    objects.pod("p", "pg")
    with running(ClusterCache(kube_api, namespace=namespace, kinds=["Pod", "PodGroup"])) as cache:
        first = cache.objects("Pod")
        first[0]["metadata"]["name"] = "mutated"
        assert names(cache, "Pod") == {"p"}
        generation = cache.generation
        # Nothing in this namespace changes, so the generation must hold for the whole wait.
        assert cache.wait_changed(generation, timeout=1.0) == generation
        objects.podgroup("pg", "default-queue")
        assert cache.wait_changed(generation, timeout=TIMEOUT) > generation


def test_namespace_restriction_keeps_other_namespaces_out(
    kube_api: Any, namespace: str, objects: ClusterObjects
) -> None:
    objects.pod("mine", "pg")
    with running(ClusterCache(kube_api, namespace=namespace, kinds=["Pod", "Queue"])) as cache:
        assert {p["metadata"]["namespace"] for p in cache.objects("Pod")} == {namespace}
        assert "default-queue" in names(cache, "Queue")  # cluster-scoped kinds stay cluster-wide


def test_relists_when_the_server_answers_410_gone(kube_api: Any, objects: ClusterObjects) -> None:
    """Resuming a watch from resourceVersion 1 makes the real server answer 410 "too old
    resource version" (its watch cache for the Queue CRD begins long after that): the cache
    must re-list, stay correct, and keep following changes afterwards."""
    kept, dropped, later = (f"{objects.prefix}-{n}" for n in ("kept", "dropped", "later"))
    objects.queue(kept)
    with running(ClusterCache(kube_api, kinds=["Queue"])) as cache:
        objects.queue(dropped)
        until(cache, "queue before the 410", lambda: dropped in names(cache, "Queue"))
        cache.rewatch("Queue", "1")
        until(cache, "a re-list", lambda: cache.relists("Queue") >= 1)
        assert {kept, dropped} <= names(cache, "Queue")
        objects.custom.delete_cluster_custom_object(GROUP, "v2", QUEUES, dropped)
        objects.queue(later)
        until(
            cache,
            "changes after the re-list",
            lambda: later in names(cache, "Queue") and dropped not in names(cache, "Queue"),
        )


def test_connection_loss_resumes_from_the_last_resource_version(
    kube_cluster: DevCluster, kube_api: Any, namespace: str, objects: ClusterObjects
) -> None:
    proxy = FlakyProxy(int(kube_cluster.server.rsplit(":", 1)[1]))
    config = kube_cluster.configuration()
    config.host = f"https://127.0.0.1:{proxy.port}"
    api = client.ApiClient(config)
    try:
        objects.pod("before", "pg")
        with running(
            ClusterCache(api, namespace=namespace, kinds=["Pod", "PodGroup"], watch_timeout=5)
        ) as cache:
            proxy.down()
            # Changes made (directly, not through the proxy) while the cache cannot connect ...
            objects.pod("during", "pg")
            objects.core.delete_namespaced_pod("before", namespace, grace_period_seconds=0)
            objects.podgroup("pg", "default-queue")
            assert proxy.wait_refused(2, TIMEOUT), "the cache did not try to reconnect"
            assert names(cache, "Pod") == {"before"}  # ... are not seen yet, and nothing crashed
            proxy.up()
            until(
                cache,
                "catching up",
                lambda: names(cache, "Pod") == {"during"} and names(cache, "PodGroup") == {"pg"},
            )
            # Resumed from the last resourceVersion: the server still had it, so no re-list.
            assert cache.relists("Pod") == 0 and cache.relists("PodGroup") == 0
    finally:
        api.close()
        proxy.close()


def test_unreachable_server_delays_sync_without_failing(kube_cluster: DevCluster, namespace: str) -> None:
    proxy = FlakyProxy(int(kube_cluster.server.rsplit(":", 1)[1]))
    proxy.down()
    config = kube_cluster.configuration()
    config.host = f"https://127.0.0.1:{proxy.port}"
    api = client.ApiClient(config)
    cache = ClusterCache(api, namespace=namespace, kinds=["Pod", "Queue"])
    try:
        cache.start()
        assert proxy.wait_refused(2, TIMEOUT)
        assert not cache.wait_synced(0.2)
        proxy.up()
        assert cache.wait_synced(TIMEOUT)
        assert "default-queue" in names(cache, "Queue")
    finally:
        cache.stop()
        api.close()
        proxy.close()


def test_stop_interrupts_idle_watches_promptly(kube_api: Any, namespace: str) -> None:
    cache = ClusterCache(kube_api, namespace=namespace, watch_timeout=600)
    cache.start()
    assert cache.wait_synced(TIMEOUT)
    stopped = threading.Event()
    threading.Thread(target=lambda: (cache.stop(), stopped.set()), daemon=True).start()
    assert stopped.wait(5.0), "stop() hung on an idle watch"
    assert not [t for t in threading.enumerate() if t.name.startswith("kai-cache-") and t.is_alive()]


def test_observe_writes_through_but_never_rolls_back(
    kube_api: Any, namespace: str, objects: ClusterObjects
) -> None:
    created = objects.podgroup("pg", "default-queue")
    patched = objects.custom.patch_namespaced_custom_object(
        GROUP, "v2alpha2", namespace, PODGROUPS, "pg", {"metadata": {"labels": {"v": "2"}}}
    )
    # Not started, so only write-through changes it: the server's answers are recorded at once.
    offline = ClusterCache(kube_api, namespace=namespace, kinds=["PodGroup"])
    assert offline.observe("PodGroup", created)
    assert offline.observe("PodGroup", patched)
    assert not offline.observe("PodGroup", created)  # an older resourceVersion never rolls back
    assert (offline.get("PodGroup", namespace, "pg") or {})["metadata"]["labels"] == {"v": "2"}
    assert not offline.observe("Pod", {"metadata": {"name": "x", "namespace": namespace}})  # not followed

    with running(ClusterCache(kube_api, namespace=namespace, kinds=["PodGroup"])) as cache:
        assert cache.get("PodGroup", namespace, "pg") is not None
        objects.custom.delete_namespaced_custom_object(GROUP, "v2alpha2", namespace, PODGROUPS, "pg")
        until(cache, "the deletion", lambda: cache.get("PodGroup", namespace, "pg") is None)
        assert not cache.observe("PodGroup", patched)  # a late write-through cannot resurrect it
        assert cache.get("PodGroup", namespace, "pg") is None


# ------------------------------------------------------------------------------------ snapshot


def test_snapshot_of_queues_nodes_podgroups_and_pods(
    kube_api: Any, namespace: str, objects: ClusterObjects
) -> None:
    p = objects.prefix
    parent, team_a, team_b, node = f"{p}-parent", f"{p}-a", f"{p}-b", f"{p}-node"
    objects.queue(parent, gpu=16)
    objects.queue(team_a, parent=parent, gpu=8)
    objects.queue(team_b, parent=parent, gpu=8)
    objects.node(node, gpus=8)
    objects.podgroup("gang", team_a, minMember=3)
    objects.podgroup("solo", team_b)
    objects.pod("gang-bound", "gang", node=node)
    objects.pod("gang-binding", "gang")
    objects.bind_request("gang-binding", node)
    objects.pod("gang-pending", "gang")
    objects.pod("solo-running", "solo", node=node)
    objects.set_running("solo-running")
    objects.pod("ungrouped")  # waits for the grouper: not scheduled under an implicit job
    objects.pod("foreign", "solo", scheduler="default-scheduler")

    with running(ClusterCache(kube_api, namespace=namespace)) as cache:
        until(
            cache,
            "all objects",
            lambda: len(cache.objects("Pod")) == 5 and cache.objects("BindRequest") != [],
        )
        until(
            cache,
            "the running pod",
            lambda: (
                (cache.get("Pod", namespace, "solo-running") or {}).get("status", {}).get("phase")
                == "Running"
            ),
        )
        state, problems = snapshot(cache, now=1e10)

    assert state.now == 1e10
    mine = [str(problem) for problem in problems if p in str(problem) or namespace in str(problem)]
    assert mine == []
    queues = {q.name: q for q in state.queues if q.name.startswith(p)}
    assert {name: q.parent for name, q in queues.items()} == {parent: None, team_a: parent, team_b: parent}
    assert queues[team_a].gpu.quota == 8
    nodes = {n.name: n for n in state.nodes}
    assert nodes[node].gpus == 8 and {"gpu-node-0", "gpu-node-1"} <= set(nodes)

    gang = job(state, f"{namespace}/gang")
    assert gang.queue == team_a
    assert gang.subgroups.all_pod_sets()[0].min_available == 3
    statuses = {t.name: (t.status, t.node) for t in gang.tasks}
    assert statuses == {
        "gang-bound": (TaskStatus.BOUND, node),
        "gang-binding": (TaskStatus.BINDING, node),
        "gang-pending": (TaskStatus.PENDING, None),
    }
    solo = job(state, f"{namespace}/solo")
    assert [(t.name, t.status, t.node) for t in solo.tasks] == [("solo-running", TaskStatus.RUNNING, node)]
    assert [j.key for j in state.jobs if j.namespace == namespace] == [
        f"{namespace}/gang",
        f"{namespace}/solo",
    ]


def test_malformed_objects_are_reported_and_skipped(
    kube_api: Any, namespace: str, objects: ClusterObjects
) -> None:
    p = objects.prefix
    ok, loop_x, loop_y, missing = f"{p}-ok", f"{p}-x", f"{p}-y", f"{p}-missing"
    objects.queue(ok)
    objects.queue(loop_x, parent=loop_y)
    objects.queue(loop_y, parent=loop_x)
    objects.podgroup("good", ok)
    objects.podgroup("lost", missing)
    objects.podgroup("looped", loop_x)
    objects.podgroup(
        "tangled",
        ok,
        subGroups=[
            {"name": "a", "parent": "b", "minMember": 1},
            {"name": "b", "parent": "a", "minMember": 1},
        ],
    )
    objects.pod("fine", "good")
    objects.pod("bad-fraction", "good", gpus=0, annotations={"gpu-fraction": "half"})

    with running(ClusterCache(kube_api, namespace=namespace)) as cache:
        until(
            cache,
            "all objects",
            lambda: len(cache.objects("Pod")) == 2 and len(cache.objects("PodGroup")) == 4,
        )
        state, problems = snapshot(cache)
        mine = sorted(str(problem) for problem in problems if p in str(problem) or namespace in str(problem))
        cycle = f"parent chain forms a cycle: {loop_x} -> {loop_y} -> {loop_x}"
        expected = [
            f"cluster: PodGroup/{namespace}/looped: spec.queue: queue '{loop_x}' was skipped "
            "(see its own problem)",
            f"cluster: PodGroup/{namespace}/lost: spec.queue: queue '{missing}' does not exist",
            f"cluster: PodGroup/{namespace}/tangled: spec.subGroups: parent links form a cycle among a, b",
            f"cluster: Pod/{namespace}/bad-fraction: metadata.annotations.gpu-fraction: "
            "must be a number in (0, 1], got 'half'",
            f"cluster: Queue/{loop_x}: spec.parentQueue: {cycle}",
            f"cluster: Queue/{loop_y}: spec.parentQueue: {cycle}",
        ]
        assert mine == sorted(expected)
        # Everything else is still there to schedule; the refused pod waits in its job, blocked
        # with the field named, so the job's pending reason says what is wrong.
        blocked = {t.name: [b.message for b in t.blockers] for t in job(state, f"{namespace}/good").tasks}
        assert blocked == {
            "fine": [],
            "bad-fraction": ["metadata.annotations.gpu-fraction: must be a number in (0, 1], got 'half'"],
        }
        assert [j.name for j in state.jobs if j.namespace == namespace] == ["good"]
        assert ok in {q.name for q in state.queues} and not {loop_x, loop_y} & {q.name for q in state.queues}

        reporter = ProblemReporter(kube_api, cache)
        assert reporter.report(problems) >= 6
        # Written together, seen through the watch one by one: wait for both.
        until(
            cache,
            "the conditions",
            lambda: all(_conditions(cache, namespace, name) for name in ("lost", "tangled")),
        )
        lost = _conditions(cache, namespace, "lost")
        assert [(c["type"], c["status"], c["reasons"][0]["reason"]) for c in lost] == [
            ("UnschedulableOnNodePool", "True", "QueueDoesNotExist")
        ]
        assert lost[0]["message"] == f"spec.queue: queue '{missing}' does not exist"
        assert _conditions(cache, namespace, "tangled")[0]["reasons"][0]["message"] == (
            "spec.subGroups: parent links form a cycle among a, b"
        )
        assert _conditions(cache, namespace, "good") == []

        events = _events(objects, namespace)
        assert events[("Pod", "bad-fraction")] == [
            "metadata.annotations.gpu-fraction: must be a number in (0, 1], got 'half'"
        ]
        assert {("PodGroup", "lost"), ("PodGroup", "looped"), ("PodGroup", "tangled")} <= set(events)
        queue_events = _events(objects, "default")
        assert queue_events[("Queue", loop_x)] == [f"spec.parentQueue: {cycle}"]

        # The next cycles see the same problems: nothing new is written.
        for _ in range(2):
            state, problems = snapshot(cache)
            assert reporter.report(problems) == 0
        assert _events(objects, namespace) == events
        stored = objects.custom.get_namespaced_custom_object(GROUP, "v2alpha2", namespace, PODGROUPS, "lost")
        assert stored["status"]["schedulingConditions"] == lost

        # Creating the missing queue fixes `lost`: it is scheduled again and loses the condition.
        objects.queue(missing)
        until(cache, "the new queue", lambda: cache.get("Queue", "", missing) is not None)
        state, problems = snapshot(cache)
        assert f"{namespace}/lost" in {j.key for j in state.jobs}
        reporter.report(problems)
        until(cache, "the cleared condition", lambda: _conditions(cache, namespace, "lost") == [])
        assert _conditions(cache, namespace, "tangled") != []


def _conditions(cache: ClusterCache, namespace: str, name: str) -> list[dict[str, Any]]:
    group = cache.get("PodGroup", namespace, name) or {}
    return list((group.get("status") or {}).get("schedulingConditions") or [])


def _events(objects: ClusterObjects, namespace: str) -> dict[tuple[str, str], list[str]]:
    found: dict[tuple[str, str], list[str]] = {}
    for event in objects.core.list_namespaced_event(namespace).items:
        if event.reason == INVALID_OBJECT and event.type == "Warning":
            key = (event.involved_object.kind, event.involved_object.name)
            found.setdefault(key, []).append(event.message)
    return found
