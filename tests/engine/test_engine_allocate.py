"""The allocate action through `schedule()` (spec §10, §16, §17, §6.4; Example 10 of §23)."""

from __future__ import annotations

import numpy as np
import pytest
from builders import (
    binds,
    cluster,
    config,
    find_job,
    find_task,
    open_session,
    pipelined,
    run_cycle,
    run_with_session,
    two_nodes_one_busy,
)

from kai_ray.engine.reasons import PendingCause
from kai_ray.engine.session import Session
from kai_ray.model.objects import AffinityRequirement, ClusterState, Taint, TaskStatus, Toleration

pytestmark = pytest.mark.unit

S = TaskStatus


# ---------------------------------------------------------------------- gangs


def test_gang_that_does_not_fit_binds_nothing_and_says_why() -> None:
    state = (
        cluster()
        .node("n1", gpus=2)
        .node("n2", gpus=2)
        .queue("q")
        .job("big", queue="q", gpus=1, pods=5, min_member=5)
        .build()
    )
    plan = run_cycle(state)
    assert plan.binds == [] and plan.pipelined == []
    assert all(plan.tasks[("big", f"big-{i}")].status == S.PENDING for i in range(5))
    reason = plan.pending_reasons["big"].message
    assert "gang" in reason
    assert "5" in reason and "4" in reason  # needs 5 together, 4 fit


def test_gang_that_fits_across_nodes_binds_whole() -> None:
    state = (
        cluster().node("n1", gpus=2).node("n2", gpus=2).queue("q").job("g", queue="q", gpus=1, pods=4).build()
    )
    plan = run_cycle(state)
    assert sorted(binds(plan).values()) == ["n1", "n1", "n2", "n2"]
    assert plan.pending_reasons == {}


def test_failed_gang_leaves_room_for_the_next_job() -> None:
    state = (
        cluster()
        .node("n1", gpus=2)
        .queue("q")
        .job("big", queue="q", gpus=1, pods=3, priority=75)
        .job("small", queue="q", gpus=1, pods=2)
        .build()
    )
    plan = run_cycle(state)
    assert binds(plan) == {"small-0": "n1", "small-1": "n1"}
    assert "big" in plan.pending_reasons


# ---------------------------------------------------------------------- pipelining (§10 step 5, §22.5)


def test_task_that_only_fits_in_releasing_resources_is_pipelined_not_bound() -> None:
    state = (
        cluster()
        .node("n1", gpus=4)
        .queue("q")
        .job("busy", queue="q", gpus=1, pods=3, status=S.RUNNING, node="n1")
        .job("leaving", queue="q", gpus=1, status=S.RELEASING, node="n1")
        .job("next", queue="q", gpus=1)
        .build()
    )
    plan = run_cycle(state)
    assert plan.binds == []
    assert pipelined(plan) == {"next-0": "n1"}
    assert plan.tasks[("next", "next-0")].status == S.PIPELINED
    assert "next" not in plan.pending_reasons


def test_stuck_in_releasing_resources_are_not_pipelined_onto() -> None:
    state = (
        cluster()
        .node("n1", gpus=1)
        .queue("q")
        .job("stuck", queue="q", gpus=1, status=S.STUCK_IN_RELEASING, node="n1")
        .job("next", queue="q", gpus=1)
        .build()
    )
    plan = run_cycle(state)
    assert plan.binds == [] and plan.pipelined == []
    assert "next" in plan.pending_reasons


def test_idle_node_beats_a_fuller_node_whose_room_is_only_releasing() -> None:
    state = (
        cluster()
        .node("n1", gpus=8)
        .node("n2", gpus=2)
        .queue("q")
        .job("leaving", queue="q", gpus=1, pods=2, status=S.RELEASING, node="n2")
        .job("next", queue="q", gpus=1)
        .build()
    )
    assert binds(run_cycle(state)) == {"next-0": "n1"}


# ---------------------------------------------------------------------- node choice (§16.2)


def test_binpack_picks_the_fullest_node() -> None:
    assert binds(run_cycle(two_nodes_one_busy())) == {"new-0": "n2"}


def test_spread_picks_the_emptiest_node() -> None:
    assert binds(run_cycle(two_nodes_one_busy(), config(gpu_placement="spread"))) == {"new-0": "n1"}


