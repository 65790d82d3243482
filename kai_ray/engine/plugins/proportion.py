"""Queue fairness: fair-share division, queue order and capacity checks (§5.2, §6).

The accounting itself lives in the session's `QueueBook` (it must follow
every virtual placement); this plugin decides what the numbers mean.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from kai_ray.engine.jobs import Job, Task
from kai_ray.engine.plugins.base import OrderKey, Plugin
from kai_ray.engine.reasons import PendingCause, PendingReason
from kai_ray.model.objects import UNLIMITED
from kai_ray.model.resources import EPSILON, FAIRNESS_RESOURCES

RESOURCE_INDICES = tuple(range(len(FAIRNESS_RESOURCES)))
"""Positions of the fairness resources in queue vectors (cpu, memory, gpu)."""

ZERO_SHARE_PENALTY = 1000.0
"""A dominant share's term is what a queue uses of what it may take; where it may take none, the
use itself, heavily penalised."""


class ProportionPlugin(Plugin):
    name = "proportion"

    def on_session_open(self) -> None:
        k_value = float(self.arguments.get("kValue", self.session.config.k_value))
        book = self.session.queues
        book.compute_fair_shares(self.session.fairness_totals(), max(k_value, 0.0))
        self._limited = {
            queue: bool((book.limit[chain] != UNLIMITED).any()) for queue, chain in book.chains.items()
        }
        """Queue → whether a queue of its chain has a limit: limits are fixed for the session, and
        a preemptible job under no limit has nothing to check, which is most jobs of most
        clusters (the check ran twice per placed pod)."""
        shares = [book.allocatable_share(row).tolist() for row in range(len(book.names))]
        totals = self.session.fairness_totals().tolist()
        self._order_terms = [
            [
                (
                    entitled == 0,
                    total if entitled == UNLIMITED else entitled,
                    fair,
                    None if deserved == UNLIMITED else deserved + EPSILON,
                )
                for entitled, total, fair, deserved in zip(
                    shares[row],
                    totals,
                    book.fair_share[row].tolist(),
                    book.deserved[row].tolist(),
                    strict=True,
                )
            ]
            for row in range(len(book.names))
        ]
        """Per queue row and resource, what queue order reads besides allocations, as plain floats
        settled once fair shares are: whether the queue is entitled to none, the bound its share
        divides by (the cluster's total where unlimited), its fair share and its deserved quota
        plus the tolerance (None where unlimited). Every pop reads them for two queues or more."""
        self._ranks = [-spec.priority for spec in book.specs]
        """Per queue row, its priority as queue order sorts it (the higher first)."""

    def queue_order_key(self, queue: str, job: Sequence[float]) -> OrderKey:
        """§5.2 rules 1-6 as a sort key: smaller goes first.

        Plain floats, not numpy, and one pass without helper calls or lists: this runs for every
        queue whose accounting changed on every pop, and the vectors have three entries. The two
        shares are running maxima, compared as `max` compares (a later term replaces the best
        only when greater), so they are the floats `max` of the terms gives.
        """
        book = self.session.queues
        row = book.index[queue]
        over_utilized, starved, zero_share_used = True, True, False
        with_job: float | None = None
        allocated: float | None = None
        used_row = book.allocated_rows[row]
        row_terms = self._order_terms[row]
        # By index over a constant tuple, not over a `zip` of the three lists: building the zip
        # and unpacking its nested tuples cost about as much as the arithmetic. Comparisons with
        # float literals: a float compared with an int takes the interpreter's slow path.
        for resource in RESOURCE_INDICES:
            used = used_row[resource]
            after = used + job[resource]
            entitled_none, bound, fair, ceiling = row_terms[resource]
            if over_utilized and not fair < used:
                over_utilized = False
            if starved and ceiling is not None and not after <= ceiling:
                starved = False
            if entitled_none and after > 0.0:
                zero_share_used = True
            if bound == 0.0:
                with_job_term, allocated_term = after * ZERO_SHARE_PENALTY, used * ZERO_SHARE_PENALTY
            else:
                with_job_term, allocated_term = after / bound, used / bound
            if with_job is None or with_job_term > with_job:
                with_job = with_job_term
            if allocated is None or allocated_term > allocated:
                allocated = allocated_term
        return (
            over_utilized,
            not starved,
            self._ranks[row],
            zero_share_used,
            0.0 if with_job is None else with_job,
            0.0 if allocated is None else allocated,
        )

    def queue_tiebreak(self, left: str, right: str) -> int:
        """Rule 7: the queue entitled to less in every resource (and strictly less in one) first."""
        book = self.session.queues
        lshare = book.allocatable_share(book.index[left]).tolist()
        rshare = book.allocatable_share(book.index[right]).tolist()
        if lshare == rshare:
            return 0
        if all(lv <= rv for lv, rv in zip(lshare, rshare, strict=True)):
            return -1
        if all(rv <= lv for lv, rv in zip(lshare, rshare, strict=True)):
            return 1
        return 0

    def job_capacity_problem(self, job: Job, tasks: list[Task]) -> PendingReason | None:
        if self._unchecked(job):
            return None
        vector = self.session.fairness_request(tasks, self.session.max_gpu_memory)
        return self._capacity_problem(job, vector)

    def non_preemptible_quota_problem(self, job: Job, tasks: list[Task]) -> PendingReason | None:
        vector = self.session.fairness_request(tasks, self.session.max_gpu_memory)
        return self._quota_problem(job, vector)

    def node_capacity_problem(self, task: Task, accepted_gpus: float) -> str | None:
        if self._unchecked(task.job):
            return None
        vector = np.array([task.spec.cpu_millis, task.spec.memory, accepted_gpus])
        problem = self._capacity_problem(task.job, vector)
        return None if problem is None else problem.message

    def _unchecked(self, job: Job) -> bool:
        """No limit and no quota rule can refuse this job: `_capacity_problem` would say None.
        Read off the spec, not through `Job.queue`'s property: asked twice per pod placed."""
        spec = job.spec
        return spec.preemptible and not self._limited[spec.queue]

    def _capacity_problem(self, job: Job, vector: np.ndarray) -> PendingReason | None:
        book = self.session.queues
        for row in book.chains[job.queue]:
            limit = book.limit[row]
            allocated = book.allocated_row(row)
            over = (limit != UNLIMITED) & (vector > 0) & (allocated + vector > limit + EPSILON)
            if over.any():
                message = _describe(book.names[row], "limit", over, allocated, vector, limit)
                return PendingReason(PendingCause.OVER_LIMIT, message)
        return self._quota_problem(job, vector)

    def _quota_problem(self, job: Job, vector: np.ndarray) -> PendingReason | None:
        if job.spec.preemptible:
            return None
        book = self.session.queues
        for row in book.chains[job.queue]:
            deserved = book.deserved[row]
            used = book.protected_row(row)
            over = (deserved != UNLIMITED) & (vector > 0) & (used + vector > deserved + EPSILON)
            if over.any():
                message = _describe(
                    book.names[row], "quota for non-preemptible jobs", over, used, vector, deserved
                )
                return PendingReason(PendingCause.NON_PREEMPTIBLE_OVER_QUOTA, message)
        return None


def _describe(
    queue: str, bound_name: str, over: np.ndarray, used: np.ndarray, vector: np.ndarray, bound: np.ndarray
) -> str:
    index = int(np.argmax(over))
    resource = FAIRNESS_RESOURCES[index]
    return (
        f"queue {queue} {resource} {bound_name} {_fmt(bound[index])} would be exceeded "
        f"({_fmt(used[index])} in use + {_fmt(vector[index])} requested)"
    )


def _fmt(value: float) -> str:
    return f"{value:g}"
