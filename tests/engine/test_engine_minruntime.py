"""Minimum guaranteed runtime and preemption delay (spec §11.9, §15, worked example 8)."""

from __future__ import annotations

import pytest
from builders import cluster, config, open_session, run_cycle

from kai_ray.api.config import PluginSpec
from kai_ray.engine.jobs import Job
from kai_ray.engine.minruntime import MinRuntime, parse_duration
from kai_ray.model.objects import ClusterState, TaskStatus

pytestmark = pytest.mark.unit

RUNNING = TaskStatus.RUNNING


def example_8_tree() -> ClusterState:
    """A → B (reclaim 600 s) → {C → {leaf1 (0 s), leaf2 (180 s)}, D (60 s) → leaf3}; E → leafX elsewhere."""
    return (
        cluster(now=1000.0)
        .node("n", gpus=8)
        .queue("A")
        .queue("B", parent="A", reclaim_min_runtime=600)
        .queue("C", parent="B")
        .queue("leaf1", parent="C", reclaim_min_runtime=0)
        .queue("leaf2", parent="C", reclaim_min_runtime=180)
        .queue("D", parent="B", reclaim_min_runtime=60)
        .queue("leaf3", parent="D")
        .queue("E")
        .queue("leafX", parent="E")
        .job("in1", queue="leaf1", gpus=1)
        .job("in2", queue="leaf2", gpus=1, status=RUNNING, node="n", started=900.0)
        .job("in3", queue="leaf3", gpus=1)
        .job("inX", queue="leafX", gpus=1)
        .build()
    )


def min_runtime(state: ClusterState, method: str = "lca") -> tuple[MinRuntime, dict[str, Job]]:
    cfg = config()
    plugins = tuple(
        PluginSpec(name="minruntime", arguments={"reclaimResolveMethod": method})
        if p.name == "minruntime"
        else p
        for p in cfg.plugins
    )
    session = open_session(state, cfg.model_copy(update={"plugins": plugins}))
    return MinRuntime(session), {job.name: job for job in session.jobs}


@pytest.mark.parametrize(
    ("reclaimer", "victim", "seconds"),
    [("in1", "in3", 60.0), ("in1", "in2", 180.0), ("in3", "in1", 600.0), ("inX", "in2", 0.0)],
)
def test_example_8_lca_resolution(reclaimer: str, victim: str, seconds: float) -> None:
    runtime, jobs = min_runtime(example_8_tree())
    assert runtime.reclaim_runtime(jobs[reclaimer], jobs[victim]) == seconds


def test_queue_method_walks_up_from_the_victim_leaf() -> None:
    runtime, jobs = min_runtime(example_8_tree(), method="queue")
    assert runtime.reclaim_runtime(jobs["in1"], jobs["in3"]) == 60.0


def test_victim_started_100s_ago_is_protected_from_leaf1_for_180s() -> None:
    runtime, jobs = min_runtime(example_8_tree())
    victim = jobs["in2"]
    assert not runtime.is_candidate(victim, runtime.reclaim_runtime(jobs["in1"], victim))
    assert runtime.is_candidate(victim, 60.0)


def test_protected_elastic_victim_may_only_lose_pods_above_its_minimum() -> None:
    state = (
        cluster(now=1000.0)
        .node("n", gpus=8)
        .queue("q")
        .job("elastic", queue="q", gpus=1, pods=4, min_member=2, status=RUNNING, node="n", started=900.0)
        .build()
    )
    runtime, jobs = min_runtime(state)
    victim = jobs["elastic"]
    assert runtime.is_candidate(victim, 180.0)
    tasks = sorted(victim.tasks, key=lambda t: t.name)
    assert runtime.allows(tasks[:2], {victim: 180.0})
    assert not runtime.allows(tasks[:3], {victim: 180.0})
    assert runtime.allows(tasks[:3], {victim: 60.0})


@pytest.mark.parametrize(
    ("text", "seconds"), [("90s", 90.0), ("5m", 300.0), ("1h30m", 5400.0), ("-5s", 0.0), ("x", 0.0)]
)
def test_durations_parse_like_kai(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


def preempt_scenario(started: float, delay: float | None = None) -> ClusterState:
    return (
        cluster(now=1000.0)
        .node("n", gpus=1)
        .queue("q", gpu_quota=1, preempt_min_runtime=300)
        .job("low", queue="q", gpus=1, priority=50, status=RUNNING, node="n", started=started)
        .job("high", queue="q", gpus=1, priority=100, preemptible=True, created=990.0, preemption_delay=delay)
        .build()
    )


def test_preempt_respects_the_victims_min_runtime() -> None:
    protected = run_cycle(preempt_scenario(started=900.0), config(actions=("preempt",)))
    unprotected = run_cycle(preempt_scenario(started=100.0), config(actions=("preempt",)))
    assert protected.evictions == []
    assert [e.task for e in unprotected.evictions] == ["low-0"]


def test_preemption_delay_holds_the_preemptor_back_until_it_elapses() -> None:
    waiting = run_cycle(preempt_scenario(started=100.0, delay=60.0), config(actions=("preempt",)))
    elapsed = run_cycle(preempt_scenario(started=100.0, delay=5.0), config(actions=("preempt",)))
    assert waiting.evictions == []
    assert "preemption delay" in waiting.pending_reasons["high"].message
    assert [e.task for e in elapsed.evictions] == ["low-0"]
