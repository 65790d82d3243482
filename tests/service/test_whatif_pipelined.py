"""WhatIf's pipelined pods: placed where evicted pods still hold the resources, bound only later.

A preemptor is never bound in the cycle that evicts its victims (they must be gone first), so
before `WhatIfResponse.pipelined` a what-if answered "evict these" without saying where the
preemptor goes, and showed it PENDING as if the cycle had not reached it.
"""

from __future__ import annotations

import pytest
from service_builders import gpu_job

from kai_ray.rpc.api import SchedulerService
from kai_ray.rpc.caller import ANYONE, Caller
from kai_ray.rpc.sim_backend import SimBackend
from kai_ray.rpc.workloads import PIPELINED_REASON
from kai_ray.v1 import scheduler_pb2 as pb

pytestmark = pytest.mark.unit


def run_low_priority_gang(service: SchedulerService, backend: SimBackend) -> None:
    """A preemptible 2-pod gang of 8 GPUs each fills both nodes of the test cluster."""
    service.submit_workload(gpu_job("ml", "low", "team-a", 2, 8, priority_class="train"), ANYONE)
    backend.run_cycle()
    low = service.get_workload(pb.GetWorkloadRequest(id="ml/low"), ANYONE)
    assert low.state == pb.RUNNING and sorted(p.node for p in low.placements) == ["node-0", "node-1"]


def test_a_preemptor_in_the_same_queue_is_pipelined_and_nothing_is_applied(
    service: SchedulerService, backend: SimBackend
) -> None:
    run_low_priority_gang(service, backend)
    generation = backend.view().generation
    before = service.list_workloads(pb.ListWorkloadsRequest(), ANYONE)
    request = pb.WhatIfRequest(workloads=[gpu_job("ml", "high", "team-a", 1, 8, priority_class="build")])
    answer = service.what_if(request, ANYONE)
    assert [(p.workload, p.pod, p.node) for p in answer.pipelined] == [("ml/high", "high-0", "node-0")]
    # It waits for its victims: the whole gang is evicted (its minimum is both pods), node-0 among them.
    evictions = sorted((e.workload, e.pod, e.node, e.cause, e.for_workload) for e in answer.evictions)
    assert evictions == [
        ("ml/low", "low-0", "node-0", "preempt", "ml/high"),
        ("ml/low", "low-1", "node-1", "preempt", "ml/high"),
    ]
    assert not answer.binds
    workloads = {w.id: w for w in answer.workloads}
    high = workloads["ml/high"]
    assert (high.state, high.reason, high.pods_bound) == (pb.PENDING, PIPELINED_REASON, 0)
    assert "1 pod(s) pipelined to node-0" in high.message
    assert workloads["ml/low"].state == pb.EVICTED and workloads["ml/low"].reason == "preempt"
    assert backend.view().generation == generation
    assert service.list_workloads(pb.ListWorkloadsRequest(), ANYONE) == before
    assert backend.view().get("Pod", "ml", "high-0") is None


def test_a_what_if_that_fits_pipelines_nothing(service: SchedulerService, backend: SimBackend) -> None:
    request = pb.WhatIfRequest(workloads=[gpu_job("ml", "small", "team-a", 2, 4)])
    answer = service.what_if(request, ANYONE)
    assert not answer.pipelined and not answer.evictions
    assert sorted((b.workload, b.pod) for b in answer.binds) == [
        ("ml/small", "small-0"),
        ("ml/small", "small-1"),
    ]
    (small,) = answer.workloads
    assert (small.state, small.reason) == (pb.RUNNING, "")


def test_an_existing_workload_is_pipelined_for_its_namespace_only(
    service: SchedulerService, backend: SimBackend
) -> None:
    run_low_priority_gang(service, backend)
    # Submitted but not yet scheduled: the what-if cycle is the first to consider it.
    service.submit_workload(gpu_job("web", "urgent", "team-a", 1, 8, priority_class="build"), ANYONE)
    everyone = service.what_if(pb.WhatIfRequest(), ANYONE)
    assert [(p.workload, p.pod, p.node) for p in everyone.pipelined] == [("web/urgent", "urgent-0", "node-0")]
    urgent = {w.id: w for w in everyone.workloads}["web/urgent"]
    assert (urgent.state, urgent.reason) == (pb.PENDING, PIPELINED_REASON)
    ml_only = service.what_if(pb.WhatIfRequest(), Caller(frozenset({"ml"})))
    assert not ml_only.pipelined
    assert [w.id for w in ml_only.workloads] == ["ml/low"]
    assert {e.workload for e in ml_only.evictions} == {"ml/low"}
    # The preemptor lives in a namespace this caller may not see: it is not named (as Explain).
    assert {e.for_workload for e in everyone.evictions} == {"web/urgent"}
    assert {e.for_workload for e in ml_only.evictions} == {""}


def test_a_live_preemptor_says_it_is_pipelined_until_its_victims_are_gone(
    service: SchedulerService, backend: SimBackend
) -> None:
    run_low_priority_gang(service, backend)
    service.submit_workload(gpu_job("ml", "high", "team-a", 1, 8, priority_class="build"), ANYONE)
    record = backend.run_cycle()
    assert [(p.job, p.node) for p in record.plan.pipelined] == [("ml/high", "node-0")]
    high = service.get_workload(pb.GetWorkloadRequest(id="ml/high"), ANYONE)
    assert (high.state, high.reason) == (pb.PENDING, PIPELINED_REASON)
    assert "1 pod(s) pipelined to node-0" in high.message
    backend.run_cycle()  # the victims are gone: bound, no longer pipelined
    high = service.get_workload(pb.GetWorkloadRequest(id="ml/high"), ANYONE)
    assert (high.state, high.reason) == (pb.RUNNING, "")
