"""Label selectors as Kubernetes reads them, and selector/term objects that other processes can key by."""

from __future__ import annotations

import pickle
import subprocess
import sys

import pytest

from kai_ray.model.labels import selects
from kai_ray.model.objects import LabelRequirement, LabelSelector, PodAffinityTerm

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("selector", "labels", "expected"),
    [
        (None, {"app": "web"}, False),
        (LabelSelector(), {}, True),
        (LabelSelector(match_labels=(("app", "web"),)), {"app": "web", "tier": "x"}, True),
        (LabelSelector(match_labels=(("app", "web"),)), {"app": "db"}, False),
        (LabelSelector(expressions=(LabelRequirement("app", "In", ("a", "b")),)), {"app": "b"}, True),
        (LabelSelector(expressions=(LabelRequirement("app", "NotIn", ("a",)),)), {}, True),
        (LabelSelector(expressions=(LabelRequirement("app", "Exists"),)), {}, False),
        (LabelSelector(expressions=(LabelRequirement("app", "DoesNotExist"),)), {"app": "x"}, False),
    ],
)
def test_selects_as_kubernetes(
    selector: LabelSelector | None, labels: dict[str, str], expected: bool
) -> None:
    assert selects(selector, labels) is expected


def test_a_term_pickled_into_a_process_of_another_hash_seed_finds_its_key() -> None:
    term = PodAffinityTerm("zone", LabelSelector(match_labels=(("app", "web"),)), frozenset({"ns"}), 5)
    program = (
        "import pickle, sys\n"
        "from kai_ray.model.objects import LabelSelector, PodAffinityTerm\n"
        "keyed = pickle.loads(sys.stdin.buffer.read())\n"
        "selector = LabelSelector(match_labels=(('app', 'web'),))\n"
        "fresh = PodAffinityTerm('zone', selector, frozenset({'ns'}), 5)\n"
        "print(keyed[fresh])\n"
    )
    for seed in ("1", "2"):
        result = subprocess.run(
            [sys.executable, "-c", program],
            input=pickle.dumps({term: "found"}),
            capture_output=True,
            env={"PYTHONHASHSEED": seed},
            timeout=60,
            check=False,
        )
        assert result.stdout.strip() == b"found", result.stderr
