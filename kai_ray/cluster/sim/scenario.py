"""Loads a conformance scenario (shared/conformance/FORMAT.md) into cluster objects.

The scenario format writes every KAI harness default out, so this loader only
converts units and names: queue memory from megabytes to bytes, minutes and
"ago" values into absolute seconds around a fixed scenario clock.  A task's pod
(anti-)affinity is the pod's own field, so it is read by the conversion every pod
goes through (`convert.constraints`), in the job's namespace.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args

import yaml

from kai_ray.api import Pod
from kai_ray.api._base import ObjectMeta
from kai_ray.api.config import DEFAULT_PLUGINS, PlacementStrategy, PluginSpec, SchedulerConfig
from kai_ray.api.core import Affinity, PodSpec
from kai_ray.convert.common import Invalid
from kai_ray.convert.constraints import pod_affinity
from kai_ray.convert.pods import extended_requests
from kai_ray.model.objects import (
    AffinityRequirement,
    ClusterState,
    JobSpec,
    NodeSelectorTerm,
    NodeSelectorTerms,
    NodeSpec,
    PodAffinitySpec,
    PodSetSpec,
    QueueSpec,
    ResourceQuota,
    SubGroupSetSpec,
    TaskSpec,
    TaskStatus,
    TopologyConstraintSpec,
    TopologySpec,
)

SCENARIO_NOW = 0.0
"""The scenario clock: all ages are measured back from here."""

MEGABYTE = 1_000_000


@dataclass
class Scenario:
    """A loaded scenario: the first cluster state, the config and the cycle plan."""

    name: str
    state: ClusterState
    config: SchedulerConfig
    mode: str
    cycles: int
    deleting_jobs: frozenset[str]


class ScenarioError(ValueError):
    """The file is not a scenario this loader understands."""


def load_scenario(path: Path) -> Scenario:
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ScenarioError(f"{path}: not valid YAML: {exc}") from exc
    if not isinstance(raw, dict) or raw.get("schemaVersion") != 1:
        raise ScenarioError(f"{path}: not a schemaVersion 1 conformance scenario")
    try:
        return _scenario(raw)
    except (KeyError, TypeError, ValueError) as exc:
        raise ScenarioError(f"{path}: malformed scenario: {exc!r}") from exc


def is_scenario_file(path: Path) -> bool:
    """A scenario has a top-level `schemaVersion` key; Kubernetes manifests never do."""
    if path.suffix not in (".yaml", ".yml") or not path.is_file():
        return False
    return re.search(r"^schemaVersion:", path.read_text(), flags=re.MULTILINE) is not None


def _scenario(raw: dict[str, Any]) -> Scenario:
    cfg = raw["config"]
    jobs = [_job(j) for j in raw["jobs"]]
    state = ClusterState(
        nodes=[_node(n) for n in raw["nodes"]],
        queues=[_queue(q) for q in raw["queues"]],
        jobs=jobs,
        now=SCENARIO_NOW,
        topologies=[
            TopologySpec(str(t["name"]), tuple(str(v) for v in t["levels"]))
            for t in raw.get("topologies") or []
        ],
    )
    return Scenario(
        name=str(raw["name"]),
        state=state,
        config=_config(cfg),
        mode=str(cfg["mode"]),
        cycles=int(cfg["cyclesUntilMatch"]) + int(cfg["cyclesAfterMatch"]),
        deleting_jobs=frozenset(j["name"] for j in raw["jobs"] if j.get("deleting")),
    )


def _config(cfg: dict[str, Any]) -> SchedulerConfig:
    """The scheduler config a scenario's `config` block describes.

    `placement` becomes the `nodeplacement` plugin's arguments (only for the
    default plugin list: an explicit list carries its own arguments), and
    `k8sPredicates: false` drops the `predicates` plugin, because the engine
    reads both from the plugin list and nowhere else.
    """
    strategies = get_args(PlacementStrategy)
    placement = {kind: str(cfg["placement"][kind]) for kind in ("gpu", "cpu")}
    for kind, strategy in placement.items():
        if strategy not in strategies:
            raise ValueError(
                f"placement.{kind}: unknown strategy {strategy!r} (known: {', '.join(strategies)})"
            )
    plugins_raw = cfg["plugins"]
    if plugins_raw == "default":
        plugins = [
            PluginSpec(name=name, arguments=placement) if name == "nodeplacement" else PluginSpec(name=name)
            for name in DEFAULT_PLUGINS
        ]
    else:
        plugins = [
            PluginSpec(name=p["name"], arguments={k: str(v) for k, v in (p.get("arguments") or {}).items()})
            for p in plugins_raw
        ]
    if not cfg["k8sPredicates"]:
        plugins = [p for p in plugins if p.name != "predicates"]
    return SchedulerConfig(
        actions=tuple(cfg["actions"]),
        plugins=tuple(plugins),
        default_staleness_grace_seconds=float(cfg["staleGangGracePeriodSeconds"]),
        max_consolidation_preemptees=int(cfg["maxConsolidationPreemptees"]),
        allow_consolidating_reclaim=bool(cfg["allowConsolidatingReclaim"]),
    )


def _node(raw: dict[str, Any]) -> NodeSpec:
    return NodeSpec(
        name=raw["name"],
        cpu_millis=float(raw["cpuMillis"]),
        memory=float(raw["memory"]),
        gpus=int(raw["gpus"]),
        gpu_memory_mib=int(raw["gpuMemoryMiB"]) // 100 * 100,
        max_pods=int(raw["maxPods"]),
        gpu_memory_synced=bool(raw["gpuMemorySynced"]),
        labels={str(k): str(v) for k, v in raw["labels"].items()},
        extended={str(k): float(v) for k, v in (raw.get("extendedResources") or {}).items()},
    )


def _quota(raw: dict[str, Any], scale: float = 1.0) -> ResourceQuota:
    def scaled(value: float) -> float:
        return float(value) if value == -1 else float(value) * scale

    return ResourceQuota(scaled(raw["quota"]), scaled(raw["limit"]), float(raw["overQuotaWeight"]))


def _queue(raw: dict[str, Any]) -> QueueSpec:
    res = raw["resources"]
    return QueueSpec(
        name=raw["name"],
        parent=raw["parent"],
        priority=int(raw["priority"]),
        created=SCENARIO_NOW + 60.0 * float(raw["createdMinute"]),
        gpu=_quota(res["gpu"]),
        cpu=_quota(res["cpu"]),
        memory=_quota(res["memory"], MEGABYTE),
        preempt_min_runtime=_optional_float(raw.get("preemptMinRuntimeSeconds")),
        reclaim_min_runtime=_optional_float(raw.get("reclaimMinRuntimeSeconds")),
        node_pool=_node_pool(raw),
    )


def _node_pool(raw: dict[str, Any]) -> str:
    """A queue's or job's optional `nodePool` (kai-ray's addition to the format; absent = unlabelled)."""
    value = raw.get("nodePool") or ""
    if not isinstance(value, str):
        raise ValueError(f"{raw.get('name')!r}: nodePool must be a string, got {value!r}")
    return value


def _optional_float(value: Any) -> float | None:
    return None if value is None else float(value)


def _ago(minutes_or_seconds: Any, unit: float) -> float | None:
    if minutes_or_seconds is None:
        return None
    return SCENARIO_NOW - unit * float(minutes_or_seconds)


def _subgroups(raw: dict[str, Any], topology: TopologyConstraintSpec | None = None) -> SubGroupSetSpec:
    """`topology`: the job-level constraint, which the format writes on the job, not on the root entry."""
    return SubGroupSetSpec(
        name=str(raw.get("name") or ""),
        min_subgroups=raw.get("minSubGroups"),
        subgroup_sets=tuple(
            _subgroups(s, _constraint(s.get("topology"))) for s in raw.get("subGroupSets") or []
        ),
        pod_sets=tuple(
            PodSetSpec(p["name"], int(p["minAvailable"]), _constraint(p.get("topology")))
            for p in raw.get("podSets") or []
        ),
        topology=topology or _constraint(raw.get("topology")),
    )


def _constraint(raw: dict[str, Any] | None) -> TopologyConstraintSpec | None:
    if not raw:
        return None
    return TopologyConstraintSpec(
        topology=str(raw["name"]),
        required_level=None if raw.get("required") is None else str(raw["required"]),
        preferred_level=None if raw.get("preferred") is None else str(raw["preferred"]),
    )


def _job(raw: dict[str, Any]) -> JobSpec:
    job_constraint = _constraint(raw.get("topology"))
    if "subGroups" in raw:
        tree = _subgroups(raw["subGroups"], job_constraint)
    else:
        tree = SubGroupSetSpec(
            pod_sets=(PodSetSpec("default", int(raw.get("minMember", len(raw["tasks"])))),),
            topology=job_constraint,
        )
    last_start = _ago(raw.get("startedMinutesAgo"), 60.0)
    return JobSpec(
        name=raw["name"],
        namespace=raw.get("namespace") or "",
        queue=raw["queue"],
        priority=int(raw["priority"]),
        preemptible=bool(raw["preemptible"]),
        created=SCENARIO_NOW - 60.0 * float(raw["ageMinutes"]),
        last_start=last_start,
        subgroups=tree,
        preemption_delay=_optional_float(raw.get("preemptionDelaySeconds")),
        stale_since=_ago(raw.get("staleForSeconds"), 1.0),
        staleness_grace=_optional_float(raw.get("stalenessGracePeriodSeconds")),
        deleting=bool(raw.get("deleting", False)),
        tasks=[_task(t, raw.get("namespace") or "") for t in raw["tasks"]],
        node_pool=_node_pool(raw),
    )


def _task(raw: dict[str, Any], namespace: str) -> TaskSpec:
    labels = {str(k): str(v) for k, v in (raw.get("labels") or {}).items()}
    requests = {str(k): float(v) for k, v in (raw.get("extendedResources") or {}).items()}
    return TaskSpec(
        name=raw["name"],
        status=TaskStatus(raw["status"]),
        node=raw.get("node"),
        cpu_millis=float(raw["cpuMillis"]),
        memory=float(raw["memory"]),
        gpu=float(raw["gpu"]),
        gpu_devices=int(raw.get("gpuDevices", 1)),
        gpu_memory_mib=int(raw["gpuMemoryMiB"]),
        gpu_groups=tuple(str(g) for g in raw["gpuGroups"]),
        subgroup=str(raw.get("subGroup", "default")),
        node_affinity=_node_affinity(raw.get("nodeAffinity") or []),
        task_priority=raw.get("taskPriority"),
        labels=labels,
        pod_affinity=_pod_affinity(raw, namespace, labels),
        extended=extended_requests(requests),
    )


_POD_AFFINITY_KEYS = ("podAffinity", "podAntiAffinity")


def _pod_affinity(raw: dict[str, Any], namespace: str, labels: dict[str, str]) -> PodAffinitySpec | None:
    written = {key: raw[key] for key in _POD_AFFINITY_KEYS if raw.get(key)}
    if not written:
        return None
    meta = ObjectMeta(name=str(raw["name"]), namespace=namespace, labels=labels)
    pod = Pod(metadata=meta, spec=PodSpec(affinity=Affinity.model_validate(written)))
    try:
        return pod_affinity(pod, {})
    except Invalid as error:
        raise ValueError(f"task {raw['name']!r}: {error}") from None


def _node_affinity(expressions: list[dict[str, Any]]) -> NodeSelectorTerms:
    """The format's `nodeAffinity` is one term's expressions (ANDed)."""
    if not expressions:
        return ()
    requirements = tuple(
        AffinityRequirement(t["key"], t["operator"], tuple(str(v) for v in t["values"])) for t in expressions
    )
    return (NodeSelectorTerm(expressions=requirements),)