def test_cpu_only_task_uses_cpu_placement_and_prefers_cpu_nodes() -> None:
    state = (
        cluster()
        .node("gpu-node", gpus=8, cpu_millis=8000)
        .node("cpu-a", cpu_millis=8000)
        .node("cpu-b", cpu_millis=8000)
        .queue("q")
        .job("busy", queue="q", cpu_millis=6000, status=S.RUNNING, node="cpu-b")
        .job("web", queue="q", cpu_millis=1000)
        .build()
    )
    assert binds(run_cycle(state)) == {"web-0": "cpu-b"}
    assert binds(run_cycle(state, config(cpu_placement="spread"))) == {"web-0": "cpu-a"}


def example_10_nodes(n2_free_releasing: bool = False) -> ClusterState:
    """n1: 8 GPUs, 6 free idle; n2: 8 GPUs, 2 free (idle or releasing); n3: 4 GPUs, 4 free, 1 releasing."""
    n2_status = S.RELEASING if n2_free_releasing else S.RUNNING
    return (
        cluster()
        .node("n1", gpus=8)
        .node("n2", gpus=8)
        .node("n3", gpus=4)
        .queue("q")
        .job("on-n1", queue="q", gpus=1, pods=2, status=S.RUNNING, node="n1")
        .job("on-n2", queue="q", gpus=1, pods=6, status=S.RUNNING, node="n2")
        .job("leaving-n2", queue="q", gpus=1, pods=2 if n2_free_releasing else 0, status=n2_status, node="n2")
        .job("leaving-n3", queue="q", gpus=1, status=S.RELEASING, node="n3")
        .job("task", queue="q", gpus=1)
        .build()
    )


def summed_scores(session: Session, task_name: str) -> list[float]:
    task = find_task(session, task_name)
    total = np.zeros(len(session.nodes.table))
    for plugin in session.plugins:
        scores = plugin.node_scores(task, session.all_rows())
        if scores is not None:
            total += scores
    return [float(x) for x in total]


def rank_order(scores: list[float]) -> list[int]:
    return sorted(range(len(scores)), key=lambda i: (-scores[i], i))


def test_example_10_binpack_scores_and_n2_wins() -> None:
    """KAI scores n1/n2/n3 as 1000/1009/1004.5; our node-local binpack (9 / (1 + free)) keeps that order."""
    state = example_10_nodes()
    scores = summed_scores(open_session(state), "task-0")
    assert scores == pytest.approx([1000 + 9 / 7, 1000 + 9 / 3, 1000 + 9 / 5])
    assert rank_order(scores) == rank_order([1000.0, 1009.0, 1004.5])
    assert binds(run_cycle(state)) == {"task-0": "n2"}


def test_example_10_immediate_availability_beats_binpack_n3_wins() -> None:
    state = example_10_nodes(n2_free_releasing=True)
    scores = summed_scores(open_session(state), "task-0")
    assert rank_order(scores) == rank_order([1000.0, 9.0, 1004.5])
    assert binds(run_cycle(state)) == {"task-0": "n3"}


def test_example_10_spread_scores_and_n3_wins() -> None:
    state = example_10_nodes()
    cfg = config(gpu_placement="spread")
    assert summed_scores(open_session(state, cfg), "task-0") == [1000.75, 1000.25, 1001.0]
    assert binds(run_cycle(state, cfg)) == {"task-0": "n3"}


def test_equal_scores_break_ties_by_node_name() -> None:
    state = (
        cluster().node("b", gpus=4).node("c", gpus=4).node("a", gpus=4).queue("q").job("j", queue="q", gpus=1)
    )
    assert binds(run_cycle(state.build())) == {"j-0": "a"}


# ---------------------------------------------------------------------- GPU sharing (§17, Example 10)


def sharing_cluster() -> ClusterState:
    return (
        cluster()
        .node("n1", gpus=2, gpu_memory_mib=40_000)
        .queue("q")
        .job("p1", queue="q", gpus=0.5, created=0)
        .job("p2", queue="q", gpu_memory_mib=10_000, created=1)
        .job("p3", queue="q", gpus=0.5, created=2)
        .build()
    )


