"""After a cycle the tracker re-derives every workload without holding its lock, so submits and
reads go on meanwhile, and a workload a call changed in between keeps that call's view."""

from __future__ import annotations

import threading

import pytest
from service_builders import gpu_job

from kai_ray.rpc import workloads as workloads_module
from kai_ray.rpc.api import SchedulerService
from kai_ray.rpc.caller import ANYONE
from kai_ray.rpc.objects import unbound_pod
from kai_ray.rpc.sim_backend import SimBackend
from kai_ray.v1 import scheduler_pb2 as pb

pytestmark = pytest.mark.unit


def test_a_cycle_refresh_leaves_the_lock_free_and_keeps_a_cancel_made_meanwhile(
    service: SchedulerService, backend: SimBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    service.submit_workload(gpu_job("ml", "a", "team-a", 1, 1), ANYONE)
    service.submit_workload(gpu_job("ml", "b", "team-a", 1, 1), ANYONE)
    lock_free_while_deriving: list[bool] = []
    derive = workloads_module.derive

    def derive_during_refresh(*args: object, **kwargs: object) -> pb.Workload:
        if not lock_free_while_deriving:
            # Another thread (a submit's) must get the tracker's lock now.
            got: list[bool] = []

            def try_lock() -> None:
                acquired = service.workloads.lock.acquire(timeout=5)
                got.append(acquired)
                if acquired:
                    service.workloads.lock.release()

            other = threading.Thread(target=try_lock)
            other.start()
            other.join(timeout=10)
            lock_free_while_deriving.append(got == [True])
            # A call changes "ml/b" while the refresh is deriving it from the cycle.
            service.cancel_workload(pb.CancelWorkloadRequest(id="ml/b"), ANYONE)
        return derive(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(workloads_module, "derive", derive_during_refresh)
    backend.run_cycle()
    assert lock_free_while_deriving == [True]
    assert service.get_workload(pb.GetWorkloadRequest(id="ml/a"), ANYONE).state == pb.RUNNING
    # Not overwritten by the refresh's stale RUNNING view of it.
    assert service.get_workload(pb.GetWorkloadRequest(id="ml/b"), ANYONE).state == pb.CANCELLED
    states = [(e.workload.id, e.workload.state) for _, e in service.events]
    assert ("ml/b", pb.CANCELLED) in states and ("ml/b", pb.RUNNING) not in states


def test_a_running_workload_nothing_touched_is_not_derived_again(
    service: SchedulerService, backend: SimBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    service.submit_workload(gpu_job("ml", "steady", "team-a", 1, 1), ANYONE)
    service.submit_workload(gpu_job("ml", "waiting", "team-a", 1, 64), ANYONE)  # never fits
    backend.run_cycle()
    derived: list[str] = []
    derive = workloads_module.derive

    def counting(members: workloads_module.Members, *args: object) -> pb.Workload:
        derived.append(members.id)
        return derive(members, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(workloads_module, "derive", counting)
    backend.run_cycle()
    # The waiting one's reason comes from each cycle; the running one's view from its objects.
    assert derived == ["ml/waiting"]
    # Its pod replaced (here: the node it runs on gone, its pod recreated pending) is a change.
    view = backend.view()
    pod = view.get("Pod", "ml", "steady-0")
    assert pod is not None
    backend.delete([("Pod", "ml", "steady-0")])
    backend.create([unbound_pod(pod)])
    derived.clear()
    backend.run_cycle()
    assert "ml/steady" in derived
