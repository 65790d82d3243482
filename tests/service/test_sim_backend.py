"""The simulated backend's own contract: copy-on-write views, when its thread runs a cycle (a
change, a due timer; never an idle, unchanged cluster), and the timers it knows of."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from builders import cluster as state_cluster
from builders import config, run_with_session
from service_builders import NOW, cluster, gpu_job

from kai_ray.api import ApiObject, Pod, PodGroup
from kai_ray.rpc.api import SchedulerService
from kai_ray.rpc.backend import CycleRecord
from kai_ray.rpc.caller import ANYONE
from kai_ray.rpc.objects import rfc3339
from kai_ray.rpc.sim_backend import QUIET_SECONDS, SimBackend, next_timer
from kai_ray.v1 import scheduler_pb2 as pb

pytestmark = pytest.mark.unit


class Clock:
    """The backend's clock, moved by the test."""

    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock(NOW)


def test_a_view_stays_as_it_was_and_shares_what_did_not_change(backend: SimBackend) -> None:
    service = SchedulerService(backend)
    before = backend.view()
    service.submit_workload(gpu_job("ml", "train", "team-a", 2, 1), ANYONE)
    backend.run_cycle()
    after = backend.view()
    assert "ml" not in {namespace for namespace, _ in before.all("Pod")}
    pods = [after.get("Pod", "ml", f"train-{i}") for i in range(2)]
    assert all(isinstance(p, Pod) and p.spec.node_name for p in pods)
    # Nodes did not change: both views hold the same table, nothing was copied for them.
    assert after.all("Node") is before.all("Node")
    assert after.all("Pod") is not before.all("Pod")


def test_an_unchanged_cluster_gets_no_cycle_and_a_change_gets_one_at_once(clock: Clock) -> None:
    backend = SimBackend(cluster(), clock=clock, cycle_share=1.0, max_idle=3600.0)
    assert backend.seconds_until_next_cycle() <= 0  # never scheduled yet
    backend.run_cycle()
    assert backend.next_due is None
    waiting = backend.seconds_until_next_cycle()
    assert 0 < waiting <= 0.2  # it only looks at the clock again after a period
    SchedulerService(backend).submit_workload(gpu_job("ml", "train", "team-a", 1, 1), ANYONE)
    assert backend.seconds_until_next_cycle() <= 0


def test_a_burst_is_batched_by_the_spacing_but_its_end_gets_a_cycle_soon(clock: Clock) -> None:
    # A tiny share: the spacing after a cycle is the 1 s cap (KAI's schedule period).
    backend = SimBackend(cluster(), clock=clock, cycle_share=0.001, max_idle=3600.0)
    backend.run_cycle()
    service = SchedulerService(backend)
    service.submit_workload(gpu_job("ml", "a", "team-a", 1, 1), ANYONE)
    waiting = backend.seconds_until_next_cycle()
    # Changes still coming would wait for the spacing; this one waits only to see whether more come.
    assert 0 < waiting <= QUIET_SECONDS
    deadline = time.monotonic() + 5.0
    while backend.seconds_until_next_cycle() > 0:
        assert time.monotonic() < deadline, "the burst's end never got its cycle"
        threading.Event().wait(0.01)


def _high_priority_job_with_a_delay(created: float) -> list[ApiObject]:
    """A `build` gang of one 8-GPU pod that may preempt only 60 s after it was created."""
    group = PodGroup.model_validate(
        {
            "apiVersion": "scheduling.run.ai/v2alpha2",
            "kind": "PodGroup",
            "metadata": {"name": "urgent", "namespace": "ml", "creationTimestamp": rfc3339(created)},
            "spec": {
                "queue": "team-a",
                "minMember": 1,
                "priorityClassName": "build",
                "preemptionDelay": "60s",
            },
        }
    )
    pod = Pod.model_validate(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "urgent-0",
                "namespace": "ml",
                "annotations": {"pod-group-name": "urgent"},
                "labels": {"kai.scheduler/queue": "team-a"},
                "creationTimestamp": rfc3339(created),
            },
            "spec": {
                "schedulerName": "kai-scheduler",
                "containers": [{"name": "main", "resources": {"requests": {"nvidia.com/gpu": "8"}}}],
            },
        }
    )
    return [group, pod]


