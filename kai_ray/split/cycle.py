"""A split cycle: parts schedule in parallel, the coordinator accepts, or the local engine decides.

1. Every part (`Replica`) derives the same layout from the same snapshot: node partitions
   (whole Topology domains, pools apart), each job dealt to one part or a plain gang divided
   among them, each part's basis.
2. Each part runs allocate and the victim searches (consolidation, reclaim, preempt) over its
   nodes and jobs (`run_part`), in parallel.
3. The coordinator checks the answers (`checks`), accepts their placements under the queue
   limits and quotas the parts could not see together (`accept`), and judges their evictions
   together (`evictions`).
4. If that placed every pending pod, the plan is the parts' placements and evictions (`merge`).
   Otherwise, or if a job was kept, refused or left pending, the cycle is the local engine's
   over the whole snapshot.

So a split cycle's plan is either exactly the local engine's or one that places every pending
pod, taking from running pods no more GPUs than that needs: no plan can place more, at any
priority, nor do it taking fewer GPUs. Where it places them, and which victims give the GPUs up,
can differ from the local engine (a job's best node or the cheapest victim may lie in another
part); every invariant of the spec still holds (docs/sharding.md, "Split cycles"). A snapshot is
split only when that can pay: at least `min_pods` pods (pending and placed: placing and victim
search both grow with them), one pending, and no gang below its minimum (stale gang eviction
needs the whole session), and no pod with a rule that reads other pods (inter-pod affinity,
spread, host ports, extended resources: a part does not see what the others place). Otherwise the
cycle is local from the start.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import cache, partial
from operator import attrgetter
from typing import Protocol

from kai_ray.api.config import SchedulerConfig
from kai_ray.collector import collection_paused, leave_to_collector
from kai_ray.engine.constraints import snapshot_has_pod_constraints
from kai_ray.engine.cycle import open_session, run_actions
from kai_ray.engine.plan import Plan
from kai_ray.fairshare.usage import QueueUsage
from kai_ray.model.snapshot import Snapshot
from kai_ray.split.accept import accept, pods_placed
from kai_ray.split.checks import AnswerChecks, SplitOutcome, TaskIndex, moved_pods
from kai_ray.split.deal import pod_counts
from kai_ray.split.evictions import evictions_hold
from kai_ray.split.merge import PartsMerge, StandingPlan, standing_plan
from kai_ray.split.part import PartAnswer
from kai_ray.split.replica import Replica, SplitLayout

MIN_PODS = 1000
"""Below this many pods a cycle is not split (see the module docstring)."""
Meanwhile = Callable[[], object]
"""The coordinator's own work for a cycle, handed to a runner to do while its parts work."""
Groundwork = tuple[SplitLayout, StandingPlan, AnswerChecks, PartsMerge]


class PartRunner(Protocol):
    """Keeps the parts' replicas in step and has them answer a cycle."""

    name: str

    def prepare(self, snapshot: Snapshot) -> int:
        """Bring every replica to `snapshot`; the version to name in `answers`."""
        ...

    def answers(
        self, token: int, count: int, config: SchedulerConfig, usage: QueueUsage | None, meanwhile: Meanwhile
    ) -> Iterable[PartAnswer]:
        """Every part's answer for version `token`, one per part, each as soon as it is in where
        the parts work elsewhere (the coordinator takes in each while the others still work). A
        runner whose parts work elsewhere calls `meanwhile` once it has asked them, so the
        coordinator's own groundwork overlaps theirs."""
        ...

    def layout(self, count: int) -> SplitLayout:
        """The layout the parts computed (the driver's own copy)."""
        ...

    def close(self) -> None: ...


class LocalParts:
    """Every part in this process, in turn: the reference the Ray runner must equal."""

    name = "local"

    def __init__(self, pool_label: str | None = None) -> None:
        self._replica = Replica(pool_label)
        self._token = 0
        self._held: Snapshot | None = None

    def prepare(self, snapshot: Snapshot) -> int:
        if self._held is not snapshot:
            self._held, self._token = snapshot, self._token + 1
        self._replica.hold(snapshot, self._token)
        return self._token

    def answers(
        self, token: int, count: int, config: SchedulerConfig, usage: QueueUsage | None, meanwhile: Meanwhile
    ) -> list[PartAnswer]:
        return [self._replica.answer(token, part, count, config, usage) for part in range(count)]

    def layout(self, count: int) -> SplitLayout:
        return self._replica.layout(count)

    def close(self) -> None:
        self._held = None


