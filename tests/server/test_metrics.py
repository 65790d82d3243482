"""The scheduler's Prometheus exposition: KAI's names, prefix, labels and values (spec §14)."""

from __future__ import annotations

import threading

import pytest
from builders import cluster, config, run_with_session
from prometheus_client import generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from kai_ray.engine.plan import Plan
from kai_ray.engine.queues import QueueBook
from kai_ray.model.objects import TaskStatus
from kai_ray.server.metrics import LATENCY_BUCKETS_MS, EvictedPodGroup, SchedulerMetrics

pytestmark = pytest.mark.unit

QUEUE_METRICS = (
    "kai_queue_fair_share_gpu",
    "kai_queue_fair_share_cpu_cores",
    "kai_queue_fair_share_memory_gb",
    "kai_queue_info",
    "kai_queue_deserved_gpus",
    "kai_queue_quota_cpu_cores",
    "kai_queue_quota_memory_bytes",
    "kai_queue_allocated_gpus",
    "kai_queue_allocated_cpu_cores",
    "kai_queue_allocated_memory_bytes",
)

Labels = frozenset[tuple[str, str]]


def families(metrics: SchedulerMetrics) -> dict[str, Metric]:
    text = generate_latest(metrics.registry).decode()
    return {family.name: family for family in text_string_to_metric_families(text)}


def samples(metrics: SchedulerMetrics) -> dict[str, dict[Labels, float]]:
    """Sample name → {label set → value}: exact exposed names, whatever family they came in."""
    found: dict[str, dict[Labels, float]] = {}
    for family in families(metrics).values():
        for sample in family.samples:
            found.setdefault(sample.name, {})[frozenset(sample.labels.items())] = sample.value
    return found


def labels(**pairs: str) -> Labels:
    return frozenset(pairs.items())


def queue_labels(name: str, display: str = "") -> Labels:
    return labels(queue_name=display or name, queue_metadata_name=name, queue_display_name=display)


@pytest.fixture
def metrics() -> SchedulerMetrics:
    return SchedulerMetrics()


def reclaim_cycle() -> tuple[Plan, QueueBook]:
    """`free` (2 pods) is placed by allocate; `rightful` by reclaim, evicting `borrowed`."""
    state = (
        cluster()
        .node("n1", gpus=2)
        .node("n2", gpus=1)
        .queue("owner", gpu_quota=2)
        .queue("borrower", gpu_quota=0)
        .queue("other", gpu_quota=1, cpu_quota=2000, memory_quota=5e9)
        .job("borrowed", queue="borrower", gpus=2, status=TaskStatus.RUNNING, node="n1")
        .job("rightful", queue="owner", gpus=2)
        .job("free", queue="other", gpus=0.5, pods=2)
        .build()
    )
    session, plan = run_with_session(state, config(actions=("allocate", "reclaim")))
    assert [(b.job, b.action) for b in plan.binds] == [("free", "allocate"), ("free", "allocate")]
    assert [(b.job, b.action) for b in plan.pipelined] == [("rightful", "reclaim")]
    return plan, session.queues


def observe(
    metrics: SchedulerMetrics,
    plan: Plan,
    queues: QueueBook,
    display_names: dict[str, str] | None = None,
) -> None:
    metrics.observe_cycle(
        seconds=0.25,
        open_session_seconds=0.01,
        close_session_seconds=0.002,
        action_seconds={"allocate": 0.1, "reclaim": 0.05},
        plan=plan,
        queues=queues,
        display_names=display_names or {},
    )


def test_cycle_latencies_are_milliseconds_under_kai_names(metrics: SchedulerMetrics) -> None:
    observe(metrics, *reclaim_cycle())
    found = samples(metrics)
    assert found["kai_e2e_scheduling_latency_milliseconds"] == {labels(): 250.0}
    assert found["kai_open_session_latency_milliseconds"] == {labels(): 10.0}
    assert found["kai_close_session_latency_milliseconds"] == {labels(): 2.0}
    assert found["kai_action_scheduling_latency_milliseconds"] == {
        labels(action="allocate"): 100.0,
        labels(action="reclaim"): 50.0,
    }


def test_podgroups_scheduled_by_action_counts_jobs_once_per_action_under_kais_exact_name(
    metrics: SchedulerMetrics,
) -> None:
    plan, queues = reclaim_cycle()
    observe(metrics, plan, queues)
    observe(metrics, plan, queues)
    found = families(metrics)
    family = found["kai_podgroups_scheduled_by_action"]
    assert family.type == "unknown"
    assert {(s.name, s.labels["action"]): s.value for s in family.samples} == {
        ("kai_podgroups_scheduled_by_action", "allocate"): 2.0,
        ("kai_podgroups_scheduled_by_action", "reclaim"): 2.0,
    }
    text = generate_latest(metrics.registry).decode()
    assert "# TYPE kai_podgroups_scheduled_by_action untyped\n" in text
    assert "kai_podgroups_scheduled_by_action_total" not in text