@pytest.fixture
def started(clock: Clock) -> Iterator[SimBackend]:
    backend = SimBackend(cluster(nodes=1), clock=clock, period=0.01, max_idle=3600.0)
    yield backend
    backend.close()


def test_the_thread_runs_a_cycle_when_a_preemption_delay_runs_out(started: SimBackend, clock: Clock) -> None:
    service = SchedulerService(started)
    low = gpu_job("ml", "low", "team-a", 1, 8)
    low.workload.priority_class = "train"
    service.submit_workload(low, ANYONE)
    started.start()
    started.wait_idle()
    assert service.get_workload(pb.GetWorkloadRequest(id="ml/low"), ANYONE).state == pb.RUNNING

    clock.now = NOW + 10
    started.create(_high_priority_job_with_a_delay(NOW))
    settled = started.wait_idle()
    assert not settled.plan.evictions
    assert settled.plan.pending_reasons["ml/urgent"].cause.value == "PreemptionDelayNotElapsed"
    assert started.next_due == NOW + 60  # the delay runs out then; nothing before

    # The first cycle after the delay runs out evicts; the thread may run its follow-up (binding
    # the preemptor) before this one looks, so the cycle is caught as it is announced.
    first_after: list[CycleRecord] = []
    arrived = threading.Event()

    def keep(record: CycleRecord | None) -> None:
        if record is not None and record.number == settled.number + 1:
            first_after.append(record)
            arrived.set()

    started.subscribe(keep)
    clock.now = NOW + 61
    assert arrived.wait(10.0), "no cycle ran when the preemption delay ran out"
    assert [e.task for e in first_after[0].plan.evictions] == ["low-0"]
    started.wait_idle()
    urgent = started.view().get("Pod", "ml", "urgent-0")
    assert isinstance(urgent, Pod) and urgent.spec.node_name == "node-0"


def test_next_timer_names_the_earliest_moment_a_clock_rule_flips() -> None:
    from kai_ray.model.objects import TaskStatus

    state = (
        state_cluster(now=100.0)
        .node("n1", gpus=8)
        .queue("q", preempt_min_runtime=300.0)
        .job("running", queue="q", gpus=8, status=TaskStatus.RUNNING, node="n1", started=50.0)
        .job("waiting", queue="q", gpus=8, priority=125, created=90.0, preemption_delay=30.0)
        .build()
    )
    session, _ = run_with_session(state, config(actions=("allocate", "preempt")))
    # The preemption delay ends at 120; the min-runtime protection at 350 is later.
    assert next_timer(state, session, config(), []) == 120.0


def test_next_timer_is_none_without_clock_rules_and_ignores_the_past() -> None:
    from kai_ray.model.objects import TaskStatus

    state = (
        state_cluster(now=1000.0)
        .node("n1", gpus=8)
        .queue("q")
        .job("running", queue="q", gpus=4, status=TaskStatus.RUNNING, node="n1")
        .job("old-delay", queue="q", gpus=8, created=0.0, preemption_delay=30.0)
        .build()
    )
    session, _ = run_with_session(state, config(actions=("allocate",)))
    assert next_timer(state, session, config(), []) is None


class StuckCycle(SimBackend):
    """A backend whose cycles wait for the test to let them go."""

    def __init__(self, entered: threading.Event, release: threading.Event) -> None:
        super().__init__(cluster(nodes=1), period=0.01, max_idle=0.0)
        self.entered, self.release = entered, release

    def run_cycle(self) -> CycleRecord:
        self.entered.set()
        self.release.wait(30.0)
        return super().run_cycle()


def test_close_gives_up_on_a_stuck_cycle_after_its_timeout_and_says_so(
    caplog: pytest.LogCaptureFixture,
) -> None:
    entered, release = threading.Event(), threading.Event()
    backend = StuckCycle(entered, release)
    backend.start()
    try:
        assert entered.wait(10.0), "the background thread never started a cycle"
        with caplog.at_level("WARNING", logger="kai_ray.rpc.sim_backend"):
            assert backend.close(timeout=0.2) is False
        assert "did not stop within" in caplog.text
    finally:
        release.set()
    assert backend.close(timeout=10.0) is True
