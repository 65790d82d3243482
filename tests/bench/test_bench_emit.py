"""Emitted shapes are valid conformance scenarios that reload to the very cluster bench times."""

from __future__ import annotations

import importlib.util
import json
from dataclasses import replace
from pathlib import Path
from types import ModuleType

import pytest
import yaml
from typer.testing import CliRunner

from kai_ray.bench.emit import write_scenario
from kai_ray.bench.shapes import build_shape
from kai_ray.cli import app
from kai_ray.cluster.sim.scenario import load_scenario
from kai_ray.engine.cycle import schedule
from kai_ray.model.snapshot import compile_snapshot

pytestmark = pytest.mark.unit

CHECK_PY = Path(__file__).resolve().parents[2].parent / "shared" / "conformance" / "check.py"
SHAPES = (
    "kai-allocate-4x10",
    "kai-gang-4x6x3",
    "kai-full-cycle-4x10",
    "kai-reclaim-large-4",
    "fill-4x40",
    "reclaim-4x2",
    "gang-3",
    "big-4x320",
)


@pytest.fixture(scope="module")
def check() -> ModuleType:
    spec = importlib.util.spec_from_file_location("conformance_check", CHECK_PY)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _emit(name: str, directory: Path) -> Path:
    path = directory / f"{name}.yaml"
    write_scenario(build_shape(name), path)
    return path


@pytest.mark.parametrize("name", SHAPES)
def test_emitted_scenario_validates(name: str, tmp_path: Path, check: ModuleType) -> None:
    document = yaml.safe_load(_emit(name, tmp_path).read_text())
    check.validate(document)
    assert document["config"]["mode"] == "single"
    assert document["config"]["actions"] == list(build_shape(name).actions)


@pytest.mark.parametrize("name", SHAPES)
def test_emitted_scenario_loads_back_to_the_same_cluster_and_config(name: str, tmp_path: Path) -> None:
    shape = build_shape(name)
    scenario = load_scenario(_emit(name, tmp_path))
    loaded = scenario.state
    assert len(loaded.nodes) == len(shape.state.nodes)
    assert len(loaded.jobs) == len(shape.state.jobs)
    assert sum(len(j.tasks) for j in loaded.jobs) == sum(len(j.tasks) for j in shape.state.jobs)
    assert loaded == shape.state
    assert scenario.config == shape.config
    assert scenario.cycles == 1


def test_a_pools_shape_loads_back_with_its_pools(tmp_path: Path) -> None:
    shape = build_shape("pools-2x2x4")
    loaded = load_scenario(_emit("pools-2x2x4", tmp_path)).state
    assert {job.node_pool for job in loaded.jobs} == {job.node_pool for job in shape.state.jobs} != {""}
    assert loaded == shape.state


def test_emission_is_byte_for_byte_reproducible(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir()
    second.mkdir()
    assert _emit("big-4x100", first).read_bytes() == _emit("big-4x100", second).read_bytes()


@pytest.mark.parametrize("name", ["kai-full-cycle-4x10", "kai-reclaim-large-4", "big-4x320"])
def test_simulate_on_the_emitted_file_agrees_with_bench_and_expected(
    name: str, tmp_path: Path, check: ModuleType
) -> None:
    path = _emit(name, tmp_path)
    result = CliRunner().invoke(app, ["simulate", str(path), "--output", "json"])
    assert result.exit_code == 0, result.output
    output = json.loads(result.stdout)
    shape = build_shape(name)
    plan = schedule(compile_snapshot(shape.state), shape.config)
    before = output["cycles"][0]["start"]["tasks"]
    after = output["tasks"]
    bound = {
        (key, state["node"])
        for key, state in after.items()
        if check.norm(state["status"]) == "Running" and before[key]["status"] == "Pending"
    }
    assert bound == {(f"{b.job}/{b.task}", b.node) for b in plan.binds}
    assert output["counts"] == {
        "binds": len(plan.binds),
        "evictions": len(plan.evictions),
        "pipelined": len(plan.pipelined),
    }
    assert check.compare(yaml.safe_load(path.read_text()), output) == []


def test_bench_command_emits_a_scenario_without_timing(tmp_path: Path) -> None:
    out = tmp_path / "shape.yaml"
    result = CliRunner().invoke(app, ["bench", "--shape", "gang-2", "--emit-scenario", str(out)])
    assert result.exit_code == 0, result.output
    assert "pods/s" not in result.stdout
    assert yaml.safe_load(out.read_text())["name"] == "gang-2"


def test_pod_labels_required_terms_and_extended_resources_load_back(
    tmp_path: Path, check: ModuleType
) -> None:
    """The affinity shape without its preferred terms (the format has none), with MIG profiles
    on its nodes and one in each pod's requests."""
    shape = build_shape("affinity-4x8")
    profiles = {"nvidia.com/mig-1g.10gb": 3.0, "nvidia.com/mig-2g.20gb": 0.0}
    shape.state.nodes = [replace(node, extended=profiles) for node in shape.state.nodes]
    for job in shape.state.jobs:
        for task in job.tasks:
            assert task.pod_affinity is not None and task.labels
            task.pod_affinity = replace(task.pod_affinity, preferred=())
            task.extended = (("nvidia.com/mig-1g.10gb", 1.0),)
    path = tmp_path / "affinity.yaml"
    write_scenario(shape, path)
    check.validate(yaml.safe_load(path.read_text()))
    assert load_scenario(path).state == shape.state


@pytest.mark.parametrize(
    ("name", "missing"), [("affinity-4x8", "preferred pod"), ("spread-4x8", "topology spread")]
)
def test_a_constraint_the_format_cannot_state_is_refused(name: str, missing: str, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=f"the scenario format has no {missing}"):
        write_scenario(build_shape(name), tmp_path / "shape.yaml")
