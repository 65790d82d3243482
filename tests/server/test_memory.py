"""Memory given back once the cache shrank a lot: a collection and a malloc trim, once per drop."""

from __future__ import annotations

import pytest

from kai_ray.server.memory import ShrinkTrimmer

pytestmark = pytest.mark.unit


def test_it_trims_once_the_cache_fell_well_below_its_high_water_mark_and_then_starts_again() -> None:
    trimmer = ShrinkTrimmer(shrink=1_000)
    assert not any(trimmer.after_cycle(size) for size in (100, 20_000, 21_000, 16_000))  # under a quarter
    assert trimmer.after_cycle(15_000)  # 6,000 fewer than the 21,000 peak: a quarter and over 1,000
    assert not trimmer.after_cycle(14_500)  # the mark starts again from 15,000
    assert trimmer.after_cycle(50) and trimmer.trims == 2


def test_a_small_cluster_does_not_trim_for_every_few_pods_gone() -> None:
    trimmer = ShrinkTrimmer(shrink=1_000)
    assert not any(trimmer.after_cycle(size) for size in (40, 400, 10, 900, 0))
    assert trimmer.trims == 0