def test_queue_series_carry_fair_shares_quotas_and_allocations(metrics: SchedulerMetrics) -> None:
    plan, queues = reclaim_cycle()
    observe(metrics, plan, queues, display_names={"owner": "Owner Team"})
    found = samples(metrics)
    owner, other, borrower = (
        queue_labels("owner", "Owner Team"),
        queue_labels("other"),
        queue_labels("borrower"),
    )
    assert found["kai_queue_info"] == {owner: 1.0, other: 1.0, borrower: 1.0}
    assert found["kai_queue_fair_share_gpu"] == {owner: 2.0, other: 1.0, borrower: 0.0}
    for name, queue in (("owner", owner), ("other", other), ("borrower", borrower)):
        cpu, memory, _ = queues.fair_share[queues.index[name]].tolist()
        assert found["kai_queue_fair_share_cpu_cores"][queue] == pytest.approx(cpu / 1000)
        assert found["kai_queue_fair_share_memory_gb"][queue] == pytest.approx(memory / 1e9)
    assert found["kai_queue_deserved_gpus"] == {owner: 2.0, other: 1.0, borrower: 0.0}
    assert found["kai_queue_quota_cpu_cores"] == {owner: -1.0, other: 2.0, borrower: -1.0}
    assert found["kai_queue_quota_memory_bytes"] == {owner: -1.0, other: 5e9, borrower: -1.0}
    # After the cycle: `rightful` holds 2 GPUs (pipelined), `free` 2 × 0.5 GPU, `borrowed` is evicted.
    assert found["kai_queue_allocated_gpus"] == {owner: 2.0, other: 1.0, borrower: 0.0}
    assert found["kai_queue_allocated_cpu_cores"] == {
        owner: pytest.approx(0.1),
        other: pytest.approx(0.2),
        borrower: 0.0,
    }
    assert found["kai_queue_allocated_memory_bytes"] == {owner: 1e8, other: 2e8, borrower: 0.0}


def test_series_of_a_queue_gone_or_renamed_are_removed(metrics: SchedulerMetrics) -> None:
    plan, queues = reclaim_cycle()
    observe(metrics, plan, queues, display_names={"owner": "Owner Team"})
    later = cluster().node("n1", gpus=1).queue("owner", gpu_quota=1).build()
    session, later_plan = run_with_session(later)
    observe(metrics, later_plan, session.queues, display_names={"owner": "Renamed"})
    found = samples(metrics)
    for name in QUEUE_METRICS:
        assert set(found[name]) == {queue_labels("owner", "Renamed")}, name


def test_forget_podgroups_drops_eviction_series_of_podgroups_no_longer_live(
    metrics: SchedulerMetrics,
) -> None:
    metrics.observe_evictions(
        [
            EvictedPodGroup("team-a", "borrowed", "uid-1", "default", "reclaim", 2),
            EvictedPodGroup("team-a", "borrowed", "uid-1", "default", "reclaim", 1),
            EvictedPodGroup("team-b", "old", "uid-2", "pool-x", "preempt", 4),
        ]
    )
    series = samples(metrics)["kai_pod_group_evicted_pods_total"]
    kept = labels(podgroup="borrowed", namespace="team-a", uid="uid-1", nodepool="default", action="reclaim")
    gone = labels(podgroup="old", namespace="team-b", uid="uid-2", nodepool="pool-x", action="preempt")
    assert series == {kept: 3.0, gone: 4.0}
    metrics.forget_podgroups({("team-a", "borrowed"), ("team-b", "other")})
    assert samples(metrics)["kai_pod_group_evicted_pods_total"] == {kept: 3.0}


def test_bind_attempts_feed_the_counters_and_kais_latency_histogram(metrics: SchedulerMetrics) -> None:
    metrics.observe_bind(succeeded=True, seconds=0.004)
    metrics.observe_bind(succeeded=True, seconds=0.030)
    metrics.observe_bind(succeeded=False, seconds=3.0)
    found = samples(metrics)
    assert found["kai_ray_pods_bound_total"] == {labels(): 2.0}
    assert found["kai_ray_bind_failures_total"] == {labels(): 1.0}
    buckets = {
        dict(key)["le"]: value for key, value in found["kai_task_bind_latency_milliseconds_bucket"].items()
    }
    assert LATENCY_BUCKETS_MS == (5.0, 10.0, 20.0, 40.0, 80.0, 160.0, 320.0, 640.0, 1280.0, 2560.0)
    assert buckets == {
        "5.0": 1,
        "10.0": 1,
        "20.0": 1,
        "40.0": 2,
        "80.0": 2,
        "160.0": 2,
        "320.0": 2,
        "640.0": 2,
        "1280.0": 2,
        "2560.0": 2,
        "+Inf": 3,
    }
    assert found["kai_task_bind_latency_milliseconds_count"] == {labels(): 3.0}
    assert found["kai_task_bind_latency_milliseconds_sum"] == {labels(): pytest.approx(3034.0)}


