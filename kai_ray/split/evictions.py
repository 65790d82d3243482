"""The coordinator's judgement of the parts' evictions taken together.

Each part searched victims among its own jobs on its own nodes, and judged every reclaim as the
spec says (§12), against the whole cluster's queue sums at the start of the cycle plus what it
did itself. What no part saw is what the others did: two parts can each take from a queue that
could spare one of the takings, or each let the same reclaiming queue grow. So the coordinator
judges the reclaims again over all parts at once, with bounds that hold whatever order the
parts' scenarios are thought to run in:

- a reclaiming queue's allocation is at most its opening allocation plus everything placed in
  it this cycle (evictions only lower it), and must stay within its fair share (§12.1);
- a queue that lost pods keeps at least its opening allocation less everything taken from it,
  plus the smallest pod taken, before any chunk is taken (a chunk is at least one pod), and each
  chunk must be justified there as §12.4 step A asks (over its allocatable share, or the
  reclaimer under quota and the queue over its deserved);
- at every level of a reclaimer's chain, step B's saturation rule holds against every sibling
  that lost anything, with the reclaimer at its largest and the sibling at its smallest.

Preemption (within a queue, lower priority only) and consolidation (every victim re-placed) are
decided within one part and need no second look; the queue limits every placement must respect
are applied by `accept`.

One more rule is the plan's objective rather than the spec's: the split plan may take from
running pods no more GPUs than placing every pending pod needs (`SplitLayout.gpus_to_free`), and
no pod without GPUs (re-placed victims take nothing). Any plan that places every pending pod
takes at least that much, so a split plan with evictions is never worse than the local engine's
on (pods placed, GPUs taken from running pods); which victims give them up may differ.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from kai_ray.api.config import SchedulerConfig
from kai_ray.engine.actions.reclaim import (
    leveled_pair,
    over_bound,
    saturation_multiplier,
    sibling_rows,
    too_saturated,
    within_bound,
)
from kai_ray.engine.queues import QueueBook
from kai_ray.engine.reasons import EvictionCause
from kai_ray.model.objects import JobSpec, TaskSpec
from kai_ray.model.resources import EPSILON
from kai_ray.model.snapshot import Snapshot
from kai_ray.split.accept import PodPlaced, job_charges
from kai_ray.split.checks import TaskIndex
from kai_ray.split.deal import taken_gpus
from kai_ray.split.part import PartAnswer
from kai_ray.split.replica import SplitLayout

RECLAIM = EvictionCause.RECLAIM.value


def evictions_hold(
    snapshot: Snapshot,
    layout: SplitLayout,
    answers: list[PartAnswer],
    tasks: TaskIndex,
    moved: set[tuple[str, str]],
    placed: Callable[[], list[PodPlaced]],
    config: SchedulerConfig,
) -> bool:
    """Whether the parts' evictions together keep the objective and the reclaim rules; `moved`
    are the victims they placed again (`moved_pods`), `placed` the pending pods they placed."""
    freed = 0.0
    reclaimed: list[tuple[str, TaskSpec, int, str]] = []
    """(reclaimer key, victim pod, the victim's row, the victim's job key)"""
    rows, consolidating = snapshot.nodes.index, config.allow_consolidating_reclaim
    for answer in answers:
        for job_key, name, node, _groups, cause, _message, preemptor in answer.evictions:
            task = tasks.task(job_key, name)
            if task is None:
                return False
            row = rows[node]
            stays = not moved or (job_key, name) not in moved
            if stays:
                if task.gpu <= 0:
                    return False
                freed += taken_gpus(task)
            if cause == RECLAIM and (stays or not consolidating) and preemptor is not None:
                reclaimed.append((preemptor, task, row, job_key))
    if freed > layout.gpus_to_free + EPSILON:
        return False
    if not reclaimed:
        return True
    return _reclaims_hold(snapshot, layout, answers[0], tasks.jobs, placed(), reclaimed, config)


def _reclaims_hold(
    snapshot: Snapshot,
    layout: SplitLayout,
    first: PartAnswer,
    jobs: dict[str, JobSpec],
    placed: list[PodPlaced],
    reclaimed: list[tuple[str, TaskSpec, int, str]],
    config: SchedulerConfig,
) -> bool:
    book = QueueBook(snapshot)
    book.adopt_fair_shares(np.array(first.fair_shares).reshape(len(book.names), 3))
    opening = layout.opening.allocated
    table = snapshot.nodes
    gained = np.zeros_like(opening)
    asked = job_charges(snapshot.jobs, placed, lambda job: True)
    for job_key, vector in asked.items():
        gained[book.chains[jobs[job_key].queue]] += vector
    # Summed per leaf and pair in plain floats first, the columns written out: thousands of
    # victims, a handful of queues.
    memory = table.gpu_memory.tolist()
    taken: dict[str, list[float]] = {}
    smallest: dict[tuple[str, str], list[float]] = {}
    for preemptor, task, row, job_key in reclaimed:
        cpu, mem, gpus = task.cpu_millis, task.memory, task.accepted_gpus(memory[row])
        leaf = jobs[job_key].queue
        sums = taken.get(leaf)
        if sums is None:
            sums = taken[leaf] = [0.0, 0.0, 0.0]
        sums[0] += cpu
        sums[1] += mem
        sums[2] += gpus
        least_pod = smallest.get((preemptor, leaf))
        if least_pod is None:
            smallest[(preemptor, leaf)] = [cpu, mem, gpus]
            continue
        least_pod[0] = min(least_pod[0], cpu)
        least_pod[1] = min(least_pod[1], mem)
        least_pod[2] = min(least_pod[2], gpus)
    lost = np.zeros_like(opening)
    for leaf, sums in taken.items():
        lost[book.chains[leaf]] += sums
    most = opening + gained
    least = opening - lost
    for (preemptor, leaf), pod in smallest.items():
        ours, theirs = leveled_pair(snapshot, jobs[preemptor].queue, leaf)
        row, victim_row = book.index[ours], book.index[theirs]
        before_last = least[victim_row] + pod
        maintain = over_bound(before_last, book.allocatable_share(victim_row))
        guarantee = within_bound(most[row], book.deserved[row]) and over_bound(
            before_last, book.deserved[victim_row]
        )
        if not (maintain or guarantee):
            return False
    multiplier = saturation_multiplier(config)
    for preemptor in {preemptor for preemptor, _, _, _ in reclaimed}:
        queue = jobs[preemptor].queue
        own = book.index[queue]
        if not within_bound(most[own], np.maximum(book.fair_share[own], 0.0)):
            return False
        for row in book.chains[queue]:
            for sibling in sibling_rows(book, row):
                if not np.any(lost[sibling] > EPSILON):
                    continue
                involved = (asked[preemptor] > 0) | (lost[sibling] > EPSILON)
                shares = book.fair_share
                level, other = shares[row], shares[sibling]
                if too_saturated(most[row], level, least[sibling], other, involved, multiplier):
                    return False
    return True
