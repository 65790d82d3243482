"""The conformance scenario loader (shared/conformance/FORMAT.md): units, defaults, plugin lists."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from kai_ray.api.config import DEFAULT_PLUGINS
from kai_ray.cluster.sim.scenario import (
    SCENARIO_NOW,
    ScenarioError,
    is_scenario_file,
    load_scenario,
)
from kai_ray.model.objects import UNLIMITED, LabelSelector, PodAffinitySpec, PodAffinityTerm, TaskStatus

pytestmark = pytest.mark.unit

CONFORMANCE = Path("/work/shared/conformance/scenarios")

BASE: dict[str, Any] = {
    "schemaVersion": 1,
    "name": "loader test",
    "source": {"repo": "r", "commit": "c", "file": "f", "test": "t", "line": 1},
    "config": {
        "actions": ["allocate"],
        "mode": "integration",
        "cyclesUntilMatch": 2,
        "cyclesAfterMatch": 3,
        "staleGangGracePeriodSeconds": 60,
        "placement": {"gpu": "binpack", "cpu": "spread"},
        "plugins": "default",
        "k8sPredicates": True,
        "maxConsolidationPreemptees": -1,
        "allowConsolidatingReclaim": True,
    },
    "nodes": [
        {
            "name": "node0",
            "gpus": 4,
            "gpuMemoryMiB": 40_960,
            "cpuMillis": 20_000_000,
            "memory": 20_000_000_000,
            "maxPods": 110,
            "gpuMemorySynced": True,
            "labels": {"kai.scheduler/type": "node0"},
        }
    ],
    "queues": [
        {
            "name": "default",
            "parent": None,
            "priority": 100,
            "createdMinute": 0,
            "resources": {
                "gpu": {"quota": -1, "limit": -1, "overQuotaWeight": -1},
                "cpu": {"quota": -1, "limit": -1, "overQuotaWeight": 1},
                "memory": {"quota": -1, "limit": -1, "overQuotaWeight": 1},
            },
        },
        {
            "name": "queue0",
            "parent": "default",
            "priority": 150,
            "createdMinute": 2,
            "resources": {
                "gpu": {"quota": 2.5, "limit": 4, "overQuotaWeight": 0},
                "cpu": {"quota": 3000, "limit": -1, "overQuotaWeight": 1},
                "memory": {"quota": 1000, "limit": 2500, "overQuotaWeight": 2},
            },
            "reclaimMinRuntimeSeconds": 30,
        },
    ],
    "jobs": [
        {
            "name": "job0",
            "namespace": "",
            "queue": "queue0",
            "priority": 50,
            "preemptible": True,
            "ageMinutes": 3,
            "startedMinutesAgo": 1,
            "minMember": 2,
            "staleForSeconds": 61,
            "stalenessGracePeriodSeconds": 30,
            "preemptionDelaySeconds": 600,
            "tasks": [
                {
                    "name": "job0-0",
                    "status": "Running",
                    "node": "node0",
                    "cpuMillis": 1000,
                    "memory": 1_000_000_000,
                    "gpu": 0.5,
                    "gpuMemoryMiB": 0,
                    "gpuGroups": ["0"],
                },
                {
                    "name": "job0-1",
                    "status": "Pending",
                    "node": None,
                    "cpuMillis": 1000,
                    "memory": 1_000_000_000,
                    "gpu": 1,
                    "gpuMemoryMiB": 0,
                    "gpuGroups": [],
                    "nodeAffinity": [{"key": "kai.scheduler/type", "operator": "In", "values": ["node0"]}],
                    "taskPriority": 10,
                },
            ],
        },
        {
            "name": "job1",
            "namespace": "ml",
            "queue": "queue0",
            "priority": 100,
            "preemptible": False,
            "ageMinutes": 1,
            "startedMinutesAgo": None,
            "deleting": True,
            "subGroups": {
                "name": "",
                "minSubGroups": 1,
                "subGroupSets": [
                    {"name": "set-a", "minSubGroups": None, "podSets": [{"name": "a1", "minAvailable": 1}]}
                ],
                "podSets": [{"name": "b", "minAvailable": 0}],
            },
            "tasks": [
                {
                    "name": "job1-0",
                    "status": "Releasing",
                    "node": "node0",
                    "cpuMillis": 0,
                    "memory": 0,
                    "gpu": 0.25,
                    "gpuDevices": 2,
                    "gpuMemoryMiB": 0,
                    "gpuGroups": ["x", "y"],
                    "subGroup": "a1",
                },
            ],
        },
    ],
    "expected": {},
}


def write(tmp_path: Path, scenario: dict[str, Any], name: str = "scenario.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(scenario, sort_keys=False))
    return path


def variant(**config_overrides: Any) -> dict[str, Any]:
    scenario = copy.deepcopy(BASE)
    scenario["config"].update(config_overrides)
    return scenario


def test_queue_units_memory_megabytes_become_bytes(tmp_path: Path) -> None:
    queues = {q.name: q for q in load_scenario(write(tmp_path, BASE)).state.queues}
    queue = queues["queue0"]
    assert queue.memory.quota == 1_000_000_000
    assert queue.memory.limit == 2_500_000_000
    assert queue.memory.over_quota_weight == 2
    assert queue.cpu.quota == 3000 and queue.cpu.limit == UNLIMITED
    assert queue.gpu.quota == 2.5 and queue.gpu.limit == 4 and queue.gpu.over_quota_weight == 0
    assert queue.parent == "default" and queue.priority == 150
    assert queue.reclaim_min_runtime == 30 and queue.preempt_min_runtime is None


def test_unlimited_stays_minus_one_not_minus_a_million(tmp_path: Path) -> None:
    top = {q.name: q for q in load_scenario(write(tmp_path, BASE)).state.queues}["default"]
    assert top.parent is None
    assert top.memory.quota == UNLIMITED and top.memory.limit == UNLIMITED
    assert top.gpu.over_quota_weight == -1


def test_ages_become_seconds_before_the_scenario_clock(tmp_path: Path) -> None:
    scenario = load_scenario(write(tmp_path, BASE))
    queues = {q.name: q for q in scenario.state.queues}
    jobs = {j.name: j for j in scenario.state.jobs}
    assert scenario.state.now == SCENARIO_NOW
    assert queues["queue0"].created == SCENARIO_NOW + 120
    assert jobs["job0"].created == SCENARIO_NOW - 180
    assert jobs["job0"].last_start == SCENARIO_NOW - 60
    assert jobs["job0"].stale_since == SCENARIO_NOW - 61
    assert jobs["job0"].staleness_grace == 30
    assert jobs["job0"].preemption_delay == 600
    assert jobs["job1"].created == SCENARIO_NOW - 60
    assert jobs["job1"].last_start is None and jobs["job1"].stale_since is None


def test_nodes_floor_gpu_memory_to_a_multiple_of_100(tmp_path: Path) -> None:
    (node,) = load_scenario(write(tmp_path, BASE)).state.nodes
    assert node.gpu_memory_mib == 40_900
    assert node.gpus == 4 and node.cpu_millis == 20_000_000 and node.memory == 20e9 and node.max_pods == 110
    assert node.labels == {"kai.scheduler/type": "node0"}


def test_jobs_tasks_and_subgroups(tmp_path: Path) -> None:
    scenario = load_scenario(write(tmp_path, BASE))
    jobs = {j.name: j for j in scenario.state.jobs}
    job0, job1 = jobs["job0"], jobs["job1"]
    assert [(p.name, p.min_available) for p in job0.subgroups.all_pod_sets()] == [("default", 2)]
    running, pending = job0.tasks
    assert running.status == TaskStatus.RUNNING and running.node == "node0" and running.gpu_groups == ("0",)
    assert running.is_shared_gpu and running.gpu == 0.5
    assert pending.node_affinity[0].expressions[0].values == ("node0",) and pending.task_priority == 10
    assert job1.key == "ml/job1" and job1.deleting and not job1.preemptible
    assert job1.subgroups.min_subgroups == 1
    assert [(p.name, p.min_available) for p in job1.subgroups.all_pod_sets()] == [("a1", 1), ("b", 0)]
    (shared,) = job1.tasks
    assert shared.gpu_devices == 2 and shared.gpu_groups == ("x", "y") and shared.subgroup == "a1"
    assert scenario.deleting_jobs == frozenset({"job1"})


def test_config_knobs_and_cycle_count(tmp_path: Path) -> None:
    scenario = load_scenario(write(tmp_path, BASE))
    assert scenario.name == "loader test"
    assert scenario.mode == "integration"
    assert scenario.cycles == 5
    cfg = scenario.config
    assert cfg.actions == ("allocate",)
    assert cfg.default_staleness_grace_seconds == 60
    assert cfg.max_consolidation_preemptees == -1
    assert cfg.plugin_arguments("nodeplacement") == {"gpu": "binpack", "cpu": "spread"}


def test_default_plugins_are_kais_list_with_placement_arguments(tmp_path: Path) -> None:
    cfg = load_scenario(write(tmp_path, BASE)).config
    assert [p.name for p in cfg.plugins] == list(DEFAULT_PLUGINS)
    assert cfg.plugin_arguments("nodeplacement") == {"gpu": "binpack", "cpu": "spread"}
    assert cfg.has_plugin("predicates")


def test_plugin_list_replaces_the_defaults(tmp_path: Path) -> None:
    plugins = [
        {"name": "proportion"},
        {"name": "gpuspread"},
        {"name": "nodeplacement", "arguments": {"gpu": "spread"}},
    ]
    cfg = load_scenario(write(tmp_path, variant(plugins=plugins))).config
    assert [p.name for p in cfg.plugins] == ["proportion", "gpuspread", "nodeplacement"]
    assert cfg.plugin_arguments("nodeplacement") == {"gpu": "spread"}
    assert not cfg.has_plugin("gpupack")


def test_k8s_predicates_false_removes_the_predicates_plugin(tmp_path: Path) -> None:
    cfg = load_scenario(write(tmp_path, variant(k8sPredicates=False))).config
    assert not cfg.has_plugin("predicates")
    assert [p.name for p in cfg.plugins] == [n for n in DEFAULT_PLUGINS if n != "predicates"]


def test_k8s_predicates_false_removes_predicates_from_a_list_too(tmp_path: Path) -> None:
    plugins = [{"name": "predicates"}, {"name": "proportion"}]
    cfg = load_scenario(write(tmp_path, variant(plugins=plugins, k8sPredicates=False))).config
    assert [p.name for p in cfg.plugins] == ["proportion"]


def test_not_a_scenario_is_a_scenario_error(tmp_path: Path) -> None:
    wrong_version = copy.deepcopy(BASE)
    wrong_version["schemaVersion"] = 2
    with pytest.raises(ScenarioError, match="schemaVersion"):
        load_scenario(write(tmp_path, wrong_version))
    missing = copy.deepcopy(BASE)
    del missing["nodes"]
    with pytest.raises(ScenarioError, match="malformed"):
        load_scenario(write(tmp_path, missing, "missing.yaml"))
    broken = tmp_path / "broken.yaml"
    broken.write_text("schemaVersion: 1\nnodes: [\n")
    with pytest.raises(ScenarioError, match="YAML"):
        load_scenario(broken)


def test_is_scenario_file(tmp_path: Path) -> None:
    assert is_scenario_file(write(tmp_path, BASE))
    other = tmp_path / "other.yaml"
    other.write_text("kind: Queue\n")
    assert not is_scenario_file(other)
    assert not is_scenario_file(tmp_path / "absent.yaml")


@pytest.mark.skipif(not CONFORMANCE.is_dir(), reason="shared conformance corpus not present")
def test_every_shared_scenario_loads() -> None:
    paths = sorted(CONFORMANCE.rglob("*.yaml"))
    assert paths
    for path in paths:
        scenario = load_scenario(path)
        assert scenario.state.nodes and scenario.state.queues, path


AFFINITY = CONFORMANCE / "affinity"
DATABASE = LabelSelector(match_labels=(("app", "database"),))


@pytest.mark.skipif(not AFFINITY.is_dir(), reason="shared conformance corpus not present")
@pytest.mark.parametrize(
    ("name", "others"),
    [
        ("pod-anti-affinity-scheduling.yaml", ["existing-database-0"]),
        (
            "pod-affinity-and-anti-affinity-scheduling-makes-job-stay-pending.yaml",
            ["existing-database-0", "existing-web-server-0"],
        ),
    ],
)
def test_an_affinity_scenarios_tasks_carry_labels_and_required_terms(name: str, others: list[str]) -> None:
    tasks = {task.name: task for job in load_scenario(AFFINITY / name).state.jobs for task in job.tasks}
    pending = tasks.pop("affinity-job-0")
    assert pending.labels == {"job-name": "affinity-job-0", "app": "database"}
    own = frozenset({""})  # the jobs' namespace is ''
    assert pending.pod_affinity == PodAffinitySpec(
        required=(PodAffinityTerm("topology.kubernetes.io/zone", DATABASE, own),),
        required_anti=(PodAffinityTerm("kai.scheduler/type", DATABASE, own),),
    )
    assert sorted(tasks) == others
    for other, task in tasks.items():
        assert task.labels == {"job-name": other, "app": "database"} and task.pod_affinity is None


def affinity_variant(**term: Any) -> dict[str, Any]:
    """BASE with job1 (namespace ml) in a pod anti-affinity term of job0's pending task."""
    scenario = copy.deepcopy(BASE)
    task = scenario["jobs"][0]["tasks"][1]
    selector = {"matchLabels": {"app": "x"}}
    rule = {"labelSelector": selector, "topologyKey": "kai.scheduler/type", **term}
    task.update(
        labels={"app": "x"}, podAntiAffinity={"requiredDuringSchedulingIgnoredDuringExecution": [rule]}
    )
    scenario["jobs"][1]["tasks"][0].update(
        labels={"app": "x"}, podAffinity={"requiredDuringSchedulingIgnoredDuringExecution": [rule]}
    )
    return scenario


