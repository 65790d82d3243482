"""A scenario may put queues and jobs in a node pool (`nodePool`, kai-ray's addition to FORMAT.md)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kai_ray.cluster.sim.scenario import ScenarioError, load_scenario

pytestmark = pytest.mark.unit

SCENARIO = Path(__file__).resolve().parents[2] / "examples" / "scenarios" / "gpu-pack.yaml"


def with_pools(tmp_path: Path, queue_pool: object, job_pool: object) -> Path:
    raw = yaml.safe_load(SCENARIO.read_text())
    raw["queues"][-1]["nodePool"] = queue_pool
    raw["jobs"][0]["nodePool"] = job_pool
    path = tmp_path / "pooled.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_node_pool_is_read_on_queues_and_jobs_and_absent_means_unlabelled(tmp_path: Path) -> None:
    state = load_scenario(with_pools(tmp_path, "gpu", "gpu")).state
    assert [q.node_pool for q in state.queues] == [""] * (len(state.queues) - 1) + ["gpu"]
    assert [j.node_pool for j in state.jobs] == ["gpu"] + [""] * (len(state.jobs) - 1)


def test_a_node_pool_that_is_not_a_string_is_refused_naming_the_object(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match="nodePool must be a string"):
        load_scenario(with_pools(tmp_path, "gpu", 7))