def test_example_10_gpu_sharing_device_choice_under_gpupack() -> None:
    session, plan = run_with_session(sharing_cluster())
    placed = {b.task: b for b in plan.binds}
    assert set(placed) == {"p1-0", "p2-0", "p3-0"}
    (g1,), (g_p2,), (g2,) = placed["p1-0"].gpu_groups, placed["p2-0"].gpu_groups, placed["p3-0"].gpu_groups
    assert g_p2 == g1  # P2 joins P1's GPU (score 0.5 beats a whole GPU's 0)
    assert g2 != g1  # P3 needs 20,000 MiB, g1 has 10,000 left: a second GPU
    assert [placed[t].accepted_gpus for t in ("p1-0", "p2-0", "p3-0")] == [0.5, 0.25, 0.5]
    groups = session.nodes.groups[0]
    assert groups[g1].held_memory == 30_000 and groups[g2].held_memory == 20_000
    assert float(session.nodes.idle[0, 2]) == 0.0  # two shared GPUs hold both devices
    assert float(session.queues.allocated[0, 2]) == 1.25  # queue charged the accepted portions


def test_example_10_gpu_sharing_first_pod_takes_one_whole_gpu() -> None:
    state = (
        cluster().node("n1", gpus=2, gpu_memory_mib=40_000).queue("q").job("p1", queue="q", gpus=0.5).build()
    )
    session, plan = run_with_session(state)
    assert len(plan.binds) == 1 and len(plan.binds[0].gpu_groups) == 1
    assert float(session.nodes.idle[0, 2]) == 1.0
    assert float(session.queues.allocated[0, 2]) == 0.5


def test_example_10_gpuspread_prefers_an_untouched_gpu() -> None:
    state = (
        cluster()
        .node("n1", gpus=2, gpu_memory_mib=40_000)
        .queue("q")
        .job("p1", queue="q", gpus=0.5, created=0)
        .job("p2", queue="q", gpu_memory_mib=10_000, created=1)
        .build()
    )
    plan = run_cycle(state, config(gpu_sharing="spread"))
    groups = {b.task: b.gpu_groups for b in plan.binds}
    assert groups["p1-0"] != groups["p2-0"]


def test_opening_a_new_gpu_group_needs_a_pod_slot_for_the_reservation_pod() -> None:
    state = (
        cluster()
        .node("n1", gpus=1, gpu_memory_mib=40_000, max_pods=1)
        .node("n2", gpus=1, gpu_memory_mib=40_000, max_pods=2)
        .queue("q")
        .job("frac", queue="q", gpus=0.5)
        .build()
    )
    assert binds(run_cycle(state)) == {"frac-0": "n2"}


def test_gpu_memory_request_skips_nodes_that_do_not_publish_gpu_memory() -> None:
    state = (
        cluster()
        .node("a", gpus=1, gpu_memory_mib=40_000, gpu_memory_synced=False)
        .node("b", gpus=1, gpu_memory_mib=40_000)
        .queue("q")
        .job("m", queue="q", gpu_memory_mib=8_000)
        .build()
    )
    assert binds(run_cycle(state)) == {"m-0": "b"}


# ---------------------------------------------------------------------- queue capacity (§6.4)


def test_queue_limit_blocks_allocation_with_a_reason_naming_queue_and_resource() -> None:
    state = (
        cluster()
        .node("n1", gpus=8)
        .queue("team-a", gpu_limit=2)
        .job("running", queue="team-a", gpus=1, status=S.RUNNING, node="n1")
        .job("wants-two", queue="team-a", gpus=1, pods=2)
        .build()
    )
    plan = run_cycle(state)
    assert plan.binds == []
    reason = plan.pending_reasons["wants-two"].message
    assert "team-a" in reason and "gpu" in reason and "limit" in reason
    assert plan.pending_reasons["wants-two"].cause == PendingCause.OVER_LIMIT


def test_parent_queue_limit_also_blocks() -> None:
    state = (
        cluster()
        .node("n1", gpus=8)
        .queue("dept", gpu_limit=1)
        .queue("team", parent="dept")
        .job("two", queue="team", gpus=1, pods=2)
        .build()
    )
    plan = run_cycle(state)
    assert plan.binds == []
    assert "dept" in plan.pending_reasons["two"].message


