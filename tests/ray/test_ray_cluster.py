"""`--ray-address` against a real Ray cluster of two node processes on this machine.

The test process already runs its own local Ray (the `local_ray` session fixture), and one
process joins one Ray instance, so everything that uses the cluster runs as a subprocess:
`kai-ray simulate` and `kai-ray bench` as a user would run them, and a small script that reads
the cluster's node and actor tables to show the shards really ran there.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from multi_node_ray import KAI_RAY, RAY, MultiNodeRay, start_cluster

pytestmark = pytest.mark.ray

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
RUN_TIMEOUT_SECONDS = 300.0
"""A kai-ray run joins the cluster, starts three actors and schedules: seconds, minutes when loaded."""
SHARDS = 2


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MultiNodeRay]:
    if not RAY.exists():
        pytest.skip(f"no `ray` command next to this Python ({RAY}): cannot start a Ray cluster")
    started = start_cluster(tmp_path_factory.mktemp("ray-cluster"))
    yield started
    started.stop()


def simulate(cluster: MultiNodeRay, path: Path, *executor: str) -> dict[str, object]:
    done = cluster.run(
        [str(KAI_RAY), "simulate", str(path), "--output", "json", *executor], RUN_TIMEOUT_SECONDS
    )
    document: dict[str, object] = json.loads(done.stdout)
    return document


def new_jobs(before: set[str], cluster: MultiNodeRay) -> tuple[set[str], list[dict[str, str]]]:
    """The jobs (drivers) that started actors since `before`, and their actors, each on a node of
    this cluster."""
    view = cluster.view()
    actors = [actor for actor in view.actors if actor["job"] not in before]
    assert {actor["node"] for actor in actors} <= set(view.nodes), f"actors off the cluster: {actors}"
    return {actor["job"] for actor in actors}, actors


def test_the_cluster_has_two_alive_nodes(cluster: MultiNodeRay) -> None:
    assert len(cluster.view().nodes) == 2


@pytest.mark.parametrize(
    "scenario", [EXAMPLES / "scenarios" / "gpu-pack.yaml", EXAMPLES / "topology"], ids=lambda path: path.name
)
def test_simulate_on_the_cluster_prints_what_the_local_executor_prints(
    cluster: MultiNodeRay, scenario: Path
) -> None:
    before = {actor["job"] for actor in cluster.view().actors}
    sharded = simulate(
        cluster, scenario, "--executor", "ray", "--shards", str(SHARDS), "--ray-address", cluster.address
    )
    local = simulate(cluster, scenario, "--executor", "local")
    assert sharded == local
    jobs, actors = new_jobs(before, cluster)
    assert len(jobs) == 1, f"one kai-ray driver should have started actors, saw jobs {jobs}: {actors}"
    shards = [actor for actor in actors if actor["class"] == "NodeShard"]
    assert len(shards) == SHARDS, f"expected {SHARDS} NodeShard actors on the cluster, saw {actors}"
    assert [actor["class"] for actor in actors].count("Coordinator") == 1, actors


def test_bench_on_the_cluster_ranks_in_its_shards_without_falling_back(
    cluster: MultiNodeRay, tmp_path: Path
) -> None:
    before = {actor["job"] for actor in cluster.view().actors}
    result_path = tmp_path / "bench.json"
    cluster.run(
        [
            *(str(KAI_RAY), "bench", "--shape", "kai-allocate-10x50", "--repeat", "1"),
            *("--executor", "ray", "--shards", str(SHARDS), "--ray-address", cluster.address),
            *("--json", str(result_path)),
        ],
        RUN_TIMEOUT_SECONDS,
    )
    result = json.loads(result_path.read_text())
    assert (result["executor"], result["shards"]) == ("ray", SHARDS), result
    sharding = result["sharding"]
    assert sharding is not None, f"the shards recorded no batch: {result}"
    assert sharding["batches"] >= 1 and sharding["fallbacks"] == 0, sharding
    assert result["pods_placed"] > 0, result
    _, actors = new_jobs(before, cluster)
    assert sorted(actor["class"] for actor in actors) == ["Coordinator", *["NodeShard"] * SHARDS], actors
