"""Split cycles forced onto every scenario of the shared corpus (its first cycle).

The corpus's clusters are far below the size at which a cycle is split (`MIN_PENDING_PODS`), so
run as they are their plans are the local engine's by construction. Forced to split (no minimum),
each first cycle must still give exactly the local plan, or a plan that places every pending pod
(the only way a split cycle's plan may differ, `kai_ray.split.cycle`). The counts of each are
pinned, so a change that makes split cycles differ from the local engine more often is seen.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from kai_ray.cluster.sim.scenario import load_scenario
from kai_ray.engine.cycle import schedule
from kai_ray.model.objects import TaskStatus
from kai_ray.model.snapshot import compile_snapshot
from kai_ray.split.checks import SplitOutcome
from kai_ray.split.cycle import LocalParts, SplitCycles

pytestmark = pytest.mark.conformance

EXPECTED: Counter[str] = Counter(
    {"not-split": 192, "pending-left": 78, "split, same plan": 64, "split, other nodes": 10}
)
"""Of 172 scenarios x (2, 3) parts. Most corpus clusters ask for more than is free (that is what
they test), so most are not split; of the split ones, some leave a pod pending and are local."""

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
            cycles = SplitCycles(parts, LocalParts(), min_pending_pods=0)
            plan = cycles.schedule(snapshot, scenario.config)
            same = (plan.binds, plan.pipelined, plan.evictions, plan.tasks) == (
                local.binds,
                local.pipelined,
                local.evictions,
                local.tasks,
            )
            if cycles.outcomes[SplitOutcome.SPLIT]:
                pending = sum(t.status == TaskStatus.PENDING for job in snapshot.jobs for t in job.tasks)
                assert len(plan.binds) + len(plan.pipelined) == pending, path.name
                assert not plan.evictions, path.name
                seen["split, same plan" if same else "split, other nodes"] += 1
            else:
                assert same, f"{path.name}: a cycle that was not split must be the local cycle"
                (outcome,) = cycles.outcomes
                seen[outcome.value] += 1
    assert seen == EXPECTED
