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
        a preemptible job under no limit has nothing to check (`_capacity_problem` would say
        None), which is most jobs of most clusters (the check ran twice per placed pod). Both
        capacity hooks test it first, read off the job's spec (not through `Job.queue`'s
        property) and written out in each, not behind a method: a call per test was most of it."""
        shares = [book.allocatable_share(row).tolist() for row in range(len(book.names))]
        totals = self.session.fairness_totals().tolist()
        self._order_terms = [
            _order_terms(
                shares[row], totals, book.fair_share[row].tolist(), book.deserved[row].tolist(), spec.priority
            )
            for row, spec in enumerate(book.specs)
        ]
        """Per queue row, what queue order reads besides allocations (`OrderTerms`), settled once
        fair shares are. Every pop reads them for two queues or more."""

    def queue_order_key(self, queue: str, job: Sequence[float]) -> OrderKey:
        return self.queue_order_key_at(self.session.queues.index[queue], job)

    def queue_order_key_at(self, row: int, job: Sequence[float]) -> OrderKey:
        """§5.2 rules 1-6 as a sort key: smaller goes first. By row: the job queue knows queues
        by row, and calls this without the session's dispatch (`Session.queue_key_at`).

        Plain floats, not numpy, written out per resource without a loop, lists or helper calls:
        this runs for every queue whose accounting changed on every pop, and the vectors have
        three entries (one unpacking each). Each rule is the comparisons it states, joined by
        `and`/`or` (comparisons of floats have no side effects, so stopping early changes no
        answer); each comparison is an `if`'s test, as CPython 3.11 compares two floats cheaply
        only when a jump follows (stored, or under builtin `max`, it costs more than the loop
        did). The two shares are running maxima over the resources in order, compared as `max`
        compares (a later term replaces the best only when greater), so they are the floats
        `max` of the terms gives.
        """
        cpu, memory, gpus = self.session.queues.allocated_rows[row]
        job_cpu, job_memory, job_gpus = job
        after_cpu, after_memory, after_gpus = cpu + job_cpu, memory + job_memory, gpus + job_gpus
        (
            fair_cpu,
            fair_memory,
            fair_gpus,
            ceiling_cpu,
            ceiling_memory,
            ceiling_gpus,
            none_entitled,
            bound_cpu,
            bound_memory,
            bound_gpus,
            penalised,
            rank,
        ) = self._order_terms[row]
        over_utilized = False
        if fair_cpu < cpu and fair_memory < memory and fair_gpus < gpus:
            over_utilized = True
        starved = False
        if (
            (ceiling_cpu is None or after_cpu <= ceiling_cpu)
            and (ceiling_memory is None or after_memory <= ceiling_memory)
            and (ceiling_gpus is None or after_gpus <= ceiling_gpus)
        ):
            starved = True
        zero_share_used = False
        if none_entitled is not None:
            none_cpu, none_memory, none_gpus = none_entitled
            if (
                (none_cpu and after_cpu > 0.0)
                or (none_memory and after_memory > 0.0)
                or (none_gpus and after_gpus > 0.0)
            ):
                zero_share_used = True
        if penalised:
            with_job, allocated = _penalised_shares(
                (after_cpu, after_memory, after_gpus),
                (cpu, memory, gpus),
                (bound_cpu, bound_memory, bound_gpus),
            )
        else:
            with_job, allocated = after_cpu / bound_cpu, cpu / bound_cpu
            with_job_term, allocated_term = after_memory / bound_memory, memory / bound_memory
            if with_job_term > with_job:
                with_job = with_job_term
            if allocated_term > allocated:
                allocated = allocated_term
            with_job_term, allocated_term = after_gpus / bound_gpus, gpus / bound_gpus
            if with_job_term > with_job:
                with_job = with_job_term
            if allocated_term > allocated:
                allocated = allocated_term
        return (over_utilized, not starved, rank, zero_share_used, with_job, allocated)

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
        spec = job.spec
        if spec.preemptible and not self._limited[spec.queue]:  # unchecked: see `_limited`
            return None
        vector = self.session.fairness_request(tasks, self.session.max_gpu_memory)
        return self._capacity_problem(job, vector)

    def non_preemptible_quota_problem(self, job: Job, tasks: list[Task]) -> PendingReason | None:
        vector = self.session.fairness_request(tasks, self.session.max_gpu_memory)
        return self._quota_problem(job, vector)

    def node_capacity_problem(self, task: Task, accepted_gpus: float) -> str | None:
        spec = task.job.spec
        if spec.preemptible and not self._limited[spec.queue]:  # unchecked: see `_limited`
            return None
        vector = np.array([task.spec.cpu_millis, task.spec.memory, accepted_gpus])
        problem = self._capacity_problem(task.job, vector)
        return None if problem is None else problem.message

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


Floats3 = tuple[float, float, float]
OrderTerms = tuple[
    float,
    float,
    float,
    float | None,
    float | None,
    float | None,
    tuple[bool, ...] | None,
    float,
    float,
    float,
    bool,
    int,
]
"""What queue order reads of a queue besides its allocations: its fair share, its deserved quota
plus the tolerance (None where unlimited), whether it is entitled to none (None where it is
entitled to some of every resource), the bound its share divides by (the cluster's total
where unlimited), whether a bound is zero (a share penalised there), and its priority as queue
order sorts it (the higher first). Per resource (cpu, memory, GPUs) where three, in one flat
tuple: a key unpacks it once, not a tuple of tuples again per term."""


def _order_terms(
    shares: list[float], totals: list[float], fair: list[float], deserved: list[float], priority: int
) -> OrderTerms:
    bound = tuple(
        total if entitled == UNLIMITED else entitled for entitled, total in zip(shares, totals, strict=True)
    )
    none_entitled = tuple(entitled == 0 for entitled in shares)
    ceiling = [None if value == UNLIMITED else value + EPSILON for value in deserved]
    return (
        fair[0],
        fair[1],
        fair[2],
        ceiling[0],
        ceiling[1],
        ceiling[2],
        none_entitled if any(none_entitled) else None,
        bound[0],
        bound[1],
        bound[2],
        any(value == 0.0 for value in bound),
        -priority,
    )


def _penalised_shares(after: Floats3, used: Floats3, bound: Floats3) -> tuple[float, float]:
    """The two shares of a queue with a zero bound (there the share is the use itself,
    penalised): running maxima over the resources in order, a later term replacing the best only
    when greater. A loop of `if` tests, not `max` over generators: a queue entitled to none of a
    resource (a reclaim's victims' queue) is asked on every pop, as any other."""
    with_job = allocated = 0.0
    for resource, limit in enumerate(bound):
        if limit == 0.0:
            with_job_term, allocated_term = (
                after[resource] * ZERO_SHARE_PENALTY,
                used[resource] * ZERO_SHARE_PENALTY,
            )
        else:
            with_job_term, allocated_term = after[resource] / limit, used[resource] / limit
        if resource == 0 or with_job_term > with_job:
            with_job = with_job_term
        if resource == 0 or allocated_term > allocated:
            allocated = allocated_term
    return with_job, allocated
