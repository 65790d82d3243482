"""The simulated cluster: applying a plan and the between-cycle rules of FORMAT.md ("Cycles")."""

from __future__ import annotations

import pytest
from builders import cluster, config
from manifest_builders import convert, node, pod, queue
from storage_builders import claim, claim_volume, storage_class

from kai_ray.cluster.sim.simulator import STARTED_AGO_SECONDS, NodeGpus, SimulatedCluster
from kai_ray.convert.volumes import selected_node_terms
from kai_ray.model.objects import ClusterState, JobSpec, TaskSpec, TaskStatus

pytestmark = pytest.mark.unit

S = TaskStatus


def task(state: ClusterState, job: str, index: int = 0) -> TaskSpec:
    return job_of(state, job).tasks[index]


def job_of(state: ClusterState, name: str) -> JobSpec:
    return next(j for j in state.jobs if j.name == name)


def lifecycle_state() -> ClusterState:
    return (
        cluster(now=1000.0)
        .node("n1", gpus=8, gpu_memory_mib=40_000)
        .queue("q")
        .job("binding", queue="q", gpus=0.5, status=S.BINDING, node="n1", gpu_groups=("g1",))
        .job("pipelined", queue="q", gpus=0.5, status=S.PIPELINED, node="n1", gpu_groups=("g2",))
        .job("evicted", queue="q", gpus=1, status=S.RELEASING, node="n1")
        .job("deleted", queue="q", gpus=1, status=S.RELEASING, node="n1", deleting=True)
        .job("running", queue="q", gpus=1, status=S.RUNNING, node="n1")
        .job("stuck", queue="q", gpus=1, status=S.STUCK_IN_RELEASING, node="n1")
        .job("hinted", queue="q", gpus=1, status=S.PENDING, node="n1")
        .job("failed", queue="q", gpus=1, status=S.FAILED, node="n1")
        .job("done", queue="q", gpus=1, status=S.SUCCEEDED, node="n1")
        .build()
    )


def test_binding_becomes_running_on_the_same_node_with_its_gpu_groups() -> None:
    sim = SimulatedCluster(lifecycle_state(), config())
    sim.advance()
    binding = task(sim.state, "binding")
    assert (binding.status, binding.node, binding.gpu_groups) == (S.RUNNING, "n1", ("g1",))


def test_pipelined_goes_back_to_pending_with_its_node_cleared() -> None:
    sim = SimulatedCluster(lifecycle_state(), config())
    sim.advance()
    pipelined = task(sim.state, "pipelined")
    assert (pipelined.status, pipelined.node, pipelined.gpu_groups) == (S.PENDING, None, ())


def test_releasing_pod_is_recreated_pending_unless_its_job_is_deleting() -> None:
    sim = SimulatedCluster(lifecycle_state(), config())
    sim.advance()
    evicted, deleted = task(sim.state, "evicted"), task(sim.state, "deleted")
    assert (evicted.status, evicted.node) == (S.PENDING, None)
    assert (deleted.status, deleted.node) == (S.RELEASING, "n1")


def test_every_other_status_is_kept_with_its_node() -> None:
    sim = SimulatedCluster(lifecycle_state(), config())
    sim.advance()
    for name, status in [
        ("running", S.RUNNING),
        ("stuck", S.STUCK_IN_RELEASING),
        ("hinted", S.PENDING),
        ("failed", S.FAILED),
        ("done", S.SUCCEEDED),
    ]:
        kept = task(sim.state, name)
        assert (kept.status, kept.node) == (status, "n1"), name


def test_started_time_is_re_derived_from_running_pods() -> None:
    state = lifecycle_state()
    job_of(state, "evicted").last_start = 5.0
    job_of(state, "pipelined").stale_since = 7.0
    sim = SimulatedCluster(state, config())
    sim.advance()
    assert job_of(sim.state, "binding").last_start == 1000.0 - STARTED_AGO_SECONDS
    assert job_of(sim.state, "running").last_start == 1000.0 - STARTED_AGO_SECONDS
    assert job_of(sim.state, "evicted").last_start is None
    assert job_of(sim.state, "pipelined").stale_since is None