def test_a_terms_namespaces_default_to_its_jobs_namespace(tmp_path: Path) -> None:
    job0, job1 = load_scenario(write(tmp_path, affinity_variant())).state.jobs
    assert job0.tasks[0].pod_affinity is None
    spec0, spec1 = job0.tasks[1].pod_affinity, job1.tasks[0].pod_affinity
    assert spec0 is not None and spec0.required_anti[0].namespaces == frozenset({""})
    assert spec1 is not None and spec1.required[0].namespaces == frozenset({"ml"})
    listed = load_scenario(write(tmp_path, affinity_variant(namespaces=["ml", "web"]))).state.jobs[0]
    spec = listed.tasks[1].pod_affinity
    assert spec is not None and spec.required_anti[0].namespaces == frozenset({"ml", "web"})


def test_a_bad_affinity_term_is_a_scenario_error_naming_the_task(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match=r"job0-1.*topologyKey: required"):
        load_scenario(write(tmp_path, affinity_variant(topologyKey="")))


def test_extended_resources_of_nodes_and_tasks(tmp_path: Path) -> None:
    scenario = copy.deepcopy(BASE)
    scenario["nodes"][0]["extendedResources"] = {"nvidia.com/mig-1g.10gb": 3, "nvidia.com/mig-2g.20gb": 0}
    scenario["jobs"][0]["tasks"][1]["extendedResources"] = {"nvidia.com/mig-1g.10gb": 1, "rdma/hca": 0}
    state = load_scenario(write(tmp_path, scenario)).state
    assert state.nodes[0].extended == {"nvidia.com/mig-1g.10gb": 3.0, "nvidia.com/mig-2g.20gb": 0.0}
    assert state.jobs[0].tasks[1].extended == (("nvidia.com/mig-1g.10gb", 1.0),)
    assert state.jobs[0].tasks[0].extended == () and state.jobs[0].tasks[0].labels == {}


@pytest.mark.skipif(not CONFORMANCE.is_dir(), reason="shared conformance corpus not present")
def test_a_mig_scenario_carries_its_profile_counts() -> None:
    state = load_scenario(CONFORMANCE / "mig" / "mig-job-requesting-unavailable-mig-device.yaml").state
    assert state.nodes[0].extended == {"nvidia.com/mig-1g.5gb": 1.0}
    (pending,) = [task for job in state.jobs for task in job.tasks if task.name == "pending_job-0"]
    assert pending.extended == (("nvidia.com/mig-1g.10gb", 1.0),) and pending.gpu == 0
