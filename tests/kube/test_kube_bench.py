"""`kai-ray bench --kube` on a small dev cluster of its own: the figures issue 12's targets are
stated in come from the API server's audit log and the scheduler's own CPU, and must add up."""

from __future__ import annotations

from pathlib import Path

import pytest
from kai_ray_operators.controller import PodGroupController

from kai_ray.bench.kube import run_kube_bench
from kai_ray.cluster.kube.bind_mode import BindMode

pytestmark = pytest.mark.kube


def test_direct_binds_cost_three_writes_a_pod_and_a_settled_cluster_is_left_alone(
    kube_bin_dir: Path, tmp_path: Path
) -> None:
    result = run_kube_bench(
        PodGroupController,
        nodes=4,
        pods=30,
        directory=tmp_path / "bench",
        bin_dir=kube_bin_dir,
        bind_mode=BindMode.DIRECT,
        idle_seconds=3.0,
    )
    assert (result.bound, result.timed_out, result.errors) == (30, False, [])
    writes = result.api_writes
    for write in ("create podgroups", "patch pods", "create pods/binding"):
        assert writes[write] == 30, writes  # one PodGroup, one link and one binding per pod
    assert not any("bindrequests" in write for write in writes), writes
    # Over 20 PodGroups bound in a cycle are announced per queue, never an Event per pod.
    assert writes.get("create events", 0) < 10, writes
    assert 3.0 <= result.api_writes_per_pod < 3.5
    assert result.scheduler_cpu_ms_per_pod > 0
    idle = result.idle
    assert idle["pods_running"] == 30 and idle["window_s"] == 3.0
    assert idle["cycles"] <= 2  # settled: the paced loop waits for a change (or its idle period)
    assert idle["full_cycle_cpu_s"] > 0
    document = result.as_json()
    assert document["shape"] == "kube-4x30" and document["pods_placed"] == 30
    assert document["bind_mode"] == "direct"
