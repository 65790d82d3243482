"""The podgrouper controller on the real API server: PodGroups written, pods linked, bad owners reported.

Each test works in its own namespace with a cache restricted to it, so PodGroups and pods
of other tests never show up; the controller's pass is run directly (no serve loop).  The
workloads' own controllers do not run here (tests/kube/test_operators_smoke.py runs KubeRay
and the training-operator): pods are created with the owner references those controllers
would set, which is all the podgrouper reads of them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kai_ray_operators import controller as controller_module
from kai_ray_operators.controller import PodGroupController
from kube_zone import batch_job
from kubernetes import client, config

from kai_ray import devcluster
from kai_ray.cluster.kube.cache import ClusterCache
from kai_ray.cluster.kube.events import EventWriter
from kai_ray.cluster.kube.grouping import PODGROUPER_WARNING
from kai_ray.cluster.kube.snapshot import snapshot
from kai_ray.devcluster import DevCluster

pytestmark = pytest.mark.kube

TIMEOUT = 30.0
GROUP, VERSION, PODGROUPS = "scheduling.run.ai", "v2alpha2", "podgroups"


class Namespace:
    def __init__(self, api: Any, name: str) -> None:
        self.core = client.CoreV1Api(api)
        self.batch = client.BatchV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.name = name

    def pod(
        self,
        name: str,
        *,
        labels: dict[str, str] | None = None,
        annotations: dict[str, str] | None = None,
        priority_class: str | None = None,
        owners: list[dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "labels": labels or {},
                "annotations": annotations or {},
                "ownerReferences": owners or [],
            },
            "spec": {
                "schedulerName": "kai-scheduler",
                "containers": [{"name": "main", "image": "busybox"}],
                **({"priorityClassName": priority_class} if priority_class else {}),
            },
        }
        created = self.core.create_namespaced_pod(self.name, body)
        return {"metadata": {"name": created.metadata.name, "uid": created.metadata.uid}}

    def job(self, name: str, parallelism: int, labels: dict[str, str] | None = None) -> dict[str, Any]:
        return batch_job(self.batch.api_client, self.name, name, parallelism=parallelism, labels=labels)

    def podgroups(self) -> dict[str, dict[str, Any]]:
        listing = self.custom.list_namespaced_custom_object(GROUP, VERSION, self.name, PODGROUPS)
        return {pg["metadata"]["name"]: pg for pg in listing["items"]}

    def annotations(self, pod: str) -> dict[str, str]:
        return dict(self.core.read_namespaced_pod(pod, self.name).metadata.annotations or {})

    def events(self, pod: str) -> list[tuple[str, str, str]]:
        found = self.core.list_namespaced_event(self.name, field_selector=f"involvedObject.name={pod}")
        return [(e.type, e.reason, e.message) for e in found.items]


def owner(api_version: str, kind: str, name: str, uid: str) -> dict[str, Any]:
    return {"apiVersion": api_version, "kind": kind, "name": name, "uid": uid, "controller": True}


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
        result = PodGroupController(kube_api).group(cache, EventWriter(kube_api))

        name = f"pg-trainer-{pod['metadata']['uid']}"
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


def test_the_pods_of_one_job_share_one_podgroup_written_once(kube_api: Any, ns: Namespace) -> None:
    job = ns.job("train", parallelism=3, labels={"kai.scheduler/queue": "team-a"})
    for index in range(3):
        ns.pod(f"train-{index}", owners=[job], labels={"batch.kubernetes.io/job-name": "train"})
    with cache_of(kube_api, ns.name) as cache:
        see_pods(cache, 3)
        result = PodGroupController(kube_api).group(cache, EventWriter(kube_api))
    name = f"pg-train-{job['uid']}"
    assert result.created == [f"{ns.name}/{name}"]  # one create for three pods
    assert sorted(result.annotated) == [f"{ns.name}/train-{i}" for i in range(3)]
    group = ns.podgroups()[name]
    assert group["spec"]["queue"] == "team-a"
    assert group["metadata"]["ownerReferences"][0]["kind"] == "Job"
    assert {ns.annotations(f"train-{i}")["pod-group-name"] for i in range(3)} == {name}


def test_grouping_is_idempotent_and_survives_a_restart(kube_api: Any, ns: Namespace) -> None:
    for i in range(5):
        ns.pod(f"p{i}")
    events = EventWriter(kube_api)
    with cache_of(kube_api, ns.name) as cache:
        see_pods(cache, 5)
        grouper = PodGroupController(kube_api)
        first = grouper.group(cache, events)
        assert len(first.created) == 5 and len(first.annotated) == 5
        assert cache.wait_until(lambda: len(cache.objects("PodGroup")) == 5, TIMEOUT)
        for _ in range(2):
            again = grouper.group(cache, events)
            assert (again.created, again.updated, again.annotated, again.failed) == ([], [], [], [])
    # A new controller that has not seen the PodGroups (a restart, a second replica) hits 409,
    # reads the PodGroup and only re-links the pods: still exactly one PodGroup per pod.
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
        result = PodGroupController(kube_api).group(blind, events)
        assert result.created == [] and len(result.annotated) == 5 and result.failed == []
    groups = ns.podgroups()
    assert len(groups) == 5
    for i in range(5):
        assert ns.annotations(f"p{i}")["pod-group-name"] in groups


def test_a_changed_workload_reaches_its_podgroup_on_the_next_refresh(kube_api: Any, ns: Namespace) -> None:
    job = ns.job("grow", parallelism=2)
    ns.pod("grow-0", owners=[job])
    now = [0.0]
    grouper = PodGroupController(kube_api, refresh_seconds=30.0, clock=lambda: now[0])
    events = EventWriter(kube_api)
    name = f"pg-grow-{job['uid']}"
    with cache_of(kube_api, ns.name) as cache:
        see_pods(cache, 1)
        assert grouper.group(cache, events).created == [f"{ns.name}/{name}"]
        ns.pod("grow-1", owners=[job])
        changed = {
            "labels": {"kai.scheduler/queue": "q2"},
            "annotations": {"kai.scheduler/batch-min-member": "2"},
        }
        ns.batch.patch_namespaced_job("grow", ns.name, {"metadata": changed})
        see_pods(cache, 2)
        now[0] = 4.0  # the new pod is grouped at once, from the Job as last read (5 s memory)
        soon = grouper.group(cache, events)
        assert (soon.updated, soon.annotated) == ([], [f"{ns.name}/grow-1"])
        now[0] = 31.0  # past the 30 s re-plan of linked pods: the Job is read again
        result = grouper.group(cache, events)
    assert result.updated == [f"{ns.name}/{name}"] and result.annotated == []
    spec = ns.podgroups()[name]["spec"]
    assert spec["minMember"] == 2
    assert spec["queue"] == "default-queue"  # frozen at creation, as KAI's podgrouper keeps it


def test_a_linked_bare_pod_is_planned_again_only_when_what_a_plan_reads_of_it_changes(
    kube_api: Any, ns: Namespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    planned: list[str] = []
    plan_pod = controller_module.plan_pod

    def counted(reader: Any, config: Any, pod: dict[str, Any]) -> Any:
        planned.append(pod["metadata"]["name"])
        return plan_pod(reader, config, pod)

    ns.pod("solo")
    now = [0.0]
    grouper = PodGroupController(kube_api, refresh_seconds=30.0, clock=lambda: now[0])
    events = EventWriter(kube_api)
    monkeypatch.setattr(controller_module, "plan_pod", counted)
    with cache_of(kube_api, ns.name) as cache:
        see_pods(cache, 1)
        assert grouper.group(cache, events).annotated == [f"{ns.name}/solo"]
        now[0] = 31.0  # its plan read nothing but the pod, and its link is the plan's own doing
        grouper.group(cache, events)
        assert planned == ["solo"]
        now[0] = 1000.0
        grouper.group(cache, events)
        assert planned == ["solo"]

        ns.core.patch_namespaced_pod_status("solo", ns.name, {"status": {"phase": "Running"}})
        assert cache.wait_until(
            lambda: (cache.get("Pod", ns.name, "solo") or {}).get("status", {}).get("phase") == "Running",
            TIMEOUT,
        )
        grouper.group(cache, events)
        assert planned == ["solo"]  # status is no input of a plan

        ns.core.patch_namespaced_pod("solo", ns.name, {"metadata": {"labels": {"team": "a"}}})
        assert cache.wait_until(lambda: "team" in str(cache.get("Pod", ns.name, "solo")), TIMEOUT)
        grouper.group(cache, events)
        assert planned == ["solo", "solo"]  # labels are


def test_queue_and_priority_fallbacks(kube_api: Any, ns: Namespace) -> None:
    ns.pod("plain")
    ns.pod("missing-class", labels={"priorityClassName": "no-such-class"})
    ns.pod("labelled-class", labels={"priorityClassName": "build"}, priority_class="inference")
    ns.pod("project", labels={"project": "team-a", "kai.scheduler/node-pool": "pool-1"})
    with cache_of(kube_api, ns.name) as cache:
        see_pods(cache, 4)
        PodGroupController(kube_api).group(cache, EventWriter(kube_api))
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
        result = PodGroupController(kube_api).group(cache, EventWriter(kube_api))
        assert (result.created, result.updated, result.annotated, result.failed) == ([], [], [], [])
        state, problems = snapshot(cache)
    assert list(ns.podgroups()) == ["team"]
    assert "pod-group-name" not in ns.annotations("skipped")
    jobs = {j.key: j for j in state.jobs if j.namespace == ns.name}
    assert list(jobs) == [f"{ns.name}/team"]
    assert sorted(t.name for t in jobs[f"{ns.name}/team"].tasks) == ["w0", "w1"]
    assert not [p for p in problems if p.namespace == ns.name]


def test_bad_owners_leave_their_pod_ungrouped_with_an_event_and_others_go_on(
    kube_api: Any, ns: Namespace
) -> None:
    """A missing owner, an owner cycle, a kind the API server does not serve, a PodGroup the
    API server refuses: each pod gets one `PodGrouperWarning` and no PodGroup; the good pod
    beside them is grouped in the same pass."""
    ns.pod("orphan", owners=[owner("batch/v1", "Job", "no-such-job", "0000-gone")])
    ns.pod("alien", owners=[owner("example.com/v1", "Frobnicator", "x", "0000-alien")])
    # Two Jobs that own each other: the API server accepts any owner reference.
    first = ns.job("loop-a", parallelism=1)
    second = ns.job("loop-b", parallelism=1)
    for job, other in (("loop-a", second), ("loop-b", first)):
        ns.batch.patch_namespaced_job(job, ns.name, {"metadata": {"ownerReferences": [other]}})
    ns.pod("cyclic", owners=[first])
    long = "p" * 220  # a valid pod name, but pg-<name>-<uid> exceeds the 253 characters of a name
    ns.pod(long)
    ns.pod("good")
    events = EventWriter(kube_api)  # one per process, as `serve` keeps it: its memory dedupes
    grouper = PodGroupController(kube_api)
    with cache_of(kube_api, ns.name) as cache:
        see_pods(cache, 5)
        result = grouper.group(cache, events)
        failed = dict(result.failed)
        assert sorted(failed) == sorted(f"{ns.name}/{p}" for p in ("orphan", "alien", "cyclic", long))
        assert result.annotated == [f"{ns.name}/good"]
        again = grouper.group(cache, events)
        assert sorted(dict(again.failed)) == sorted(failed)
    assert "not found" in failed[f"{ns.name}/orphan"]
    assert "Frobnicator" in failed[f"{ns.name}/alien"]
    assert "cycle" in failed[f"{ns.name}/cyclic"]
    assert "cannot create PodGroup" in failed[f"{ns.name}/{long}"]
    assert "metadata.name" in failed[f"{ns.name}/{long}"]
    for pod in ("orphan", "alien", "cyclic", long):
        written = ns.events(pod)
        assert len(written) == 1, written  # the repeated failure is not written twice
        kind, reason, message = written[0]
        assert (kind, reason, message) == ("Warning", PODGROUPER_WARNING, failed[f"{ns.name}/{pod}"])
        assert "pod-group-name" not in ns.annotations(pod)
    assert [pg["metadata"]["ownerReferences"][0]["name"] for pg in ns.podgroups().values()] == ["good"]


def test_an_owner_it_may_not_read_is_said_and_the_pod_is_grouped_below_it(
    kube_cluster: DevCluster, kube_api: Any, ns: Namespace, tmp_path: Path
) -> None:
    """RBAC without Jobs: KAI groups the Job's pod on its own (a 403 ends the owner chain);
    the pod gets a `PodGrouperWarning` saying which owner could not be read."""
    account = "grouper-without-jobs"
    rbac = client.RbacAuthorizationV1Api(kube_api)
    role = f"{ns.name}-{account}"
    rules = [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch", "patch"]},
        {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]},
        {"apiGroups": ["scheduling.k8s.io"], "resources": ["priorityclasses"], "verbs": ["list", "watch"]},
        {
            "apiGroups": [GROUP],
            "resources": ["podgroups"],
            "verbs": ["get", "list", "watch", "create", "update"],
        },
    ]
    rbac.create_cluster_role({"metadata": {"name": role}, "rules": rules})
    subject = {"kind": "ServiceAccount", "name": account, "namespace": ns.name}
    rbac.create_cluster_role_binding(
        {
            "metadata": {"name": role},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [subject],
        }
    )
    try:
        kubeconfig = devcluster.service_account_kubeconfig(
            kube_cluster, kube_api, ns.name, account, tmp_path / "kubeconfig"
        )
        restricted = config.new_client_from_config(str(kubeconfig))
        job = ns.job("hidden", parallelism=1)
        pod = ns.pod("hidden-0", owners=[job])
        with cache_of(restricted, ns.name, kinds=("Pod", "PodGroup", "PriorityClass")) as cache:
            see_pods(cache, 1)
            result = PodGroupController(restricted).group(cache, EventWriter(restricted))
        notice = f"may not read its owner Job hidden (403): grouped by Pod {ns.name}/hidden-0 instead"
        assert result.noticed == [(f"{ns.name}/hidden-0", notice)] and result.failed == []
        assert list(ns.podgroups()) == [f"pg-hidden-0-{pod['metadata']['uid']}"]
        assert ns.events("hidden-0") == [("Warning", PODGROUPER_WARNING, notice)]
    finally:
        rbac.delete_cluster_role_binding(role)
        rbac.delete_cluster_role(role)


def test_a_pass_takes_at_most_max_pods_and_leaves_the_rest_for_the_next(kube_api: Any, ns: Namespace) -> None:
    """Issue 35: a burst is grouped over bounded passes, so its first pods reach the cycles early."""
    for index in range(5):
        ns.pod(f"p{index}")
    grouper = PodGroupController(kube_api, max_pods=2)
    events = EventWriter(kube_api)
    with cache_of(kube_api, ns.name) as cache:
        see_pods(cache, 5)
        passes = [grouper.group(cache, events) for _ in range(4)]
    assert [sorted(p.annotated) for p in passes] == [
        [f"{ns.name}/p0", f"{ns.name}/p1"],
        [f"{ns.name}/p2", f"{ns.name}/p3"],
        [f"{ns.name}/p4"],
        [],
    ]
    assert [p.left > 0 for p in passes] == [True, True, False, False]
    assert len(ns.podgroups()) == 5


def test_pods_never_planned_go_before_a_pod_whose_plan_keeps_failing(kube_api: Any, ns: Namespace) -> None:
    ns.pod("a-orphan", owners=[owner("batch/v1", "Job", "no-such-job", "0000-gone")])
    grouper = PodGroupController(kube_api, max_pods=1)
    events = EventWriter(kube_api)
    with cache_of(kube_api, ns.name) as cache:
        see_pods(cache, 1)
        assert [pod for pod, _ in grouper.group(cache, events).failed] == [f"{ns.name}/a-orphan"]
        ns.pod("b-new")
        see_pods(cache, 2)
        first = grouper.group(cache, events)
        assert (first.annotated, first.failed, first.left) == ([f"{ns.name}/b-new"], [], 1)
        again = grouper.group(cache, events)  # then the failing one is tried again
        assert [pod for pod, _ in again.failed] == [f"{ns.name}/a-orphan"]


def test_namespaces_take_turns_so_a_burst_in_one_does_not_hold_up_another() -> None:
    burst = [("burst", f"p{index:05d}") for index in range(1000)]
    order = controller_module._in_turns([*burst, ("team-b", "late"), ("team-c", "later")])
    assert order[:4] == [("burst", "p00000"), ("team-b", "late"), ("team-c", "later"), ("burst", "p00001")]
