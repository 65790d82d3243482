"""Conversion rules from KAI manifests to the engine's plain objects (units, defaults, statuses)."""

from __future__ import annotations

from typing import Any

import pytest
from kai_ray_operators.identity import stable_uid
from manifest_builders import base, convert, node, pod, podgroup, queue

from kai_ray.model.objects import (
    AffinityRequirement,
    JobSpec,
    NodeSelectorTerm,
    PodSetSpec,
    ResourceQuota,
    SubGroupSetSpec,
    Taint,
    TaskSpec,
    TaskStatus,
    Toleration,
)

pytestmark = pytest.mark.unit


def only_job(*objects: dict[str, object]) -> JobSpec:
    state, problems = base(*objects)
    assert problems == []
    (job,) = state.jobs
    return job


def only_task(*objects: dict[str, object]) -> TaskSpec:
    (task,) = only_job(*objects).tasks
    return task


def test_queue_units_and_kai_defaults() -> None:
    resources = {"cpu": {"quota": 4000}, "memory": {"quota": 2000, "limit": -1, "overQuotaWeight": 2}}
    spec = {"resources": resources, "priority": 7, "preemptMinRuntime": "1m", "reclaimMinRuntime": "1h30m"}
    state, problems = convert({**queue("q"), "spec": spec})
    assert problems == []
    (q,) = state.queues
    assert (q.parent, q.priority, q.preempt_min_runtime, q.reclaim_min_runtime) == (None, 7, 60, 5400)
    assert q.gpu == ResourceQuota(0, 0, 0)
    assert q.cpu == ResourceQuota(4000, 0, 0)
    assert q.memory == ResourceQuota(2e9, -1, 2)


def test_creation_time_is_the_timestamp_or_the_order_of_appearance() -> None:
    stamped = queue("late")
    stamped["metadata"]["creationTimestamp"] = "2024-01-01T00:00:00Z"
    state, _ = convert(queue("first"), queue("second"), stamped)
    assert [q.created for q in state.queues] == [0, 1, 1704067200]
    assert state.now == 1704067200


