"""Reclaim (§12): a queue below its fair share takes resources back from other queues.

Every comparison between reclaimer and victim happens at the level where
their branches of the queue tree split ("leveled" queues), so a department
is judged against a department and a project against a sibling project.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator

import numpy as np

from kai_ray.api.config import SchedulerConfig
from kai_ray.engine.actions.victim_action import run_victim_action
from kai_ray.engine.gang import tasks_to_allocate
from kai_ray.engine.jobs import Job, Task
from kai_ray.engine.minruntime import MinRuntime
from kai_ray.engine.queues import QueueBook
from kai_ray.engine.reasons import EvictionCause, EvictionReason, PendingCause, PendingReason
from kai_ray.engine.session import Session
from kai_ray.engine.solver import Outcome, VictimPolicy
from kai_ray.model.objects import ACTIVE_ALLOCATED, UNLIMITED
from kai_ray.model.resources import EPSILON
from kai_ray.model.snapshot import Snapshot

SATURATION_ARGUMENT = "relcaimerSaturationMultiplier"


def leveled_pair(snapshot: Snapshot, reclaimer_leaf: str, victim_leaf: str) -> tuple[str, str]:
    """The two sibling queues where the reclaimer's and the victim's branches diverge."""
    ours = list(reversed(snapshot.ancestry(reclaimer_leaf)))
    theirs = list(reversed(snapshot.ancestry(victim_leaf)))
    for mine, other in zip(ours, theirs, strict=False):
        if mine != other:
            return mine, other
    return ours[-1], theirs[-1]


def saturation_multiplier(config: SchedulerConfig) -> float:
    """The proportion plugin's `relcaimerSaturationMultiplier` (§12.4 step B); below 1 means 1."""
    return max(float(config.plugin_arguments("proportion").get(SATURATION_ARGUMENT, "1.0")), 1.0)


def over_bound(values: np.ndarray, bound: np.ndarray) -> bool:
    """Above the bound in some resource; an unlimited (-1) bound is never exceeded."""
    return bool(np.any((bound != UNLIMITED) & (values > bound + EPSILON)))


def within_bound(values: np.ndarray, bound: np.ndarray) -> bool:
    return bool(np.all((bound == UNLIMITED) | (values <= bound + EPSILON)))


class ReclaimPolicy:
    def __init__(self, session: Session, reclaimer: Job, request: np.ndarray) -> None:
        self.session = session
        self.book = session.queues
        self.reclaimer = reclaimer
        self.request = request
        self.allocated = self.book.allocated.copy()
        self.allocated_non_preemptible = self.book.allocated_non_preemptible.copy()
        self.multiplier = saturation_multiplier(session.config)

    @functools.cached_property
    def min_runtime(self) -> MinRuntime:
        """Built when a candidate is judged, not per pending job (most have no candidate)."""
        return MinRuntime(self.session)

    def _row(self, queue: str) -> int:
        return self.book.index[queue]

    def _reclaimer_under_quota(self, queue: str) -> bool:
        row = self._row(queue)
        return within_bound(self.allocated[row] + self.request, self.book.deserved[row])

    def candidate_pool(self, preemptor: Job) -> list[Job]:
        return self.session.preemptible_jobs()

    def is_candidate(self, reclaimer: Job, victim: Job) -> bool:
        if (
            victim.queue == reclaimer.queue
            or not victim.spec.preemptible
            or not victim.has_status(ACTIVE_ALLOCATED)
        ):
            return False
        if not self.min_runtime.is_candidate(victim, self.min_runtime.reclaim_runtime(reclaimer, victim)):
            return False
        ours, theirs = leveled_pair(self.session.snapshot, reclaimer.queue, victim.queue)
        victim_row = self._row(theirs)
        allocated = self.allocated[victim_row]
        if not self._reclaimer_under_quota(ours):
            return over_bound(allocated, self.book.allocatable_share(victim_row))
        deserved = self.book.deserved[victim_row]
        relevant = (self.request > 0) & (deserved != UNLIMITED)
        over = bool(np.any(relevant & (allocated > deserved + EPSILON)))
        under = bool(np.any(relevant & (allocated + EPSILON < deserved)))
        return over or not under

    def accepts(self, outcome: Outcome) -> bool:
        remaining = self.allocated.copy()
        if not self._chunks_justified(outcome, remaining):
            return False
        if not self._reclaimer_within_bounds(remaining):
            return False
        runtimes = {t.job: self.min_runtime.reclaim_runtime(self.reclaimer, t.job) for t in outcome.victims}
        return self.min_runtime.allows(outcome.evicted(), runtimes)

    def _chunks_justified(self, outcome: Outcome, remaining: np.ndarray) -> bool:
        for leaf, chunk in _chunks(self.session, outcome):
            ours, theirs = leveled_pair(self.session.snapshot, self.reclaimer.queue, leaf)
            victim_row = self._row(theirs)
            maintain = over_bound(remaining[victim_row], self.book.allocatable_share(victim_row))
            guarantee = self._reclaimer_under_quota(ours) and over_bound(
                remaining[victim_row], self.book.deserved[victim_row]
            )
            if not (maintain or guarantee):
                return False
            remaining[self.book.chains[leaf]] -= chunk
        return True

    def _reclaimer_within_bounds(self, remaining: np.ndarray) -> bool:
        book = self.book
        non_preemptible = not self.reclaimer.spec.preemptible
        for row in book.chains[self.reclaimer.queue]:
            alloc = remaining[row] + self.request
            if non_preemptible and not within_bound(
                self.allocated_non_preemptible[row] + self.request, book.deserved[row]
            ):
                return False
            for sibling in sibling_rows(book, row):
                lost = self.allocated[sibling] - remaining[sibling]
                if not np.any(lost > EPSILON):
                    continue
                involved = (self.request > 0) | (lost > EPSILON)
                if too_saturated(
                    alloc,
                    book.fair_share[row],
                    remaining[sibling],
                    book.fair_share[sibling],
                    involved,
                    self.multiplier,
                ):
                    return False
        return True

    def eviction_reason(self, preemptor: Job, victim: Task) -> EvictionReason:
        message = f"reclaimed for queue {preemptor.queue}, job {preemptor.name}"
        return EvictionReason(EvictionCause.RECLAIM, message, preemptor.key)


