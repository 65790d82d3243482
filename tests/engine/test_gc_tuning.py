"""`tune_gc_for_serving` freezes start-up's objects and spaces young collections (in a child
process: the settings are process-wide)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from kai_ray.gc_tuning import YOUNG_COLLECTION_THRESHOLD

pytestmark = pytest.mark.unit

PROBE = """
import gc
from kai_ray.gc_tuning import tune_gc_for_serving
before = gc.get_threshold()
tune_gc_for_serving()
print(before[0], gc.get_threshold()[0], gc.get_threshold()[1:] == before[1:], gc.get_freeze_count() > 0)
"""


def test_serving_freezes_start_up_objects_and_collects_young_ones_less_often() -> None:
    out = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=60, check=True
    )
    default, tuned, older_unchanged, frozen = out.stdout.split()
    assert int(default) < YOUNG_COLLECTION_THRESHOLD == int(tuned)
    assert older_unchanged == "True" and frozen == "True"


FREEZE_PROBE = """
import gc, weakref
from kai_ray.gc_tuning import freeze_what_lives
class Node: pass
garbage = Node(); garbage.me = garbage; gone = weakref.ref(garbage); del garbage
kept = Node()
freeze_what_lives()
print(gone() is None, gc.get_freeze_count() > 0, gc.is_tracked(kept), kept in gc.get_objects())
"""


def test_freezing_what_lives_collects_cyclic_garbage_first_and_hides_the_rest_from_collections() -> None:
    out = subprocess.run(
        [sys.executable, "-c", FREEZE_PROBE], capture_output=True, text=True, timeout=60, check=True
    )
    collected_first, frozen, tracked, still_scanned = out.stdout.split()
    assert (collected_first, frozen, tracked, still_scanned) == ("True", "True", "True", "False")