@dataclass
class SplitTiming:
    """Seconds of one split cycle's steps; `fallback` is the local cycle's when one ran."""

    parts: float = 0.0
    part_seconds: list[float] = field(default_factory=list)
    """Each part's own compute time (`PartAnswer.seconds`), in the order the answers came in."""
    taking: list[float] = field(default_factory=list)
    """The coordinator's time taking in each answer as it came in (its checks and its share of
    the merge), in the same order; `accept` and `merge` are what is left after the last."""
    accept: float = 0.0
    merge: float = 0.0
    fallback: float = 0.0
    total: float = 0.0


@dataclass
class SplitCycles:
    """Schedules snapshots in split cycles over `count` parts with `runner`."""

    count: int
    runner: PartRunner
    min_pods: int = MIN_PODS
    timings: list[SplitTiming] = field(default_factory=list)
    outcomes: collections.Counter[SplitOutcome] = field(default_factory=collections.Counter)

    def prepare(self, snapshot: Snapshot) -> None:
        """Bring the parts' replicas to `snapshot` ahead of its cycle (see `Replica`), as an
        informer keeps a cache in step whether or not the next cycle will be split."""
        if self.count >= 2:
            self.runner.prepare(snapshot)

    def schedule(self, snapshot: Snapshot, config: SchedulerConfig, usage: QueueUsage | None = None) -> Plan:
        with collection_paused():
            return self._schedule(snapshot, config, usage)

    def _schedule(self, snapshot: Snapshot, config: SchedulerConfig, usage: QueueUsage | None) -> Plan:
        if not self._splits(snapshot):
            self.outcomes[SplitOutcome.NOT_SPLIT] += 1
            return run_actions(open_session(snapshot, config, usage=usage))
        started = time.perf_counter()
        timing = SplitTiming()
        token = self.runner.prepare(snapshot)
        groundwork = cache(partial(self._groundwork, snapshot))
        answers: list[PartAnswer] = []
        taking: dict[int, float] = {}
        for answer in self.runner.answers(token, self.count, config, usage, groundwork):
            layout, standing, checks, merge = groundwork()
            mark = time.perf_counter()
            answers.append(answer)
            if checks.take(answer):
                merge.take(answer, checks.pods[answer.part])
            taking[answer.part] = time.perf_counter() - mark
        layout, standing, checks, merge = groundwork()
        timing.parts = time.perf_counter() - started
        timing.part_seconds = [answer.seconds for answer in answers]
        timing.taking = [taking[answer.part] for answer in answers]
        mark = time.perf_counter()
        # From here in part order, as the in-process runner gives them: the judgement of the
        # evictions reads the first part's fair shares, and the queue sums add in this order.
        answers.sort(key=attrgetter("part"))
        moved = moved_pods(answers, snapshot.jobs) if checks.trusted else set()
        outcome = checks.outcome(moved)
        if outcome == SplitOutcome.SPLIT:
            placed = cache(partial(pods_placed, answers, snapshot.jobs, moved))
            if accept(snapshot, standing.jobs, placed, layout.opening) or not evictions_hold(
                snapshot, layout, answers, checks.tasks, moved, placed, config
            ):
                outcome = SplitOutcome.REFUSED
        timing.accept = time.perf_counter() - mark
        mark = time.perf_counter()
        self.outcomes[outcome] += 1
        if outcome == SplitOutcome.SPLIT:
            plan = merge.plan(checks.tasks, checks.seen)
            timing.merge = time.perf_counter() - mark
        else:
            plan = run_actions(open_session(snapshot, config, usage=usage))
            timing.fallback = time.perf_counter() - mark
        timing.total = time.perf_counter() - started
        self.timings.append(timing)
        leave_to_collector(answers, groundwork(), moved)
        return plan

    def close(self) -> None:
        self.runner.close()

    def _groundwork(self, snapshot: Snapshot) -> Groundwork:
        """What the coordinator reads of `snapshot` whatever the parts answer, and the checks and
        merge that take the answers in: done while the parts work, where the runner allows
        (`PartRunner.answers`), else before the first answer is taken."""
        layout, standing = self.runner.layout(self.count).with_checks(), standing_plan(snapshot)
        checks = AnswerChecks(layout, TaskIndex(standing.jobs), standing.order)
        return layout, standing, checks, PartsMerge(snapshot, standing)

    def _splits(self, snapshot: Snapshot) -> bool:
        """Whether `snapshot` qualifies (see the module docstring)."""
        if self.count < 2 or snapshot_has_pod_constraints(snapshot):
            return False
        counts = pod_counts(snapshot)
        if counts is None:
            return False
        pending, placed = counts
        return pending > 0 and pending + placed >= self.min_pods