def test_a_cycle_turns_binds_into_binding_and_records_both_views() -> None:
    state = cluster().node("n1", gpus=2).queue("q").job("j", queue="q", gpus=1, pods=2).build()
    sim = SimulatedCluster(state, config())
    result = sim.run_cycle()
    assert [b.task for b in result.plan.binds] == ["j-0", "j-1"]
    assert [t.status for t in job_of(sim.state, "j").tasks] == [S.BINDING, S.BINDING]
    assert [t.node for t in job_of(sim.state, "j").tasks] == ["n1", "n1"]
    assert result.start.tasks[("j", "j-0")].status == S.PENDING
    assert result.end.tasks[("j", "j-0")].status == S.ALLOCATED
    assert result.start.nodes["n1"] == NodeGpus(2.0, 0.0)
    assert result.end.nodes["n1"] == NodeGpus(0.0, 0.0)
    assert job_of(sim.state, "j").last_start == state.now


def test_pipelined_in_one_cycle_is_placed_again_after_the_release() -> None:
    state = (
        cluster()
        .node("n1", gpus=1)
        .queue("q")
        .job("leaving", queue="q", gpus=1, status=S.RELEASING, node="n1", deleting=True)
        .job("next", queue="q", gpus=1)
        .build()
    )
    sim = SimulatedCluster(state, config())
    first = sim.run_cycle()
    assert [b.task for b in first.plan.pipelined] == ["next-0"]
    assert task(sim.state, "next").status == S.PIPELINED

    sim.advance()
    assert (task(sim.state, "next").status, task(sim.state, "next").node) == (S.PENDING, None)
    second = sim.run_cycle()
    assert second.start.nodes["n1"] == NodeGpus(0.0, 1.0)  # the deleting pod still releases
    assert [b.task for b in second.plan.pipelined] == ["next-0"]

    job_of(sim.state, "leaving").tasks.clear()  # the pod is finally gone
    sim.advance()
    third = sim.run_cycle()
    assert [(b.task, b.node) for b in third.plan.binds] == [("next-0", "n1")]


def test_run_advances_between_cycles_and_reaches_a_fixed_point() -> None:
    state = (
        cluster()
        .node("n1", gpus=4, gpu_memory_mib=40_000)
        .queue("q")
        .job("whole", queue="q", gpus=1, pods=2)
        .job("frac", queue="q", gpus=0.5, pods=2)
        .build()
    )
    results = SimulatedCluster(state, config()).run(3)
    assert len(results) == 3
    assert len(results[0].plan.binds) == 4
    bound_then_running = {
        key: value._replace(status=S.RUNNING) if value.status == S.ALLOCATED else value
        for key, value in results[0].end.tasks.items()
    }
    assert results[1].start.tasks == bound_then_running
    assert results[1].plan.binds == [] and results[2].plan.binds == []
    assert results[2].end.tasks == results[1].end.tasks
    groups = {results[2].end.tasks[("frac", f"frac-{i}")].gpu_groups for i in range(2)}
    assert len(groups) == 1  # both halves share one GPU, and keep sharing it across cycles


def test_a_pod_bound_with_a_delayed_claim_holds_every_pod_naming_the_claim_to_its_node() -> None:
    """As `serve` annotates the claim with the node (`volume.kubernetes.io/selected-node`): the
    claim's volume is provisioned there, so a later pod naming it must go there too."""
    shared = [claim_volume("data", "shared")]
    gated = pod("later", gpus=8, volumes=shared, schedulingGates=[{"name": "wait"}])
    team = queue("team-a", gpu=16)
    unlimited = {"quota": -1, "limit": -1, "overQuotaWeight": 1}  # unset limits are 0 in KAI
    team["spec"]["resources"].update(cpu=dict(unlimited), memory=dict(unlimited))
    state, problems = convert(
        team,
        node("n1"),
        node("n2"),
        storage_class("local", "WaitForFirstConsumer"),
        claim("shared", storage_class="local"),
        pod("first", gpus=1, volumes=shared),
        gated,
    )
    assert problems == []
    sim = SimulatedCluster(state, config())
    first_node = next(b.node for b in sim.run_cycle().plan.binds if b.task == "first")
    later = next(t for job in sim.state.jobs for t in job.tasks if t.name == "later")
    assert later.volume_node_affinity == (selected_node_terms(first_node),)
    later.status = S.PENDING  # its gate lifted: 8 GPUs fit only on the other node
    result = sim.run_cycle()
    assert result.plan.binds == []
    assert "later" in str(result.plan.pending_reasons)
