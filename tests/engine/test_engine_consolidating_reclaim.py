"""`allow_consolidating_reclaim` (KAI's --allow-consolidating-reclaim, spec §11.7, §12.4).

A reclaim scenario may move a victim to another node instead of only taking
its place away. With the flag on (the default) a moved victim costs its queue
nothing, so reclaim needs no justification for it; with the flag off it counts
as reclaimed like any other victim and must be justified by the victim queue's
fair share or deserved quota.
"""

from __future__ import annotations

import pytest
from builders import cluster, config, pipelined, run_cycle

from kai_ray.api.config import SchedulerConfig
from kai_ray.engine.reasons import EvictionCause, PendingCause
from kai_ray.model.objects import ClusterState, TaskStatus

pytestmark = pytest.mark.unit

RUNNING = TaskStatus.RUNNING


def reclaim_config(allow_consolidating_reclaim: bool) -> SchedulerConfig:
    cfg = config(actions=("allocate", "reclaim"))
    return cfg.model_copy(update={"allow_consolidating_reclaim": allow_consolidating_reclaim})


def pinned_reclaimer(*, borrower_quota: float, nodes: int) -> ClusterState:
    """`pinned` (queue owner) may only run on n1, where `mover` (queue borrower) holds both GPUs.

    With a second node `mover` can be re-placed there, so the reclaim only moves it.
    """
    builder = cluster().node("n1", gpus=2, labels={"pool": "a"})
    if nodes == 2:
        builder.node("n2", gpus=2)
    return (
        builder.queue("owner", gpu_quota=2)
        .queue("borrower", gpu_quota=borrower_quota)
        .job("mover", queue="borrower", gpus=2, status=RUNNING, node="n1")
        .job("pinned", queue="owner", gpus=2, node_selector={"pool": "a"})
        .build()
    )


def test_a_moved_victim_inside_its_quota_may_be_moved_only_with_consolidating_reclaim() -> None:
    """borrower holds exactly its deserved 2 GPUs: taking them is unjustified, moving them is free."""
    state = pinned_reclaimer(borrower_quota=2, nodes=2)

    allowed = run_cycle(state, reclaim_config(True))
    assert [(e.task, e.node, e.reason.cause) for e in allowed.evictions] == [
        ("mover-0", "n1", EvictionCause.RECLAIM)
    ]
    assert pipelined(allowed) == {"mover-0": "n2", "pinned-0": "n1"}

    refused = run_cycle(state, reclaim_config(False))
    assert refused.evictions == []
    assert pipelined(refused) == {}
    assert refused.pending_reasons["pinned"].cause == PendingCause.NO_ROOM


@pytest.mark.parametrize("allow", [True, False])
@pytest.mark.parametrize(
    ("nodes", "moved_to"),
    [(1, None), (2, "n2")],
    ids=["victim-cannot-move", "victim-moves"],
)
def test_a_victim_over_its_quota_is_reclaimed_either_way(
    allow: bool, nodes: int, moved_to: str | None
) -> None:
    """borrower has no quota: counted or not, taking its GPUs is justified, so the flag changes nothing."""
    plan = run_cycle(pinned_reclaimer(borrower_quota=0, nodes=nodes), reclaim_config(allow))
    assert [(e.task, e.node) for e in plan.evictions] == [("mover-0", "n1")]
    expected = {"pinned-0": "n1"} if moved_to is None else {"mover-0": moved_to, "pinned-0": "n1"}
    assert pipelined(plan) == expected


def test_consolidating_reclaim_is_allowed_by_default() -> None:
    assert SchedulerConfig().allow_consolidating_reclaim
