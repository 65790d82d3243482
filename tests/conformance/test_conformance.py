"""The shared KAI conformance corpus, run through the real CLI by the shared checker.

Each area has a ratchet: the number of its scenarios that pass today. Raise
a number when more pass; never lower one.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.conformance

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "conformance"
KAI_RAY = Path(sys.executable).parent / "kai-ray"

MIN_PASS = {
    "affinity": 2,
    "allocate": 13,
    "consolidation": 6,
    "elastic": 12,
    "fractional": 8,
    "gang": 4,
    "gpu-memory": 9,
    "integration-allocate": 12,
    "integration-consolidation": 6,
    "integration-deletion": 3,
    "integration-dra": 2,
    "integration-mig": 5,
    "integration-numa": 0,
    "integration-preempt": 9,
    "integration-reclaim": 27,
    "integration-stalegangeviction": 1,
    "integration-topology": 3,
    "mig": 4,
    "numa": 0,
    "preempt": 5,
    "reclaim": 19,
    "reclaim-hierarchy": 4,
    "stalegangeviction": 6,
    "subgroups": 9,
    "topology": 16,
}


def _scenario_count(area: str) -> int:
    return len(list((SHARED / "scenarios" / area).glob("*.yaml")))


def test_every_area_has_a_ratchet() -> None:
    areas = {p.name for p in (SHARED / "scenarios").iterdir() if p.is_dir()}
    assert areas == set(MIN_PASS)


@pytest.mark.parametrize("area", sorted(MIN_PASS))
def test_area_passes_at_least_its_ratchet(area: str) -> None:
    assert MIN_PASS[area] <= _scenario_count(area)
    command = [
        sys.executable,
        str(SHARED / "check.py"),
        str(SHARED / "scenarios" / area),
        "--cmd",
        f"{KAI_RAY} simulate {{scenario}} --output json",
        "--jobs",
        "2",
        "--min-pass",
        str(MIN_PASS[area]),
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=900, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