def test_limit_of_zero_allows_nothing_and_minus_one_allows_everything() -> None:
    builder = cluster().node("n1", gpus=8).queue("capped", gpu_limit=0).queue("open", gpu_limit=-1)
    state = builder.job("c", queue="capped", gpus=1).job("o", queue="open", gpus=1).build()
    plan = run_cycle(state)
    assert binds(plan) == {"o-0": "n1"}
    assert "capped" in plan.pending_reasons["c"].message


def test_cpu_only_job_is_not_blocked_by_a_gpu_limit() -> None:
    state = cluster().node("n1", gpus=8).queue("q", gpu_limit=0).job("web", queue="q", cpu_millis=500).build()
    assert binds(run_cycle(state)) == {"web-0": "n1"}


def test_non_preemptible_job_may_not_exceed_deserved_quota() -> None:
    state = (
        cluster()
        .node("n1", gpus=8)
        .queue("q", gpu_quota=2)
        .job("build", queue="q", gpus=1, pods=3, priority=100)  # non-preemptible (§9)
        .job("train", queue="q", gpus=1, pods=3, priority=50)
        .build()
    )
    plan = run_cycle(state)
    assert sorted(binds(plan)) == ["train-0", "train-1", "train-2"]
    reason = plan.pending_reasons["build"].message
    assert "q" in reason and "gpu" in reason and "non-preemptible" in reason
    assert plan.pending_reasons["build"].cause == PendingCause.NON_PREEMPTIBLE_OVER_QUOTA


def test_non_preemptible_job_within_deserved_quota_binds() -> None:
    state = (
        cluster()
        .node("n1", gpus=8)
        .queue("q", gpu_quota=2)
        .job("build", queue="q", gpus=1, pods=2, priority=100)
    )
    assert len(run_cycle(state.build()).binds) == 2


def test_fair_share_is_not_a_cap_on_allocate() -> None:
    """§6.4/§22.16: work-conserving: a queue with quota 0 takes all idle GPUs."""
    state = (
        cluster()
        .node("n1", gpus=4)
        .queue("a", gpu_quota=0)
        .queue("b", gpu_quota=4)
        .job("greedy", queue="a", gpus=1, pods=4)
        .build()
    )
    assert len(run_cycle(state).binds) == 4


# ---------------------------------------------------------------------- predicates (§16.1)


def test_node_selector_and_affinity_filter_nodes_when_predicates_are_on() -> None:
    state = (
        cluster()
        .node("big", gpus=8, labels={"zone": "a"})
        .node("small", gpus=4, labels={"zone": "b", "kai.scheduler/type": "small"})
        .queue("q")
        .job("busy", queue="q", gpus=1, pods=6, status=S.RUNNING, node="big")
        .job("free", queue="q", gpus=1)
        .job("sel", queue="q", gpus=1, node_selector={"zone": "b"})
        .job(
            "aff",
            queue="q",
            gpus=1,
            node_affinity=[AffinityRequirement("kai.scheduler/type", "In", ("small",))],
        )
        .job("anti", queue="q", gpus=1, node_affinity=[AffinityRequirement("zone", "NotIn", ("a",))])
        .job("nowhere", queue="q", gpus=1, node_selector={"zone": "c"})
        .build()
    )
    # binpack prefers "big" (2 free GPUs) over "small" (4 free); only the unconstrained pod goes there
    plan = run_cycle(state)
    assert binds(plan) == {"free-0": "big", "sel-0": "small", "aff-0": "small", "anti-0": "small"}
    assert "affinity" in plan.pending_reasons["nowhere"].message


def test_affinity_is_ignored_without_the_predicates_plugin() -> None:
    state = (
        cluster()
        .node("a", gpus=4)
        .node("b", gpus=4, labels={"kai.scheduler/type": "b"})
        .queue("q")
        .job(
            "aff", queue="q", gpus=1, node_affinity=[AffinityRequirement("kai.scheduler/type", "In", ("b",))]
        )
        .build()
    )
    assert binds(run_cycle(state)) == {"aff-0": "b"}
    assert binds(run_cycle(state, config(predicates=False))) == {"aff-0": "a"}


