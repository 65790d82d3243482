"""KAI's own benchmark figures for the shapes named after them, so a run prints ours beside them.

The figures are issue 14's: KAI's benchmarks (`pkg/scheduler/actions/benchmark_test.go`) run
with `go test -bench` on the development machine (2 vCPUs) at the corpus commit, in seconds per
op. Each op builds KAI's session from its test topology (`test_utils.BuildSession`) and then
runs the actions' `Execute`, and the timer covers both: a figure is KAI's session build plus its
actions, not the actions alone. The issue's target for the allocate family is half of each
figure, compared with our actions and plan in CPU seconds; ours are printed both ways (actions
and plan; the whole cycle, opening included) so a reader can take either comparison.
"""

from __future__ import annotations

KAI_SECONDS_PER_OP: dict[str, float] = {
    "kai-allocate-10x50": 0.003,
    "kai-allocate-50x200": 0.027,
    "kai-allocate-100x500": 0.092,
    "kai-gang-50x100x4": 0.044,
    "kai-full-cycle-100x500": 0.047,
    "kai-reclaim-large-1000": 28.2,
}
"""Shape → KAI's seconds per op on the development machine (issue 14's table)."""

TARGET_FRACTION = 0.5
"""The issue's target: our actions and plan at no more than this fraction of KAI's figure."""


def against_kai(shape: str, actions_cpu_seconds: float, cycle_cpu_seconds: float) -> dict[str, float] | None:
    """KAI's figure for `shape`, the target, and our two CPU figures over it; None for a shape
    KAI has no benchmark of."""
    kai = KAI_SECONDS_PER_OP.get(shape)
    if kai is None:
        return None
    return {
        "kai_seconds_per_op": kai,
        "target_seconds": kai * TARGET_FRACTION,
        "actions_and_plan_ratio": actions_cpu_seconds / kai,
        "whole_cycle_ratio": cycle_cpu_seconds / kai,
    }
