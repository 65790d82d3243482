"""`kai-ray simulate` with time-based fair share: spec Example 7 through the CLI, the clock, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kai_ray.cli import app

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_7 = ROOT / "examples" / "time-based-fairshare" / "example-7.yaml"


def simulate(*args: str) -> str:
    result = CliRunner().invoke(app, ["simulate", *map(str, args)])
    assert result.exit_code == 0, result.output
    return result.output


def gpu_cells(table: str) -> dict[str, tuple[str, str]]:
    """Queue → (GPU 'fair / allocated / requested', last column) from the queue table."""
    cells = {}
    for line in table.splitlines():
        parts = [part.strip() for part in line.split("│")]
        if len(parts) > 2 and parts[1] in ("team-a", "team-b", "dept-a", "dept-b"):
            cells[parts[1]] = (parts[2], parts[-2])
    return cells


def running_per_queue(output: str) -> dict[str, int]:
    tasks = json.loads(output)["tasks"]
    counts = {"team-a": 0, "team-b": 0}
    for key, task in tasks.items():
        if task["status"] == "Running":
            counts["team-a" if key.startswith("a-") else "team-b"] += 1
    return counts


def with_usage_block(tmp_path: Path, block: str) -> Path:
    text = EXAMPLE_7.read_text()
    start, end = text.index("usage:\n"), text.index("nodes:\n")
    path = tmp_path / "scenario.yaml"
    path.write_text(text[:start] + block + text[end:])
    return path


def test_example_7_divides_5_and_11_and_b_reclaims_down_to_it() -> None:
    cells = gpu_cells(simulate(EXAMPLE_7, "--cycles", "1"))
    assert cells["team-a"] == ("5 / 5 / 16", "0.600 / 0.000 / 0.000")
    assert cells["team-b"] == ("11 / 11 / 16", "0.100 / 0.000 / 0.000")
    assert running_per_queue(simulate(EXAMPLE_7, "--output", "json")) == {"team-a": 5, "team-b": 11}


def test_example_7_with_k_2_divides_3_and_13(tmp_path: Path) -> None:
    block = "usage:\n  kValue: 2\n  queues:\n    team-a: {gpu: 0.6}\n    team-b: {gpu: 0.1}\n"
    cells = gpu_cells(simulate(with_usage_block(tmp_path, block), "--cycles", "1"))
    assert (cells["team-a"][0], cells["team-b"][0]) == ("3 / 3 / 16", "13 / 13 / 16")


def test_example_7_without_usage_keeps_8_and_8_and_reclaims_nothing(tmp_path: Path) -> None:
    path = with_usage_block(tmp_path, "")
    output = simulate(path, "--cycles", "1")
    assert "usage GPU" not in output
    assert gpu_cells(output)["team-a"][0] == "8 / 8 / 16"
    assert running_per_queue(simulate(path, "--output", "json")) == {"team-a": 8, "team-b": 8}


def test_the_clock_step_lets_past_usage_decay(tmp_path: Path) -> None:
    block = (
        "usage:\n  usageDBConfig: {usageParams: {windowSize: 1w, halfLifePeriod: 1h}}\n"
        "  queues:\n    team-a: {gpu: 0.6}\n    team-b: {gpu: 0.1}\n"
    )
    path = with_usage_block(tmp_path, block)
    # One minute on, the week stated (about 87 steps' worth at a 1 h half-life) still dominates.
    standing = gpu_cells(simulate(path, "--cycles", "2", "--clock-step", "1m"))
    assert standing["team-a"][1].startswith("0.59")
    # A day later, 24 half-lives on, the recent 5 / 11 split is nearly all the window remembers.
    aged = gpu_cells(simulate(path, "--cycles", "2", "--clock-step", "1d"))
    assert float(aged["team-a"][1].split(" / ")[0]) == pytest.approx(5 / 16, abs=1e-3)
    assert float(aged["team-b"][1].split(" / ")[0]) == pytest.approx(11 / 16, abs=1e-3)


@pytest.mark.parametrize(
    ("block", "message"),
    [
        ("usage:\n  queues: {team-a: {gpus: 0.6}}\n", "usage.queues.team-a.gpus: unknown resource"),
        ("usage:\n  queues: {team-a: {gpu: -1}}\n", "usage.queues.team-a.gpu: must not be negative"),
        ("usage:\n  kValue: high\n", "usage.kValue: must be a number, got 'high'"),
        (
            "usage:\n  usageDBConfig: {usageParams: {halfLifePeriod: soon}}\n",
            "usage.usageDBConfig.usageParams.halfLifePeriod: expected a duration",
        ),
    ],
)
def test_a_bad_usage_block_names_its_field(tmp_path: Path, block: str, message: str) -> None:
    result = CliRunner().invoke(app, ["simulate", str(with_usage_block(tmp_path, block))])
    assert result.exit_code == 2
    assert message in result.output


def test_a_bad_clock_step_is_refused() -> None:
    result = CliRunner().invoke(app, ["simulate", str(EXAMPLE_7), "--clock-step", "later"])
    assert result.exit_code == 2
    assert "--clock-step" in result.output


@pytest.mark.parametrize("command", ["--cycles 1", "--cycles 3 --clock-step 1d"])
def test_the_docs_show_the_examples_real_output(command: str) -> None:
    page = (ROOT / "docs" / "fairshare.md").read_text()
    prompt = f"    $ kai-ray simulate examples/time-based-fairshare/example-7.yaml {command}\n"
    block = page.split(prompt, 1)[1].split("\n\n", 1)[0]
    shown = [line.removeprefix("    ").rstrip() for line in block.splitlines()]
    actual = [line.rstrip() for line in simulate(EXAMPLE_7, *command.split()).splitlines()]
    assert actual[: len(shown)] == shown


MANIFESTS = """\
apiVersion: v1
kind: Node
metadata: {name: n1}
status: {allocatable: {cpu: "16", memory: 64Gi, nvidia.com/gpu: "8", pods: "110"}}
""" + "".join(
    f"""---
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata: {{name: {name}}}
spec:
  resources:
    gpu: {{quota: 0, limit: -1, overQuotaWeight: 1}}
    cpu: {{quota: -1, limit: -1, overQuotaWeight: 1}}
    memory: {{quota: -1, limit: -1, overQuotaWeight: 1}}
