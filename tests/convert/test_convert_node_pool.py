"""Queues and PodGroups carry their node-pool label into the engine's objects (`node_pool`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kai_ray.api.manifests import read_manifest_documents
from kai_ray.model.objects import ClusterState

pytestmark = pytest.mark.unit

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "node-pools"


def example_cluster() -> ClusterState:
    from kai_ray_operators.manifests import cluster_from_workload_documents

    documents, read_problems = read_manifest_documents(EXAMPLE)
    state, problems = cluster_from_workload_documents(documents, read_problems)
    assert [p for p in problems if not p.warning] == []
    return state


def test_queues_take_the_pool_of_their_label_and_unlabelled_ones_none() -> None:
    pools = {queue.name: queue.node_pool for queue in example_cluster().queues}
    assert pools == {"vision": "a100", "llm": "h100", "notebooks": ""}


def test_podgroups_take_the_pool_the_podgrouper_copied_from_their_workload() -> None:
    # PodGroup names are pg-<workload>-<uuid of five dash-separated parts>.
    pools = {"-".join(job.name.split("-")[1:-5]): job.node_pool for job in example_cluster().jobs}
    assert pools == {
        "resnet": "a100",
        "resnet-extra": "a100",
        "finetune": "h100",
        "llm-on-a100": "a100",
        "notebook": "",
    }