def too_saturated(
    alloc: np.ndarray,
    ours_share: np.ndarray,
    left: np.ndarray,
    theirs_share: np.ndarray,
    involved: np.ndarray,
    multiplier: float,
) -> bool:
    """Step B of §12.4 for one sibling that lost resources: the reclaimer's level would end over
    its fair share and, times the multiplier, at least as saturated as the sibling left behind."""
    for r in np.flatnonzero(involved):
        ours = share_ratio(alloc[r], ours_share[r])
        theirs = share_ratio(left[r], theirs_share[r])
        if ours > 1 + EPSILON and theirs_share[r] > 0 and ours * multiplier >= theirs - EPSILON:
            return True
    return False


def sibling_rows(book: QueueBook, row: int) -> list[int]:
    """The rows of the queues sharing `row`'s parent (top-level queues are siblings)."""
    parent = book.specs[row].parent
    names = book.children[parent] if parent is not None else book.top_level()
    return [book.index[name] for name in names if book.index[name] != row]


def share_ratio(value: float, share: float) -> float:
    if share == 0:
        return float("inf") if value > 0 else 0.0
    return float(value / share)


def _reclaimed(session: Session, outcome: Outcome) -> list[Task]:
    """The victims whose resources count as taken from their queues (§11.7, §12.4).

    With consolidating reclaim allowed (KAI's default) a victim the simulation
    re-placed keeps running somewhere, so its queue loses nothing by it; without
    it, every victim counts, whether or not it found a new place.
    """
    return outcome.evicted() if session.config.allow_consolidating_reclaim else outcome.victims


def _chunks(session: Session, outcome: Outcome) -> Iterator[tuple[str, np.ndarray]]:
    """Per victim job: each pod beyond its pod sets' minimum alone, then the core together.

    A pod is measured on the node it ran on before the scenario, which for a
    re-placed victim is not where the simulation left it.
    """
    by_job: dict[Job, list[Task]] = {}
    for task in _reclaimed(session, outcome):
        by_job.setdefault(task.job, []).append(task)
    for job, tasks in by_job.items():
        core = np.zeros(3)
        taken: dict[str, int] = {}
        elastic: list[np.ndarray] = []
        core_pods = 0
        for task in tasks:
            pod_set = task.pod_set.name if task.pod_set else ""
            node = outcome.nodes_before[task.uid]
            vector = session.placed_fairness(task, node) if node is not None else np.zeros(3)
            taken[pod_set] = taken.get(pod_set, 0) + 1
            if task.pod_set is not None and taken[pod_set] > task.pod_set.min_available:
                elastic.append(vector)
            else:
                core = core + vector
                core_pods += 1
        for vector in elastic:
            yield job.queue, vector
        if core_pods:
            yield job.queue, core


def _make_policy(session: Session, job: Job) -> VictimPolicy | None:
    book = session.queues
    request = session.fairness_request(tasks_to_allocate(session, job), session.min_gpu_memory)
    row = book.index[job.queue]
    if not within_bound(book.allocated[row] + request, np.maximum(book.fair_share[row], 0.0)):
        reason = f"queue {job.queue} would exceed its fair share, so it may not reclaim"
        session.note_reason(job, PendingReason(PendingCause.OVER_FAIR_SHARE, reason))
        return None
    if not job.spec.preemptible and not within_bound(
        book.allocated_non_preemptible[row] + request, book.deserved[row]
    ):
        reason = f"queue {job.queue} has no deserved quota left for a non-preemptible job"
        session.note_reason(job, PendingReason(PendingCause.NON_PREEMPTIBLE_OVER_QUOTA, reason))
        return None
    return ReclaimPolicy(session, job, request)


def _victims_possible(session: Session, jobs: list[Job]) -> bool:
    """Some job has a preemptible job in another queue."""
    queues = session.lowest_preemptible_priority
    return any(len(queues) > 1 or (bool(queues) and job.queue not in queues) for job in jobs)


def reclaim(session: Session) -> None:
    run_victim_action(session, _make_policy, lambda job: True, _victims_possible)