def test_taints_repel_pods_without_a_toleration() -> None:
    taint = Taint("dedicated", "infra", "NoSchedule")
    toleration = Toleration("dedicated", "Equal", "infra")
    state = (
        cluster()
        .node("a-tainted", gpus=4, taints=[taint])
        .node("b-plain", gpus=4)
        .queue("q")
        .job("tolerant", queue="q", gpus=1, created=0, tolerations=[toleration])
        .job("plain", queue="q", gpus=1, created=1)
        .build()
    )
    placed = binds(run_cycle(state))
    assert placed["tolerant-0"] == "a-tainted"  # both nodes tie, so by name; the toleration lets it in
    assert placed["plain-0"] == "b-plain"  # binpack would prefer the fuller a-tainted; the taint says no


def test_prefer_no_schedule_taint_does_not_filter() -> None:
    state = (
        cluster()
        .node("a", gpus=4, taints=[Taint("soft", "", "PreferNoSchedule")])
        .queue("q")
        .job("j", queue="q", gpus=1)
        .build()
    )
    assert binds(run_cycle(state)) == {"j-0": "a"}


def test_unschedulable_and_not_ready_nodes_get_nothing() -> None:
    state = (
        cluster()
        .node("a", gpus=4, unschedulable=True)
        .node("b", gpus=4, ready=False)
        .node("c", gpus=4)
        .queue("q")
        .job("j", queue="q", gpus=1, pods=4)
        .build()
    )
    assert set(binds(run_cycle(state)).values()) == {"c"}


def test_pod_larger_than_any_node_gets_a_pre_predicate_reason() -> None:
    state = cluster().node("a", gpus=4).node("b", gpus=2).queue("q").job("huge", queue="q", gpus=8).build()
    plan = run_cycle(state)
    assert plan.binds == []
    assert "largest node" in plan.pending_reasons["huge"].message


# ---------------------------------------------------------------------- pending reasons


def test_every_job_with_a_pending_pod_gets_a_reason() -> None:
    state = (
        cluster()
        .node("n1", gpus=4)
        .queue("q")
        .queue("other", gpu_limit=0)
        .job("fits", queue="q", gpus=1, pods=2)
        .job("too-big-gang", queue="q", gpus=1, pods=5, min_member=5)
        .job("over-limit", queue="other", gpus=1)
        .job("not-ready", queue="q", gpus=1, pods=2, min_member=3)  # only 2 of 3 pods exist
        .job("elastic", queue="q", gpus=1, pods=4, min_member=1)
        .job("done", queue="q", gpus=1, status=S.SUCCEEDED)
        .build()
    )
    plan = run_cycle(state)
    still_pending = {job for (job, _), task in plan.tasks.items() if task.status == S.PENDING}
    assert still_pending == {"too-big-gang", "over-limit", "not-ready", "elastic"}
    assert set(plan.pending_reasons) == still_pending
    assert all(reason.message.strip() for reason in plan.pending_reasons.values())
    assert "gang needs 5" in plan.pending_reasons["too-big-gang"].message
    assert "other" in plan.pending_reasons["over-limit"].message
    assert "not enough pods" in plan.pending_reasons["not-ready"].message
    assert plan.pending_reasons["not-ready"].cause == PendingCause.NOT_READY
    assert plan.pending_reasons["too-big-gang"].cause == PendingCause.NO_ROOM


# ---------------------------------------------------------------------- more GPU sharing and capacity cases


def test_multi_device_fraction_opens_one_group_per_device() -> None:
    state = (
        cluster()
        .node("n1", gpus=2, gpu_memory_mib=40_000)
        .queue("q")
        .job("pair", queue="q", gpus=0.5, gpu_devices=2)
        .build()
    )
    session, plan = run_with_session(state)
    (bind,) = plan.binds
    assert len(set(bind.gpu_groups)) == 2
    assert bind.accepted_gpus == 1.0
    assert float(session.nodes.idle[0, 2]) == 0.0


def test_multi_device_fraction_joins_a_group_and_opens_another() -> None:
    state = (
        cluster()
        .node("n1", gpus=2, gpu_memory_mib=40_000)
        .queue("q")
        .job("half", queue="q", gpus=0.5, status=S.RUNNING, node="n1", gpu_groups=("g",))
        .job("pair", queue="q", gpus=0.25, gpu_devices=2)
        .build()
    )
    (bind,) = run_cycle(state).binds
    assert "g" in bind.gpu_groups and len(set(bind.gpu_groups)) == 2
    assert bind.accepted_gpus == 0.5


