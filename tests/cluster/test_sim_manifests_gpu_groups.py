"""A running fractional pod occupies a shared GPU, whatever told us which one."""

from __future__ import annotations

from pathlib import Path

import pytest
from kai_ray_operators.manifests import cluster_from_workload_manifests

from kai_ray.api.config import SchedulerConfig
from kai_ray.engine.cycle import schedule
from kai_ray.model.snapshot import compile_snapshot

pytestmark = pytest.mark.unit

BASE = """
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata: {name: q}
spec:
  resources:
    gpu: {quota: -1, limit: -1, overQuotaWeight: 1}
    cpu: {quota: -1, limit: -1, overQuotaWeight: 1}
    memory: {quota: -1, limit: -1, overQuotaWeight: 1}
---
apiVersion: v1
kind: Node
metadata: {name: n1, labels: {nvidia.com/gpu.memory: "40000"}}
status: {allocatable: {cpu: "8", memory: 64Gi, nvidia.com/gpu: "1", pods: "110"}}
---
apiVersion: v1
kind: Pod
metadata:
  name: running-half
  namespace: ns
  labels: {kai.scheduler/queue: q%(label)s}
  annotations: {gpu-fraction: "0.5"}
spec:
  schedulerName: kai-scheduler
  nodeName: n1
  containers: [{name: c}]
status: {phase: Running}
---
apiVersion: v1
kind: Pod
metadata: {name: whole, namespace: ns, labels: {kai.scheduler/queue: q}}
spec:
  schedulerName: kai-scheduler
  containers: [{name: c, resources: {limits: {nvidia.com/gpu: "1"}}}]
"""


@pytest.mark.parametrize("label", ["", ", runai-gpu-group: g-1"])
def test_a_running_fraction_pod_keeps_its_gpu_from_a_whole_gpu_pod(tmp_path: Path, label: str) -> None:
    manifest = tmp_path / "cluster.yaml"
    manifest.write_text(BASE % {"label": label})
    state, problems = cluster_from_workload_manifests(manifest)
    assert problems == []
    running = next(t for job in state.jobs for t in job.tasks if t.name == "running-half")
    assert running.gpu_groups
    plan = schedule(compile_snapshot(state), SchedulerConfig())
    assert [bind.task for bind in plan.binds] == []
    assert "whole" in " ".join(plan.pending_reasons)
