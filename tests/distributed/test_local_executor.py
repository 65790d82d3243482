"""The executor seam: exact answers whatever an executor prepares."""

from __future__ import annotations

import numpy as np
import pytest
from builders import binds, cluster, pipelined

from kai_ray.api.config import SchedulerConfig
from kai_ray.distributed import kernels
from kai_ray.distributed.executor import LocalExecutor
from kai_ray.distributed.kernels import NodeRanking, NodeRows, RankedRows, TaskShape
from kai_ray.engine.cycle import schedule
from kai_ray.model.objects import ClusterState, TaskStatus
from kai_ray.model.snapshot import compile_snapshot

pytestmark = pytest.mark.unit


def test_rank_orders_by_score_then_row() -> None:
    candidates = np.array([True, True, False, True, True])
    scores = np.array([5.0, 9.0, 100.0, 9.0, 1.0])
    assert LocalExecutor().rank(candidates, scores).tolist() == [1, 3, 0, 4]


def test_rank_of_no_candidates_is_empty() -> None:
    assert LocalExecutor().rank(np.zeros(3, dtype=bool), np.zeros(3)).tolist() == []


class TruncatingExecutor(LocalExecutor):
    """Prepares only the top `keep` rows of each shape, with an honest bound on the rest."""

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self.batches: list[list[int]] = []

    def rank_shapes(
        self, nodes: NodeRows, ranking: NodeRanking, shapes: list[TaskShape], copies: list[int]
    ) -> list[RankedRows] | None:
        self.batches.append(list(copies))
        answers = []
        for shape in shapes:
            full = kernels.rank_rows(ranking, shape, nodes, None)
            cut = min(self.keep, len(full.rows))
            bound = None if cut == len(full.rows) else (-float(full.scores[cut]), int(full.rows[cut]))
            answers.append(RankedRows(full.rows[:cut], full.scores[:cut], bound))
        return answers


def busy_cluster() -> ClusterState:
    return (
        cluster()
        .node("n1", gpus=8)
        .node("n2", gpus=8)
        .node("n3", gpus=4)
        .node("n4", gpus=2)
        .node("cpu", gpus=0)
        .queue("a", gpu_quota=12)
        .queue("b", gpu_quota=10)
        .job("running", queue="a", gpus=2, pods=3, status=TaskStatus.RUNNING, node="n1")
        .job("leaving", queue="b", gpus=1, pods=2, status=TaskStatus.RELEASING, node="n4")
        .job("gang", queue="a", gpus=2, pods=4)
        .job("singles", queue="b", gpus=1, pods=6, min_member=1)
        .job("cpu-work", queue="b", gpus=0, cpu_millis=2000, pods=3, min_member=1)
        .build()
    )


def test_engine_asks_the_executor_once_per_allocate_batch_with_shape_counts() -> None:
    executor = TruncatingExecutor(keep=100)
    schedule(compile_snapshot(busy_cluster()), SchedulerConfig(actions=("allocate",)), executor)
    assert len(executor.batches) == 1
    assert sorted(executor.batches[0]) == [3, 4, 6]


@pytest.mark.parametrize("keep", [0, 1, 2, 3, 100])
def test_a_truncated_answer_gives_the_same_plan_as_ranking_in_process(keep: int) -> None:
    config = SchedulerConfig()
    local = schedule(compile_snapshot(busy_cluster()), config)
    truncated = schedule(compile_snapshot(busy_cluster()), config, TruncatingExecutor(keep))
    assert binds(truncated) == binds(local)
    assert pipelined(truncated) == pipelined(local)
    assert truncated.evictions == local.evictions
    assert binds(local)
