"""examples/quickstart converts into the cluster the quickstart describes."""

from __future__ import annotations

from pathlib import Path

import pytest
from kai_ray_operators.identity import stable_uid
from kai_ray_operators.manifests import cluster_from_workload_manifests

from kai_ray.model.objects import UNLIMITED, ClusterState, PodSetSpec, ResourceQuota, TaskStatus

pytestmark = pytest.mark.unit

QUICKSTART = Path(__file__).resolve().parents[2] / "examples" / "quickstart"


@pytest.fixture(scope="module")
def cluster() -> ClusterState:
    state, problems = cluster_from_workload_manifests(QUICKSTART)
    assert problems == []
    return state


def test_four_eight_gpu_nodes_with_gpu_memory(cluster: ClusterState) -> None:
    assert [n.name for n in cluster.nodes] == [f"gpu-node-{i}" for i in range(1, 5)]
    assert {(n.gpus, n.gpu_memory_mib, n.gpu_memory_synced, n.ready) for n in cluster.nodes} == {
        (8, 81900, True, True)
    }
    assert cluster.nodes[0].cpu_millis == 64_000
    assert cluster.nodes[0].memory == 512 * 2**30


def test_two_level_queue_tree(cluster: ClusterState) -> None:
    tree = {q.name: (q.parent, q.gpu.quota) for q in cluster.queues}
    assert tree == {"research": (None, 24), "team-a": ("research", 16), "team-b": ("research", 8)}
    team_a = next(q for q in cluster.queues if q.name == "team-a")
    assert team_a.gpu == ResourceQuota(16, UNLIMITED, 1)
    assert team_a.memory == ResourceQuota(UNLIMITED, UNLIMITED, 1)


def test_jobs_gang_and_fraction(cluster: ClusterState) -> None:
    jobs = {job.key: job for job in cluster.jobs}
    assert len(jobs) == 8
    gang = jobs["team-a/distributed-train"]
    assert gang.subgroups.all_pod_sets() == [PodSetSpec("default", 4)]
    assert [t.gpu for t in gang.tasks] == [4, 4, 4, 4]
    assert jobs["team-b/too-big"].subgroups.all_pod_sets() == [PodSetSpec("default", 5)]
    # A bare pod's PodGroup, made by the podgrouper: pg-<pod>-<uid>, the uid stable in manifests.
    notebook = jobs[f"team-b/pg-notebook-b-{stable_uid('v1', 'Pod', 'team-b', 'notebook-b')}"].tasks[0]
    assert (notebook.gpu, notebook.gpu_devices, notebook.is_shared_gpu) == (0.5, 1, True)
    assert all(t.status == TaskStatus.PENDING for job in cluster.jobs for t in job.tasks)
    assert {job.queue for job in cluster.jobs} == {"team-a", "team-b"}
    assert {(job.priority, job.preemptible) for job in cluster.jobs} == {(50, True)}
