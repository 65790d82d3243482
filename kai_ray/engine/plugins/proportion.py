"""Queue fairness: fair-share division, queue order and capacity checks (§5.2, §6).

The accounting itself lives in the session's `QueueBook` (it must follow
every virtual placement); this plugin decides what the numbers mean.
"""

from __future__ import annotations

import numpy as np

from kai_ray.engine.jobs import Job, Task
from kai_ray.engine.plugins.base import OrderKey, Plugin
from kai_ray.engine.reasons import PendingCause, PendingReason
from kai_ray.model.objects import UNLIMITED
from kai_ray.model.resources import EPSILON, FAIRNESS_RESOURCES

ZERO_SHARE_PENALTY = 1000.0


class ProportionPlugin(Plugin):
    name = "proportion"

    def on_session_open(self) -> None:
        k_value = float(self.arguments.get("kValue", self.session.config.k_value))
        self.session.queues.compute_fair_shares(self.session.fairness_totals(), max(k_value, 0.0))

    def queue_order_key(self, queue: str, job: np.ndarray) -> OrderKey:
        """§5.2 rules 1-6 as a sort key: smaller goes first.

        Plain floats, not numpy: this runs for every queue on every pop and
        the vectors have three entries.
        """
        book = self.session.queues
        row = book.index[queue]
        allocated = book.allocated[row].tolist()
        with_job = [a + j for a, j in zip(allocated, job.tolist(), strict=True)]
        share = book.allocatable_share(row).tolist()
        fair = book.fair_share[row].tolist()
        deserved = book.deserved[row].tolist()
        over_utilized = all(f < a for f, a in zip(fair, allocated, strict=True))
        starved = all(d == UNLIMITED or w <= d + EPSILON for w, d in zip(with_job, deserved, strict=True))
        zero_share_used = any(s == 0 and w > 0 for s, w in zip(share, with_job, strict=True))
        return (
            over_utilized,
            not starved,
            -book.specs[row].priority,
            zero_share_used,
            self._dominant_share(with_job, share),
            self._dominant_share(allocated, share),
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

    def _dominant_share(self, allocated: list[float], share: list[float]) -> float:
        totals = self.session.fairness_totals().tolist()
        terms = []
        for used, entitled, total in zip(allocated, share, totals, strict=True):
            bound = total if entitled == UNLIMITED else entitled
            terms.append(used * ZERO_SHARE_PENALTY if bound == 0 else used / bound)
        return max(terms, default=0.0)

    def job_capacity_problem(self, job: Job, tasks: list[Task]) -> PendingReason | None:
        vector = self.session.fairness_request(tasks, self.session.max_gpu_memory)
        return self._capacity_problem(job, vector)

    def non_preemptible_quota_problem(self, job: Job, tasks: list[Task]) -> PendingReason | None:
        vector = self.session.fairness_request(tasks, self.session.max_gpu_memory)
        return self._quota_problem(job, vector)

    def node_capacity_problem(self, task: Task, accepted_gpus: float) -> str | None:
        vector = np.array([task.spec.cpu_millis, task.spec.memory, accepted_gpus])
        problem = self._capacity_problem(task.job, vector)
        return None if problem is None else problem.message

    def _capacity_problem(self, job: Job, vector: np.ndarray) -> PendingReason | None:
        book = self.session.queues
        for row in book.chains[job.queue]:
            limit = book.limit[row]
            over = (limit != UNLIMITED) & (vector > 0) & (book.allocated[row] + vector > limit + EPSILON)
            if over.any():
                message = _describe(book.names[row], "limit", over, book.allocated[row], vector, limit)
                return PendingReason(PendingCause.OVER_LIMIT, message)
        return self._quota_problem(job, vector)

    def _quota_problem(self, job: Job, vector: np.ndarray) -> PendingReason | None:
        if job.spec.preemptible:
            return None
        book = self.session.queues
        for row in book.chains[job.queue]:
            deserved = book.deserved[row]
            used = book.allocated_non_preemptible[row]
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
