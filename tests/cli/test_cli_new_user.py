"""What a new user tripped over (issue 11): the terminal width, the help, and `simulate` on input
that is not what it expects (an empty directory, scenario files, a negative quantity, a gang with
fewer pods than its minMember)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.core import TyperArgument, TyperOption
from typer.testing import CliRunner

from kai_ray.bench.shapes import SHAPES
from kai_ray.cli import app

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "examples" / "quickstart"
SCENARIOS = ROOT / "examples" / "scenarios"

QUEUE_AND_NODE = """\
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata: {name: default-queue}
spec:
  resources:
    gpu: {quota: -1, limit: -1, overQuotaWeight: 1}
---
apiVersion: v1
kind: Node
metadata: {name: n1}
status: {allocatable: {cpu: "8", memory: 32Gi, nvidia.com/gpu: "8", pods: "110"}}
"""

POD = """\
---
apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: ns
  labels: {{kai.scheduler/queue: default-queue}}
  annotations: {{pod-group-name: pg}}
spec:
  schedulerName: kai-scheduler
  containers:
    - name: c
      resources: {{requests: {{nvidia.com/gpu: "{gpus}"}}, limits: {{nvidia.com/gpu: "{gpus}"}}}}
"""

GANG_OF_FIVE = """\
---
apiVersion: scheduling.run.ai/v2alpha2
kind: PodGroup
metadata: {name: pg, namespace: ns}
spec: {minMember: 5, queue: default-queue}
"""


def run(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args), env=env)
    return result.exit_code, result.stdout, result.stderr


def _commands(command: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    yield path, command
    for name, child in getattr(command, "commands", {}).items():
        yield from _commands(child, (*path, name))


COMMANDS = list(_commands(typer.main.get_command(app)))


def test_simulate_tables_follow_the_terminal_width() -> None:
    widths = {}
    for columns in (90, 200):
        code, out, _ = run("simulate", str(QUICKSTART), env={"COLUMNS": str(columns)})
        assert code == 0
        widths[columns] = max(len(line) for line in out.splitlines())
    assert widths[90] <= 90
    assert widths[200] > 90  # the pending gang's reason takes the room it is given


def test_every_option_and_argument_has_help_text() -> None:
    missing = [
        f"{' '.join(path)} {param.name}"
        for path, command in COMMANDS
        for param in command.params
        if isinstance(param, TyperOption | TyperArgument) and not param.help
    ]
    assert missing == []


@pytest.mark.parametrize("path", [path for path, _ in COMMANDS], ids=lambda p: " ".join(p) or "kai-ray")
def test_help_has_no_type_noise_or_braces(path: tuple[str, ...]) -> None:
    code, out, _ = run(*path, "--help", env={"COLUMNS": "200"})
    assert code == 0
    assert "<bool>" not in out
    usage = next(line for line in out.splitlines() if "Usage:" in line)
    assert "{" not in usage and "}" not in usage


def test_simulate_usage_names_its_argument() -> None:
    _, out, _ = run("simulate", "--help", env={"COLUMNS": "200"})
    assert "simulate [OPTIONS] PATH " in out


def test_bench_help_lists_the_shapes() -> None:
    _, out, _ = run("bench", "--help", env={"COLUMNS": "300"})
    for shape in SHAPES:
        assert shape in out


def test_an_empty_directory_is_refused(tmp_path: Path) -> None:
    code, out, err = run("simulate", str(tmp_path))
    assert code == 2
    assert out == ""
    assert (
        err.strip()
        == f"{tmp_path}: no Kubernetes manifests in it (looked for *.yaml, *.yml and *.json files)"
    )


def test_a_directory_without_manifests_is_refused(tmp_path: Path) -> None:
    (tmp_path / "README.md").write_text("# notes\n")
    (tmp_path / "empty.yaml").write_text("---\n# nothing here\n")
    code, out, err = run("simulate", str(tmp_path))
    assert code == 2
    assert out == ""
    assert "no Kubernetes manifests" in err


def test_a_directory_of_scenarios_says_they_run_one_file_at_a_time() -> None:
    code, out, err = run("simulate", str(SCENARIOS))
    assert code == 2
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1
    assert "scenarios are run one file at a time" in lines[0]
    assert "gpu-pack.yaml" in lines[0]


def test_a_negative_quantity_is_refused_naming_the_field(tmp_path: Path) -> None:
    (tmp_path / "cluster.yaml").write_text(QUEUE_AND_NODE + POD.format(name="p", gpus=-1))
    code, out, err = run("simulate", str(tmp_path))
    assert code == 2
    assert out == ""
    assert (
        "Pod/ns/p: spec.containers[0].resources.requests[nvidia.com/gpu]: "
        "must be greater than or equal to 0, got '-1'"
    ) in err


def test_min_member_above_the_pod_count_is_said_once_with_the_counts(tmp_path: Path) -> None:
    pods = "".join(POD.format(name=f"p{i}", gpus=1) for i in range(2))
    (tmp_path / "cluster.yaml").write_text(QUEUE_AND_NODE + GANG_OF_FIVE + pods)
    code, out, _ = run("simulate", str(tmp_path), env={"COLUMNS": "300"})
    assert code == 0
    assert out.count("5 required, 2 exist") == 1
    assert "allocate:" not in out
