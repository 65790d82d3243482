"""`kai-ray simulate` end to end: table, JSON and bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kai_ray.cli import app

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "examples" / "quickstart"
SCENARIOS = ROOT.parent / "shared" / "conformance" / "scenarios"
GANG_SCENARIO = SCENARIOS / "gang" / "don-t-allocate-gang-job-if-not-all-tasks-are-allocatable.yaml"

BAD_MANIFEST = """\
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata: {name: team-a}
spec:
  resources:
    gpu: {quota: -3, limit: -1, overQuotaWeight: 1}
---
apiVersion: v1
kind: Frobnicator
metadata: {name: x}
---
apiVersion: v1
kind: Pod
metadata: {name: p, namespace: ns, labels: {kai.scheduler/queue: nope}}
spec:
  schedulerName: kai-scheduler
  containers: [{name: c, resources: {requests: {cpu: "1"}}}]
"""


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_quickstart_table_shows_queues_jobs_and_why_the_big_gang_waits() -> None:
    code, out, _ = run("simulate", str(QUICKSTART))
    assert code == 0
    assert "team-a" in out and "team-b" in out
    big_gang_line = next(line for line in out.splitlines() if "too-big" in line)
    assert "Pending" in big_gang_line
    assert "gang needs 5" in out
    assert "distributed-train" in out


def test_scenario_json_is_byte_identical_across_runs() -> None:
    first = run("simulate", str(GANG_SCENARIO), "--output", "json")
    second = run("simulate", str(GANG_SCENARIO), "--output", "json")
    assert first[0] == 0
    assert first[1] == second[1]
    document = json.loads(first[1])
    assert len(document["cycles"]) == 1
    assert document["counts"]["binds"] == 0


def test_cycles_option_runs_that_many_cycles() -> None:
    code, out, _ = run("simulate", str(QUICKSTART), "--cycles", "3", "--output", "json")
    assert code == 0
    assert len(json.loads(out)["cycles"]) == 3


def test_bad_manifests_exit_2_with_one_line_per_problem(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(BAD_MANIFEST)
    code, out, err = run("simulate", str(bad))
    assert code == 2
    assert out == ""
    lines = err.strip().splitlines()
    assert f"{bad}: Queue/team-a: spec.resources.gpu.quota: must be >= 0 or -1, got -3" in lines
    assert any(line.startswith(f"{bad}: Frobnicator/x: kind") for line in lines)
    # The podgrouper gave the pod its PodGroup, whose queue (from the pod's label) does not exist:
    # one line, about the pod the user wrote, naming its PodGroup.
    (queue_line,) = [line for line in lines if "nope" in line]
    assert queue_line.startswith(f"{bad}: Pod/ns/p: spec.queue of its PodGroup pg-p-")
    assert queue_line.endswith(": queue 'nope' does not exist")
    assert "Traceback" not in err


def test_missing_path_exits_2() -> None:
    code, _, err = run("simulate", "/nonexistent/kai-ray/input")
    assert code == 2
    assert "no such file or directory" in err


def test_malformed_scenario_exits_2(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("schemaVersion: 1\nname: x\nconfig: {}\n")
    code, _, err = run("simulate", str(broken))
    assert code == 2
    assert "malformed scenario" in err


def test_scenario_with_a_long_header_and_namespaced_jobs_keys_tasks_by_job_name(tmp_path: Path) -> None:
    source = GANG_SCENARIO.read_text().replace("namespace: ''", "namespace: demo")
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text("# " + "x" * 400 + "\n" + source)
    code, out, _ = run("simulate", str(scenario), "--output", "json")
    assert code == 0
    keys = set(json.loads(out)["tasks"])
    assert keys and all(key.count("/") == 1 for key in keys)


SPREAD_CONFIG = ROOT / "examples" / "scheduler-config" / "config.yaml"


def test_a_scheduler_config_changes_where_pods_go() -> None:
    """The example config spreads GPU pods; the default packs them: the JSON must differ."""
    runner = CliRunner()
    packed = runner.invoke(app, ["simulate", str(QUICKSTART), "--output", "json"])
    spread = runner.invoke(
        app, ["simulate", str(QUICKSTART), "--output", "json", "--config", str(SPREAD_CONFIG)]
    )
    assert packed.exit_code == 0 and spread.exit_code == 0, spread.output
    assert json.loads(packed.stdout) != json.loads(spread.stdout)


def test_a_bad_scheduler_config_is_refused_with_one_line_per_problem(tmp_path: Path) -> None:
    bad = tmp_path / "config.yaml"
    bad.write_text('actions: "allocate, preemt"\n')
    result = CliRunner().invoke(app, ["simulate", str(QUICKSTART), "--config", str(bad)])
    assert result.exit_code == 2
    known = "allocate, consolidation, reclaim, preempt, stalegangeviction"
    assert result.stderr.strip().splitlines() == [f"{bad}: actions: unknown action 'preemt' (known: {known})"]


CONFLICTING_QUEUES = """\
apiVersion: v1
kind: Node
metadata: {name: n1}
status: {allocatable: {cpu: "8", memory: 32Gi, nvidia.com/gpu: "1"}}
---
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata: {name: team-a}
spec: {resources: {gpu: {quota: 1, limit: -1}, cpu: {quota: -1, limit: -1}, memory: {quota: -1, limit: -1}}}
---
apiVersion: batch/v1
kind: Job
metadata: {name: train, namespace: ns, labels: {kai.scheduler/queue: team-a}}
spec:
  template:
    metadata: {labels: {kai.scheduler/queue: team-b}}
    spec:
      schedulerName: kai-scheduler
      containers: [{name: c, resources: {limits: {nvidia.com/gpu: "1"}}}]
"""


def test_a_grouping_notice_is_a_warning_and_the_simulation_runs(tmp_path: Path) -> None:
    """A pod whose queue label the Job's overrides is grouped as KAI does; the user is told."""
    manifest = tmp_path / "job.yaml"
    manifest.write_text(CONFLICTING_QUEUES)
    code, out, err = run("simulate", str(manifest), "--output", "json")
    assert code == 0, err
    (warning,) = err.strip().splitlines()
    expected = f"warning: {manifest}:11: Pod/ns/train-0: its kai.scheduler/queue label 'team-b'"
    assert warning.startswith(expected)
    assert json.loads(out)["counts"]["binds"] == 1  # scheduled in team-a, the Job's queue


def test_the_topology_example_packs_gangs_into_racks_and_says_which_rack_came_closest() -> None:
    """docs/topology.md tells this outcome of examples/topology."""
    code, out, _ = run("simulate", str(ROOT / "examples" / "topology"), "--output", "json")
    assert code == 0
    tasks = json.loads(out)["tasks"]
    nodes = {key.split("/")[1]: task["node"] for key, task in tasks.items()}
    assert {nodes[f"train-{i}"] for i in range(4)} == {"rack1-node1", "rack1-node2"}
    assert {nodes[f"tune-{i}"] for i in range(4)} | {nodes[f"sweep-{i}"] for i in range(3)} == {
        "rack2-node1",
        "rack2-node2",
    }
    assert all(nodes[f"eval-{i}"] is None for i in range(4))
    wide = CliRunner().invoke(app, ["simulate", str(ROOT / "examples" / "topology")], env={"COLUMNS": "250"})
    assert "closest: example.com/rack zone-a.rack-1 has 2 of 4 GPUs" in wide.stdout
