"""The executor seam: array answers, stable ranking, and the engine only asking through it."""

from __future__ import annotations

import numpy as np
import pytest
from builders import binds, cluster

from kai_ray.api.config import SchedulerConfig
from kai_ray.distributed.executor import LocalExecutor
from kai_ray.engine.cycle import schedule
from kai_ray.model.snapshot import compile_snapshot

pytestmark = pytest.mark.unit


def test_fit_mask_needs_every_resource() -> None:
    available = np.array([[4.0, 4.0], [1.0, 9.0], [4.0, 0.5]])
    assert LocalExecutor().fit_mask(np.array([2.0, 1.0]), available).tolist() == [True, False, False]


def test_rank_orders_by_score_then_row() -> None:
    candidates = np.array([True, True, False, True, True])
    scores = np.array([5.0, 9.0, 100.0, 9.0, 1.0])
    assert LocalExecutor().rank(candidates, scores).tolist() == [1, 3, 0, 4]


def test_rank_of_no_candidates_is_empty() -> None:
    assert LocalExecutor().rank(np.zeros(3, dtype=bool), np.zeros(3)).tolist() == []


class CountingExecutor(LocalExecutor):
    def __init__(self) -> None:
        self.rank_calls = 0

    def rank(self, candidates: np.ndarray, scores: np.ndarray) -> np.ndarray:
        self.rank_calls += 1
        return super().rank(candidates, scores)


def test_engine_asks_the_given_executor_and_gets_the_same_plan() -> None:
    state = (
        cluster()
        .node("n1", gpus=4)
        .node("n2", gpus=4)
        .queue("q", gpu_quota=8)
        .job("j", queue="q", gpus=1, pods=3)
        .build()
    )
    counting = CountingExecutor()
    with_counter = schedule(compile_snapshot(state), SchedulerConfig(), counting)
    plain = schedule(compile_snapshot(state), SchedulerConfig())
    assert counting.rank_calls == 3
    assert binds(with_counter) == binds(plain)