def test_no_created_series_are_exposed(metrics: SchedulerMetrics) -> None:
    """KAI's Go client exposes no `_created` series; neither do we."""
    metrics.observe_bind(succeeded=True, seconds=0.01)
    metrics.observe_blocked_evictions(1)
    metrics.observe_evictions([EvictedPodGroup("ns", "pg", "uid", "default", "preempt", 1)])
    assert not [name for name in samples(metrics) if name.endswith("_created")]


def test_blocked_evictions_tracked_objects_and_leadership(metrics: SchedulerMetrics) -> None:
    metrics.observe_blocked_evictions(2)
    metrics.observe_blocked_evictions(3)
    metrics.set_tracked({"pods": 10, "podgroups": 3})
    metrics.set_tracked({"pods": 12, "bindrequests": 1})
    metrics.set_leader(True)
    found = samples(metrics)
    assert found["kai_ray_evictions_blocked_total"] == {labels(): 5.0}
    assert found["kai_ray_tracked_objects"] == {
        labels(memory="pods"): 12.0,
        labels(memory="bindrequests"): 1.0,
    }
    assert found["kai_ray_leader"] == {labels(): 1.0}
    metrics.set_leader(False)
    assert samples(metrics)["kai_ray_leader"] == {labels(): 0.0}


def test_shard_faults_follow_the_executors_running_totals(metrics: SchedulerMetrics) -> None:
    metrics.observe_shard_faults({"died": 1})
    metrics.observe_shard_faults({"died": 1})
    metrics.observe_shard_faults({"died": 3, "stale": 1})
    assert samples(metrics)["kai_ray_node_shard_faults_total"] == {
        labels(fault="died"): 3.0,
        labels(fault="stale"): 1.0,
    }


def test_another_namespace_prefixes_every_name() -> None:
    metrics = SchedulerMetrics(namespace="acme")
    observe(metrics, *reclaim_cycle())
    metrics.observe_bind(succeeded=True, seconds=0.01)
    metrics.observe_evictions([EvictedPodGroup("ns", "pg", "uid", "default", "preempt", 1)])
    metrics.set_leader(True)
    names = set(samples(metrics))
    assert {
        "acme_e2e_scheduling_latency_milliseconds",
        "acme_podgroups_scheduled_by_action",
        "acme_queue_fair_share_gpu",
        "acme_queue_info",
        "acme_pod_group_evicted_pods_total",
        "acme_ray_pods_bound_total",
        "acme_task_bind_latency_milliseconds_count",
        "acme_ray_leader",
    } <= names
    assert all(name.startswith("acme_") for name in names)


def test_concurrent_observations_are_all_counted(metrics: SchedulerMetrics) -> None:
    def work() -> None:
        for _ in range(200):
            metrics.observe_bind(succeeded=True, seconds=0.001)
            metrics.observe_evictions([EvictedPodGroup("ns", "pg", "uid", "default", "preempt", 1)])

    threads = [threading.Thread(target=work) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    found = samples(metrics)
    assert found["kai_ray_pods_bound_total"] == {labels(): 1600.0}
    assert list(found["kai_pod_group_evicted_pods_total"].values()) == [1600.0]


def test_grouping_is_counted_without_created_samples(metrics: SchedulerMetrics) -> None:
    from prometheus_client import generate_latest

    from kai_ray.cluster.kube.grouping import GroupingResult

    metrics.grouping.observe(
        GroupingResult(
            created=["ns/a"], updated=["ns/b", "ns/c"], annotated=["ns/p"], failed=[("ns/q", "why")]
        )
    )
    text = generate_latest(metrics.registry).decode()
    assert 'kai_ray_podgrouper_podgroups_written_total{operation="create"} 1.0' in text
    assert 'kai_ray_podgrouper_podgroups_written_total{operation="update"} 2.0' in text
    assert "kai_ray_podgrouper_pods_linked_total 1.0" in text
    assert "kai_ray_podgrouper_pods_ungrouped_total 1.0" in text
    assert "_created" not in text
