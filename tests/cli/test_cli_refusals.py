"""The engine's node refusals read the same in `kai-ray simulate`'s table and `kai-ray explain`:
examples/quickstart's four nodes and five pods that each want a host of their own."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from kai_ray.cli import app

pytestmark = pytest.mark.unit

QUICKSTART = Path(__file__).resolve().parents[2] / "examples" / "quickstart"
ANTI_AFFINITY = "pod anti-affinity with team-a/web-0 on kubernetes.io/hostname"


def web_pod(index: int) -> dict[str, object]:
    term = {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"web-{index}",
            "namespace": "team-a",
            "labels": {"kai.scheduler/queue": "team-a", "app": "web"},
        },
        "spec": {
            "schedulerName": "kai-scheduler",
            "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}},
            "containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": "1"}}}],
        },
    }


@pytest.fixture
def one_per_host(tmp_path: Path) -> Path:
    for name in ("nodes.yaml", "queues.yaml"):
        shutil.copy(QUICKSTART / name, tmp_path / name)
    (tmp_path / "web.yaml").write_text(yaml.safe_dump_all([web_pod(i) for i in range(5)]))
    return tmp_path


def run(*args: str) -> str:
    result = CliRunner().invoke(app, list(args), env={"COLUMNS": "400"})
    assert result.exit_code == 0, result.output
    return result.stdout


def test_simulate_and_explain_name_the_anti_affinity_that_keeps_the_fifth_pod_out(one_per_host: Path) -> None:
    table = run("simulate", str(one_per_host))
    waiting = next(line for line in table.splitlines() if "pg-web-4" in line)
    assert "Pending" in waiting and f"4 nodes: {ANTI_AFFINITY}" in waiting
    explained = run("explain", "team-a/web-4", "--manifests", str(one_per_host))
    assert f"  4 of 4 nodes: {ANTI_AFFINITY}  [InterPodAntiAffinity]" in explained
    assert "keeps the pod away  [ExistingPodsAntiAffinity]" in explained
    assert "0 more would fit now" in explained
