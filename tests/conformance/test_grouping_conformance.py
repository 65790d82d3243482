"""The shared pod-grouping corpus (conformance/grouping), run through `kai-ray group` by its checker.

Each area (a directory of cases) has a ratchet: the number of its cases that
pass today. Raise a number when more pass; never lower one. The grouping
checker has no `--min-pass`, so the test reads its closing `N passed, M
failed` line.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.conformance

GROUPING = Path(__file__).resolve().parents[2].parent / "shared" / "conformance" / "grouping"
CASES = GROUPING / "cases"
KAI_RAY = Path(sys.executable).parent / "kai-ray"
SUMMARY = re.compile(r"^(\d+) passed, (\d+) failed$", re.MULTILINE)

MIN_PASS = {
    "aml": 1,
    "cronjob": 1,
    "default": 24,
    "deployment": 1,
    "grove": 13,
    "hub": 5,
    "jax": 4,
    "job": 5,
    "jobset": 11,
    "karta": 2,
    "knative": 5,
    "kubeflow": 3,
    "lws": 8,
    "mpi": 2,
    "notebook": 6,
    "podjob": 8,
    "pytorch": 15,
    "ray": 6,
    "runaijob": 3,
    "skiptopowner": 2,
    "tensorflow": 10,
    "xgboost": 10,
}


def _case_count(area: str) -> int:
    return len(list((CASES / area).glob("*.yaml")))


def test_every_area_has_a_ratchet() -> None:
    areas = {path.name for path in CASES.iterdir() if path.is_dir()}
    assert areas == set(MIN_PASS)


@pytest.mark.parametrize("area", sorted(MIN_PASS))
def test_area_passes_at_least_its_ratchet(area: str) -> None:
    assert MIN_PASS[area] <= _case_count(area)
    command = [
        sys.executable,
        str(GROUPING / "check.py"),
        str(CASES / area),
        "--cmd",
        f"{KAI_RAY} group {{case}} --output json",
        "--jobs",
        "2",
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=900, check=False)
    summary = SUMMARY.findall(result.stdout)
    assert summary, result.stdout + result.stderr
    passed = int(summary[-1][0])
    assert passed >= MIN_PASS[area], result.stdout + result.stderr
