"""Split cycles forced onto every scenario of the shared corpus (its first cycle).

The corpus's clusters are far below the size at which a cycle is split (`MIN_PODS`), so
run as they are their plans are the local engine's by construction. Forced to split (no minimum),
each first cycle must still give exactly the local plan, or a valid plan that places every
pending pod taking no more GPUs from running pods than the local plan (the only way a split
cycle's plan may differ, `kai_ray.split.cycle`). The counts of each are pinned, so a change that
makes split cycles differ from the local engine more often is seen.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from split_plans import assert_no_worse, assert_valid

from kai_ray.cluster.sim.scenario import load_scenario
from kai_ray.engine.cycle import schedule
from kai_ray.model.snapshot import compile_snapshot
from kai_ray.split.checks import SplitOutcome
from kai_ray.split.cycle import LocalParts, SplitCycles

pytestmark = pytest.mark.conformance

EXPECTED: Counter[str] = Counter(
    {
        "not-split": 50,
        "pending-left": 160,
        "refused": 36,
        "split, same plan": 138,
        "split, other nodes": 10,
        "split, with evictions": 4,
    }
)
"""Of 199 scenarios x (2, 3) parts. Most corpus clusters ask for more than fits (that is what they
test): a part often leaves a pod pending, or the coordinator refuses what the parts evicted. The
11 scenarios whose pods carry a rule that reads other pods (affinity, extended resources) are never
split."""

SCENARIOS = Path(__file__).resolve().parents[2].parent / "shared" / "conformance" / "scenarios"


def test_forced_split_cycles_on_the_corpus_are_local_or_place_every_pending_pod() -> None:
    paths = sorted(SCENARIOS.glob("*/*.yaml"))
    assert len(paths) >= 170, f"the shared corpus is missing at {SCENARIOS}"
    seen: Counter[str] = Counter()
    for path in paths:
        scenario = load_scenario(path)
        snapshot = compile_snapshot(scenario.state)
        local = schedule(snapshot, scenario.config)
        for parts in (2, 3):
            cycles = SplitCycles(parts, LocalParts(), min_pods=0)
            plan = cycles.schedule(snapshot, scenario.config)
            same = (plan.binds, plan.pipelined, plan.evictions, plan.tasks) == (
                local.binds,
                local.pipelined,
                local.evictions,
                local.tasks,
            )
            if cycles.outcomes[SplitOutcome.SPLIT]:
                assert_valid(snapshot, plan, scenario.config)
                assert_no_worse(snapshot, plan, local)
                kind = "same plan" if same else "with evictions" if plan.evictions else "other nodes"
                seen[f"split, {kind}"] += 1
            else:
                assert same, f"{path.name}: a cycle that was not split must be the local cycle"
                (outcome,) = cycles.outcomes
                seen[outcome.value] += 1
    assert seen == EXPECTED
