"""The chart lints, its schema refuses what it does not know, and it renders exactly the golden files.

The goldens in ``tests/helm/golden/`` are ``helm template kai-ray charts/kai-ray -n kai-ray-system``
with each value set below (CRDs left out: ``make crds`` generates them and tests/api checks them).
A change to a template or to values.yaml shows up as a diff to review; after reviewing it,
regenerate the files with

    KAI_RAY_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/helm/test_chart_render.py

and commit them with the change (bumping Chart.yaml's version changes every file's labels).
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path

import pytest
from chart_support import CHART, EXAMPLES, HelmRunner, template_args

pytestmark = pytest.mark.kube  # needs the helm binary

GOLDEN = Path(__file__).resolve().parent / "golden"
UPDATE = os.environ.get("KAI_RAY_UPDATE_GOLDEN") == "1"

#: golden file name -> values (values files or --set assignments).
VALUE_SETS: dict[str, tuple[str | Path, ...]] = {
    "defaults": (),
    "in-process-podgrouper": (EXAMPLES / "in-process-podgrouper.yaml",),
    "spread-custom-plugins": (EXAMPLES / "spread-custom-plugins.yaml",),
    "single-replica": (EXAMPLES / "single-replica.yaml",),
    "beside-kai": (EXAMPLES / "beside-kai.yaml",),
    "grpc-api": (EXAMPLES / "grpc-api.yaml",),
}


def test_the_chart_lints_strictly(helm: HelmRunner) -> None:
    out = helm("lint", "--strict", CHART).stdout
    assert "0 chart(s) failed" in out, out
    assert "[WARNING]" not in out and "[ERROR]" not in out, out


@pytest.mark.parametrize("example", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.name)
def test_every_example_values_file_lints(helm: HelmRunner, example: Path) -> None:
    helm("lint", "--strict", CHART, "--values", example)


def test_every_example_has_a_golden() -> None:
    """A new example values file must be rendered into a golden too, or its output is untested."""
    examples = {path.stem for path in EXAMPLES.glob("*.yaml")}
    assert examples <= set(VALUE_SETS), sorted(examples - set(VALUE_SETS))


@pytest.mark.parametrize(
    ("values", "complaint"),
    [
        # A typo'd key: the schema names it instead of Helm silently ignoring it.
        ("scheduler:\n  replica: 3\n", "additional properties 'replica' not allowed"),
        ("podgrouper:\n  inprocess: true\n", "additional properties 'inprocess' not allowed"),
        ("sheduler: {}\n", "additional properties 'sheduler' not allowed"),
        # KAI's keys kai-ray does not have are refused, not ignored.
        ("global:\n  registry: nvcr.io\n", "additional properties 'registry' not allowed"),
        # Wrong types.
        ("scheduler:\n  replicas: two\n", "at '/scheduler/replicas': got string, want integer"),
        ('podgrouper:\n  inProcess: "yes"\n', "at '/podgrouper/inProcess': got string, want boolean"),
        ("scheduler:\n  placementStrategy: pack\n", "at '/scheduler/placementStrategy'"),
        ("scheduler:\n  plugins:\n    proportion: {priority: high}\n", "/plugins/proportion/priority"),
        ("scheduler:\n  actions:\n    consolidate: {enabled: false}\n", "'consolidate' not allowed"),
        ("scheduler:\n  extraArgs: [period=2]\n", "at '/scheduler/extraArgs/0'"),
        ("image:\n  tag: 1\n", "at '/image/tag': got number, want string"),
        ("scheduler:\n  grpc:\n    tls: {secret: x}\n", "additional properties 'secret' not allowed"),
        ("scheduler:\n  grpc:\n    service: {type: Headless}\n", "at '/scheduler/grpc/service/type'"),
        ("scheduler:\n  grpc:\n    port: 0\n", "at '/scheduler/grpc/port'"),
    ],
    ids=lambda v: v.splitlines()[0] if "\n" in v else None,
)
def test_the_schema_refuses_unknown_keys_and_wrong_types(
    helm: HelmRunner, tmp_path: Path, values: str, complaint: str
) -> None:
    bad = tmp_path / "values.yaml"
    bad.write_text(values)
    for command in (("lint", CHART), template_args(bad)):
        args = [*command, "--values", bad] if command[0] == "lint" else command
        proc = helm(*args, check=False)
        assert proc.returncode != 0, f"{command[0]} accepted {values!r}"
        assert complaint in proc.stdout + proc.stderr, proc.stdout + proc.stderr


def test_disabling_every_action_is_refused(helm: HelmRunner) -> None:
    names = ("allocate", "consolidation", "reclaim", "preempt", "stalegangeviction")
    proc = helm(*template_args(*(f"scheduler.actions.{name}.enabled=false" for name in names)), check=False)
    assert proc.returncode != 0
    assert "every action is disabled" in proc.stderr


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_the_chart_renders_its_golden_file(helm: HelmRunner, name: str) -> None:
    rendered = helm(*template_args(*VALUE_SETS[name])).stdout
    # Nothing random or clock-dependent: a second rendering is the same text.
    assert helm(*template_args(*VALUE_SETS[name])).stdout == rendered
    golden = GOLDEN / f"{name}.yaml"
    if UPDATE:
        golden.write_text(rendered)
    assert golden.exists(), f"{golden} is missing; run with KAI_RAY_UPDATE_GOLDEN=1 to create it"
    expected = golden.read_text()
    diff = "".join(
        difflib.unified_diff(expected.splitlines(True), rendered.splitlines(True), str(golden), "rendered")
    )
    assert rendered == expected, f"the chart renders differently (KAI_RAY_UPDATE_GOLDEN=1 to accept):\n{diff}"