def test_requests_add_containers_and_sidecars_peak_with_init_and_add_overhead() -> None:
    def container(cpu: str, **extra: str) -> dict[str, object]:
        return {"name": cpu, "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}, **extra}

    spec: dict[str, Any] = {
        "containers": [container("1"), container("500m")],
        "initContainers": [container("250m", restartPolicy="Always"), container("3")],
        "overhead": {"cpu": "100m"},
    }
    task = only_task(pod("p", **spec))
    assert task.cpu_millis == pytest.approx(3250 + 100)
    assert task.memory == 3 * 2**30


def test_limits_stand_in_for_missing_requests() -> None:
    task = only_task(pod("p", gpus=2))
    assert (task.gpu, task.cpu_millis, task.memory) == (2, 1000, 2**30)


@pytest.mark.parametrize(
    ("annotations", "gpu", "devices", "memory"),
    [
        ({"gpu-fraction": "0.25"}, 0.25, 1, 0),
        ({"gpu-fraction": "0.5", "gpu-fraction-num-devices": "2"}, 0.5, 2, 0),
        ({"gpu-memory": "20000"}, 0, 1, 20000),
        ({"gpu-memory": "1024", "gpu-fraction-num-devices": "3"}, 0, 3, 1024),
        ({"gpu-fraction": "0.5", "gpu-memory": "1024"}, 0.5, 1, 0),
    ],
)
def test_gpu_sharing_annotations(annotations: dict[str, str], gpu: float, devices: int, memory: int) -> None:
    task = only_task(pod("p", annotations=annotations))
    assert (task.gpu, task.gpu_devices, task.gpu_memory_mib, task.is_shared_gpu) == (
        gpu,
        devices,
        memory,
        True,
    )


def test_placement_constraints_are_carried() -> None:
    expression = {"key": "zone", "operator": "In", "values": ["a", "b"]}
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [expression]}]
            }
        }
    }
    toleration = {"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}
    labels = {"kai.scheduler/queue": "team-a", "kai.scheduler/task-priority": "3"}
    task = only_task(
        pod("p", labels=labels, affinity=affinity, nodeSelector={"pool": "x"}, tolerations=[toleration])
    )
    assert task.node_affinity == (
        NodeSelectorTerm(expressions=(AffinityRequirement("zone", "In", ("a", "b")),)),
    )
    assert task.node_selector == {"pool": "x"}
    assert task.tolerations == (Toleration("gpu", "Exists", "", "NoSchedule"),)
    assert task.task_priority == 3


def with_status(phase: str, node_name: str = "", **meta: str) -> dict[str, object]:
    built = pod("p", nodeName=node_name) if node_name else pod("p")
    built["status"] = {"phase": phase}
    built["metadata"].update(meta)
    return built


@pytest.mark.parametrize(
    ("built", "status", "node_name"),
    [
        (with_status("Pending"), TaskStatus.PENDING, None),
        (with_status("Running", "n1"), TaskStatus.RUNNING, "n1"),
        (with_status("Pending", "n1"), TaskStatus.BOUND, "n1"),
        (with_status("Succeeded", "n1"), TaskStatus.SUCCEEDED, "n1"),
        (with_status("Failed", "n1"), TaskStatus.FAILED, "n1"),
        (with_status("Running", "n1", deletionTimestamp="2024-01-01T00:00:00Z"), TaskStatus.RELEASING, "n1"),
        ({**pod("p", schedulingGates=[{"name": "wait"}])}, TaskStatus.GATED, None),
    ],
)
def test_pod_statuses(built: dict[str, object], status: TaskStatus, node_name: str | None) -> None:
    task = only_task(built)
    assert (task.status, task.node) == (status, node_name)


def test_a_long_deleted_running_pod_is_stuck_in_releasing() -> None:
    deleted = with_status("Running", "n1", deletionTimestamp="2024-01-01T00:00:00Z")
    later = queue("later")
    later["metadata"]["creationTimestamp"] = "2024-01-01T00:02:01Z"
    assert only_task(deleted, later).status == TaskStatus.STUCK_IN_RELEASING


def bind_request(phase: str = "", selected: str = "n1") -> dict[str, object]:
    return {
        "apiVersion": "scheduling.run.ai/v1alpha2",
        "kind": "BindRequest",
        "metadata": {"name": "p", "namespace": "team-a"},
        "spec": {"podName": "p", "selectedNode": selected},
        "status": {"phase": phase},
    }


@pytest.mark.parametrize(
    ("request_", "status", "node_name"),
    [
        (bind_request(), TaskStatus.BINDING, "n1"),
        (bind_request("Failed"), TaskStatus.PENDING, None),
        (bind_request(selected="gone"), TaskStatus.PENDING, None),
    ],
)
def test_bind_requests_make_pending_pods_binding(
    request_: dict[str, object], status: TaskStatus, node_name: str | None
) -> None:
    task = only_task(pod("p"), request_)
    assert (task.status, task.node) == (status, node_name)


def priority_class(name: str, value: int, global_default: bool = False) -> dict[str, object]:
    meta = {"name": name}
    kind = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": meta}
    return {**kind, "value": value, "globalDefault": global_default}


@pytest.mark.parametrize(
    ("objects", "priority", "preemptible"),
    [
        ([podgroup("pg", priorityClassName="inference")], 125, False),
        ([podgroup("pg", priorityClassName="build-preemptible")], 75, True),
        ([podgroup("pg"), priority_class("everyday", 200, global_default=True)], 200, False),
        ([podgroup("pg", priorityClassName="train", preemptibility="non-preemptible")], 50, False),
        ([podgroup("pg", priorityClassName="inference", preemptibility="preemptible")], 125, True),
        ([podgroup("pg", priorityClassName="mine"), priority_class("mine", 99)], 99, True),
    ],
)
def test_podgroup_priority_and_preemptibility(
    objects: list[dict[str, object]], priority: int, preemptible: bool
) -> None:
    job = only_job(*objects)
    assert (job.priority, job.preemptible) == (priority, preemptible)


@pytest.mark.parametrize(("default", "priority"), [(None, 50), (150, 150)])
def test_a_missing_priority_class_gets_the_default_priority_and_a_warning(
    default: int | None, priority: int
) -> None:
    """KAI schedules it at the globalDefault class's value, else 50, and says nothing; kai-ray
    does the same and says so on the PodGroup."""
    extra = [] if default is None else [priority_class("everyday", default, global_default=True)]
    state, problems = base(podgroup("pg", priorityClassName="nope"), *extra)
    (job,) = state.jobs
    assert (job.priority, job.preemptible) == (priority, priority < 100)
    kind = "preemptible" if priority < 100 else "non-preemptible"
    assert problems == [
        f"test.yaml: PodGroup/team-a/pg: spec.priorityClassName: PriorityClass 'nope' does not exist; "
        f"scheduled at the default priority {priority} ({kind})"
    ]


@pytest.mark.parametrize(
    ("labels", "spec", "priority", "preemptible"),
    [
        ({}, {}, 50, True),
        ({}, {"priorityClassName": "inference"}, 125, False),
        ({"priorityClassName": "build"}, {"priorityClassName": "inference"}, 100, False),
        ({}, {"priorityClassName": "unknown"}, 50, True),
        ({"kai.scheduler/preemptibility": "non-preemptible"}, {}, 50, False),
    ],
)
def test_a_pod_without_a_podgroup_gets_its_own(
    labels: dict[str, str], spec: dict[str, Any], priority: int, preemptible: bool
) -> None:
    job = only_job(pod("solo", labels={"kai.scheduler/queue": "team-a", **labels}, **spec))
    # KAI's name, with the stable uid a manifest without one is given.
    expected = f"pg-solo-{stable_uid('v1', 'Pod', 'team-a', 'solo')}"
    assert (job.name, job.namespace, job.queue) == (expected, "team-a", "team-a")
    assert (job.priority, job.preemptible) == (priority, preemptible)
    assert job.subgroups.all_pod_sets() == [PodSetSpec("default", 1)]


def test_podgroup_gang_size_and_timers() -> None:
    group = podgroup("pg", minMember=0, preemptionDelay="30s", stalenessGracePeriod="-1s")
    group["metadata"]["annotations"] = {"kai.scheduler/last-start-timestamp": "2024-01-01T00:00:00Z"}
    job = only_job(group)
    assert job.subgroups == SubGroupSetSpec(pod_sets=(PodSetSpec("default", 0),))
    assert (job.preemption_delay, job.staleness_grace, job.last_start) == (30, -1, 1704067200)


def test_subgroups_become_a_tree_and_pods_join_their_leaf() -> None:
    subgroups = [
        {"name": "decode", "minSubGroup": 1},
        {"name": "prefill", "parent": "decode", "minMember": 2},
        {"name": "extra", "parent": "decode"},
        {"name": "router", "minMember": 1},
    ]
    labels = {"kai.scheduler/subgroup-name": "prefill"}
    job = only_job(podgroup("pg", subGroups=subgroups), pod("p", group="pg", labels=labels))
    assert job.subgroups == SubGroupSetSpec(
        subgroup_sets=(
            SubGroupSetSpec("decode", 1, pod_sets=(PodSetSpec("prefill", 2), PodSetSpec("extra", 0))),
        ),
        pod_sets=(PodSetSpec("router", 1),),
    )
    assert job.tasks[0].subgroup == "prefill"


def test_node_details() -> None:
    details = {
        "status": {
            "capacity": {"cpu": "8", "pods": "20", "nvidia.com/gpu": "2"},
            "conditions": [{"type": "Ready", "status": "False"}],
        },
        "spec": {"unschedulable": True, "taints": [{"key": "gpu", "value": "yes", "effect": "NoExecute"}]},
    }
    in_bytes = {**node("b", labels={"nvidia.com/gpu.memory": str(40 * 2**30 + 12345)}), **details}
    state, problems = convert(in_bytes, node("none", labels={}))
    assert problems == []
    first, second = state.nodes
    assert (first.gpu_memory_mib, first.gpu_memory_synced, first.cpu_millis, first.gpus, first.max_pods) == (
        40900,
        True,
        8000,
        2,
        20,
    )
    assert (first.ready, first.unschedulable, first.taints) == (
        False,
        True,
        (Taint("gpu", "yes", "NoExecute"),),
    )
    assert (second.gpu_memory_mib, second.gpu_memory_synced, second.ready) == (100, False, True)


def test_pods_of_other_schedulers_are_left_out() -> None:
    other = pod("p", schedulerName="default-scheduler")
    state, problems = base(other)
    assert (state.jobs, problems) == ([], [])


def test_namespaces_and_topologies_are_accepted() -> None:
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}}
    levels = {"levels": [{"nodeLabel": "rack"}]}
    topology = {
        "apiVersion": "kai.scheduler/v1alpha1",
        "kind": "Topology",
        "metadata": {"name": "t"},
        "spec": levels,
    }
    _, problems = base(namespace, topology)
    assert problems == []
