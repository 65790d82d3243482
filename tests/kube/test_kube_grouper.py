"""Grouping plain pods into PodGroups, on the real API server.

Each test works in its own namespace with a cache restricted to it, so PodGroups and pods
of other tests never show up; the grouper is run directly (no serve loop).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from kubernetes import client

from kai_ray.api import Pod
from kai_ray.cluster.kube.cache import ClusterCache
from kai_ray.cluster.kube.grouper import PODGROUPER_WARNING, ensure_pod_groups
from kai_ray.cluster.kube.snapshot import snapshot
from kai_ray.cluster.kube.status import EventWriter
from kai_ray.convert import bare_pod_group_name

pytestmark = pytest.mark.kube

TIMEOUT = 30.0
GROUP, VERSION, PODGROUPS = "scheduling.run.ai", "v2alpha2", "podgroups"


class Namespace:
    def __init__(self, api: Any, name: str) -> None:
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.name = name

    def pod(
        self,
        name: str,
        *,
        labels: dict[str, str] | None = None,
        annotations: dict[str, str] | None = None,
        priority_class: str | None = None,
    ) -> dict[str, Any]:
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "labels": labels or {}, "annotations": annotations or {}},
            "spec": {
                "schedulerName": "kai-scheduler",
                "containers": [{"name": "main", "image": "busybox"}],
                **({"priorityClassName": priority_class} if priority_class else {}),
            },
        }
        created = self.core.create_namespaced_pod(self.name, body)
        return {"metadata": {"name": created.metadata.name, "uid": created.metadata.uid}}

    def podgroups(self) -> dict[str, dict[str, Any]]:
        listing = self.custom.list_namespaced_custom_object(GROUP, VERSION, self.name, PODGROUPS)
        return {pg["metadata"]["name"]: pg for pg in listing["items"]}

    def annotations(self, pod: str) -> dict[str, str]:
        return dict(self.core.read_namespaced_pod(pod, self.name).metadata.annotations or {})

    def events(self, pod: str) -> list[tuple[str, str, str]]:
        found = self.core.list_namespaced_event(self.name, field_selector=f"involvedObject.name={pod}")
        return [(e.type, e.reason, e.message) for e in found.items]


@pytest.fixture
def ns(kube_api: Any, namespace: str) -> Namespace:
    return Namespace(kube_api, namespace)


@contextlib.contextmanager
def cache_of(api: Any, namespace: str, kinds: tuple[str, ...] | None = None) -> Iterator[ClusterCache]:
    cache = (
        ClusterCache(api, namespace=namespace)
        if kinds is None
        else ClusterCache(api, namespace=namespace, kinds=kinds)
    )
    cache.start()
    try:
        assert cache.wait_synced(TIMEOUT)
        yield cache
    finally:
        cache.stop()


def see_pods(cache: ClusterCache, count: int) -> None:
    assert cache.wait_until(lambda: len(cache.objects("Pod")) == count, TIMEOUT), (
        "pods did not reach the cache"
    )


def test_one_podgroup_per_bare_pod_as_kai_names_and_fills_it(kube_api: Any, ns: Namespace) -> None:
    pod = ns.pod(
        "trainer",
        labels={"kai.scheduler/queue": "default-queue", "app": "demo"},
        annotations={"user": "alice", "kai.scheduler/preemption-delay": "30s"},
        priority_class="inference",
    )
    with cache_of(kube_api, ns.name) as cache:
        see_pods(cache, 1)
        result = ensure_pod_groups(kube_api, cache)

        name = f"pg-trainer-{pod['metadata']['uid']}"
        assert name == bare_pod_group_name(Pod.model_validate(pod))
        assert result.created == [f"{ns.name}/{name}"]
        assert result.annotated == [f"{ns.name}/trainer"] and result.failed == []
        groups = ns.podgroups()
        assert list(groups) == [name]
        group = groups[name]
        assert group["spec"]["minMember"] == 1
        assert group["spec"]["queue"] == "default-queue"
        assert group["spec"]["priorityClassName"] == "inference"
        assert group["spec"]["preemptionDelay"] == "30s"
        assert group["metadata"]["ownerReferences"] == [
            {"apiVersion": "v1", "kind": "Pod", "name": "trainer", "uid": pod["metadata"]["uid"]}
        ]
        assert group["metadata"]["labels"] == {"kai.scheduler/queue": "default-queue", "app": "demo"}
        assert group["metadata"]["annotations"]["user"] == "alice"
        assert yaml.safe_load(group["metadata"]["annotations"]["kai.scheduler/top-owner-metadata"]) == {
            "name": "trainer",
            "uid": pod["metadata"]["uid"],
            "group": "",
            "version": "v1",
            "kind": "Pod",
        }
        assert ns.annotations("trainer")["pod-group-name"] == name

        # Written through: the very next snapshot schedules the pod in its PodGroup.
        state, _ = snapshot(cache)
        jobs = {j.key: j for j in state.jobs if j.namespace == ns.name}
        assert list(jobs) == [f"{ns.name}/{name}"]
        assert [t.name for t in jobs[f"{ns.name}/{name}"].tasks] == ["trainer"]
        assert jobs[f"{ns.name}/{name}"].priority == 125


def test_grouping_is_idempotent(kube_api: Any, ns: Namespace) -> None:
    for i in range(5):
        ns.pod(f"p{i}")
    with cache_of(kube_api, ns.name) as cache:
        see_pods(cache, 5)
        first = ensure_pod_groups(kube_api, cache)
        assert len(first.created) == 5 and len(first.annotated) == 5
        assert cache.wait_until(lambda: len(cache.objects("PodGroup")) == 5, TIMEOUT)
        for _ in range(2):
            again = ensure_pod_groups(kube_api, cache)
            assert (again.created, again.annotated, again.failed) == ([], [], [])
    # A grouper that has not seen the PodGroups (a restart, a second replica) hits 409 and
    # only re-applies the annotation: still exactly one PodGroup per pod.
    with cache_of(kube_api, ns.name, kinds=("Pod", "PriorityClass")) as blind:
        see_pods(blind, 5)
        for pod in blind.objects("Pod"):
            ns.core.patch_namespaced_pod(
                pod["metadata"]["name"],
                ns.name,
                [{"op": "remove", "path": "/metadata/annotations/pod-group-name"}],
                _content_type="application/json-patch+json",
            )
        assert blind.wait_until(
            lambda: all(
                "pod-group-name" not in (p["metadata"].get("annotations") or {}) for p in blind.objects("Pod")
            ),
            TIMEOUT,
        )
        result = ensure_pod_groups(kube_api, blind)
        assert result.created == [] and len(result.annotated) == 5
    groups = ns.podgroups()
    assert len(groups) == 5
    for i in range(5):
        assert ns.annotations(f"p{i}")["pod-group-name"] in groups


def test_queue_and_priority_fallbacks(kube_api: Any, ns: Namespace) -> None:
    ns.pod("plain")
    ns.pod("missing-class", priority_class=None, labels={"priorityClassName": "no-such-class"})
    ns.pod("labelled-class", labels={"priorityClassName": "build"}, priority_class="inference")
    ns.pod("project", labels={"project": "team-a", "kai.scheduler/node-pool": "pool-1"})
    with cache_of(kube_api, ns.name) as cache:
        see_pods(cache, 4)
        ensure_pod_groups(kube_api, cache)
    specs = {pg["metadata"]["ownerReferences"][0]["name"]: pg["spec"] for pg in ns.podgroups().values()}
    assert (specs["plain"]["queue"], specs["plain"]["priorityClassName"]) == ("default-queue", "train")
    assert specs["missing-class"]["priorityClassName"] == "train"  # must exist, else the fallback
    assert specs["labelled-class"]["priorityClassName"] == "build"  # the label wins over the spec
    assert specs["project"]["queue"] == "team-a-pool-1"


def test_pods_naming_a_podgroup_join_it_and_opted_out_pods_are_left_alone(
    kube_api: Any, ns: Namespace
) -> None:
    ns.custom.create_namespaced_custom_object(
        GROUP,
        VERSION,
        ns.name,
        PODGROUPS,
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "PodGroup",
            "metadata": {"name": "team"},
            "spec": {"queue": "default-queue", "minMember": 2},
        },
    )
    ns.pod("w0", annotations={"pod-group-name": "team"})
    ns.pod("w1", annotations={"pod-group-name": "team"})
    ns.pod("skipped", annotations={"kai.scheduler/skip-podgrouper": "true"})
    with cache_of(kube_api, ns.name) as cache:
        see_pods(cache, 3)
        result = ensure_pod_groups(kube_api, cache)
        assert (result.created, result.annotated, result.failed) == ([], [], [])
        state, problems = snapshot(cache)
    assert list(ns.podgroups()) == ["team"]
    assert "pod-group-name" not in ns.annotations("skipped")
    jobs = {j.key: j for j in state.jobs if j.namespace == ns.name}
    assert list(jobs) == [f"{ns.name}/team"]
    assert sorted(t.name for t in jobs[f"{ns.name}/team"].tasks) == ["w0", "w1"]
    assert not [p for p in problems if p.namespace == ns.name]


def test_a_pod_whose_podgroup_cannot_be_created_gets_an_event_and_others_still_group(
    kube_api: Any, ns: Namespace
) -> None:
    long = "p" * 220  # a valid pod name, but pg-<name>-<uid> exceeds the 253 characters of a name
    ns.pod(long)
    ns.pod("short")
    events = EventWriter(kube_api)  # one per process, as `serve` keeps it: its memory dedupes
    with cache_of(kube_api, ns.name) as cache:
        see_pods(cache, 2)
        result = ensure_pod_groups(kube_api, cache, events)
        assert result.failed == [f"{ns.name}/{long}"]
        assert result.annotated == [f"{ns.name}/short"]
        again = ensure_pod_groups(kube_api, cache, events)
        assert again.failed == [f"{ns.name}/{long}"]
    written = ns.events(long)
    assert len(written) == 1, written  # the repeated failure is not written twice
    kind, reason, message = written[0]
    assert (kind, reason) == ("Warning", PODGROUPER_WARNING)
    assert "cannot create PodGroup" in message and "metadata.name" in message