def test_fraction_waits_for_a_fully_releasing_shared_gpu() -> None:
    state = (
        cluster()
        .node("n1", gpus=1, gpu_memory_mib=40_000)
        .queue("q")
        .job("old", queue="q", gpus=0.5, status=S.RELEASING, node="n1", gpu_groups=("g",))
        .job("new", queue="q", gpus=0.5)
        .build()
    )
    plan = run_cycle(state)
    assert plan.binds == []
    assert pipelined(plan) == {"new-0": "n1"}


def test_node_level_capacity_check_uses_the_fraction_the_node_would_grant() -> None:
    """§6.4: 10,000 MiB is 0.25 of a 40 GB GPU but 0.13 of an 80 GB one; the queue may have 0.2."""
    state = (
        cluster()
        .node("a-small", gpus=2, gpu_memory_mib=40_000)
        .node("b-large", gpus=2, gpu_memory_mib=80_000)
        .queue("q", gpu_limit=0.2)
        .job("m", queue="q", gpu_memory_mib=10_000)
        .build()
    )
    (bind,) = run_cycle(state).binds
    assert (bind.node, bind.accepted_gpus) == ("b-large", 0.13)


def test_job_level_capacity_check_uses_the_largest_gpu_memory() -> None:
    state = (
        cluster()
        .node("a-small", gpus=2, gpu_memory_mib=40_000)
        .node("b-large", gpus=2, gpu_memory_mib=80_000)
        .queue("q", gpu_limit=0.1)
        .job("m", queue="q", gpu_memory_mib=10_000)
        .build()
    )
    plan = run_cycle(state)
    assert plan.binds == []
    assert "0.13" in plan.pending_reasons["m"].message


def test_example_6_variant_limit_is_checked_before_non_preemptible_quota() -> None:
    state = (
        cluster()
        .node("n1", gpus=8)
        .queue("q", gpu_quota=0, gpu_limit=4)
        .job("train", queue="q", gpus=1, pods=4, status=S.RUNNING, node="n1")
        .job("build", queue="q", gpus=1, priority=100)
        .build()
    )
    reason = run_cycle(state).pending_reasons["build"].message
    assert "limit" in reason and "non-preemptible" not in reason


def test_cpu_only_pod_is_drawn_to_a_node_with_a_shared_gpu() -> None:
    """§16.2 NOTE: gpusharingorder's 10,000 does not check the task type and beats resourcetype's 10."""
    state = (
        cluster()
        .node("a-cpu", cpu_millis=8000)
        .node("b-gpu", gpus=2, gpu_memory_mib=40_000, cpu_millis=8000)
        .queue("q")
        .job("frac", queue="q", gpus=0.5, status=S.RUNNING, node="b-gpu", gpu_groups=("g",))
        .job("web", queue="q", cpu_millis=100)
        .build()
    )
    assert binds(run_cycle(state)) == {"web-0": "b-gpu"}
    without_group = cluster().node("a-cpu", cpu_millis=8000).node("b-gpu", gpus=2, cpu_millis=8000).queue("q")
    assert binds(run_cycle(without_group.job("web", queue="q", cpu_millis=100).build())) == {"web-0": "a-cpu"}


# ---------------------------------------------------------------------- start time (§10)


def test_last_start_is_set_only_when_a_job_first_binds() -> None:
    state = (
        cluster(now=500.0)
        .node("n1", gpus=4)
        .node("n2", gpus=2, labels={"pool": "two"})
        .queue("q")
        .job("fresh", queue="q", gpus=1, created=0)
        .job("growing", queue="q", gpus=1, pods=1, min_member=1, status=S.RUNNING, node="n1", created=1)
        .task()
        .job("leaving", queue="q", gpus=1, status=S.RELEASING, node="n2")
        .job("waiting", queue="q", gpus=1, pods=2, created=-1, node_selector={"pool": "two"})
        .build()
    )
    state.jobs[1].last_start = 100.0
    session, plan = run_with_session(state)
    assert {b.job for b in plan.binds} == {"fresh", "growing"}
    assert {b.job for b in plan.pipelined} == {"waiting"}
    assert find_job(session, "fresh").last_start == 500.0
    assert find_job(session, "growing").last_start == 100.0  # already had a running pod
    assert find_job(session, "waiting").last_start is None  # pipelined is not started