---
apiVersion: v1
kind: Pod
metadata: {{name: {name}-pod, namespace: ns, labels: {{kai.scheduler/queue: {name}}}}}
spec:
  schedulerName: kai-scheduler
  containers: [{{name: c, resources: {{limits: {{nvidia.com/gpu: "8"}}}}}}]
"""
    for name in ("team-a", "team-b")
)


def test_manifests_take_past_usage_from_a_file(tmp_path: Path) -> None:
    (tmp_path / "cluster.yaml").write_text(MANIFESTS)
    usage = tmp_path / "usage.yaml"
    usage.write_text("queues:\n  team-a: {gpu: 0.75}\n  team-b: {gpu: 0.25}\n")
    cells = gpu_cells(simulate(tmp_path / "cluster.yaml", "--usage", usage))
    # P_A = 0.5 + (0.5 - 0.75) = 0.25, P_B = 0.75: 8 GPUs split 2 / 6.
    assert (cells["team-a"][0].split(" / ")[0], cells["team-b"][0].split(" / ")[0]) == ("2", "6")
    assert cells["team-a"][1] == "0.750 / 0.000 / 0.000"
    plain = gpu_cells(simulate(tmp_path / "cluster.yaml"))
    assert (plain["team-a"][0].split(" / ")[0], plain["team-b"][0].split(" / ")[0]) == ("4", "4")


def test_a_scenario_with_its_own_usage_refuses_another(tmp_path: Path) -> None:
    usage = tmp_path / "usage.yaml"
    usage.write_text("queues: {}\n")
    result = CliRunner().invoke(app, ["simulate", str(EXAMPLE_7), "--usage", str(usage)])
    assert result.exit_code == 2
    assert "the scenario states its usage already; --usage is for manifests" in result.output


def test_a_bad_usage_file_names_the_file_and_the_field(tmp_path: Path) -> None:
    (tmp_path / "cluster.yaml").write_text(MANIFESTS)
    usage = tmp_path / "usage.yaml"
    usage.write_text("queues:\n  team-a: {gpu: lots}\n")
    result = CliRunner().invoke(app, ["simulate", str(tmp_path / "cluster.yaml"), "--usage", str(usage)])
    assert result.exit_code == 2
    assert f"{usage}.queues.team-a.gpu: must be a number, got 'lots'" in result.output


def test_usage_stated_for_leaves_is_added_up_into_their_parents(tmp_path: Path) -> None:
    """Each team under its own department: the departments divide the cluster by their teams' usage."""
    text = EXAMPLE_7.read_text()
    departments = "".join(
        f"- name: dept-{team}\n  parent: null\n  priority: 100\n  createdMinute: 0\n  resources:\n"
        "    gpu: {quota: 0, limit: -1, overQuotaWeight: 1}\n"
        "    cpu: {quota: -1, limit: -1, overQuotaWeight: 1}\n"
        "    memory: {quota: -1, limit: -1, overQuotaWeight: 1}\n"
        for team in ("a", "b")
    )
    text = text.replace(
        "queues:\n- name: team-a\n  parent: null", f"queues:\n{departments}- name: team-a\n  parent: dept-a"
    )
    text = text.replace("- name: team-b\n  parent: null", "- name: team-b\n  parent: dept-b")
    path = tmp_path / "scenario.yaml"
    path.write_text(text)
    cells = gpu_cells(simulate(path, "--cycles", "1"))
    assert cells["dept-a"] == ("5 / 5 / 16", "0.600 / 0.000 / 0.000")
    assert cells["dept-b"] == ("11 / 11 / 16", "0.100 / 0.000 / 0.000")
