"""Queue fairness: fair-share division, queue order and capacity checks (§5.2, §6).

The accounting itself lives in the session's `QueueBook` (it must follow
every virtual placement); this plugin decides what the numbers mean.
"""

from __future__ import annotations

import numpy as np

from kai_ray.engine.jobs import Job, Task
from kai_ray.engine.plugins.base import Plugin
from kai_ray.model.objects import UNLIMITED
from kai_ray.model.resources import EPSILON, FAIRNESS_RESOURCES

ZERO_SHARE_PENALTY = 1000.0


class ProportionPlugin(Plugin):
    name = "proportion"

    def on_session_open(self) -> None:
        k_value = float(self.arguments.get("kValue", self.session.config.k_value))
        self.session.queues.compute_fair_shares(self.session.fairness_totals(), max(k_value, 0.0))

    def queue_compare(self, left: str, right: str, left_job: np.ndarray, right_job: np.ndarray) -> int:
        book = self.session.queues
        lrow, rrow = book.index[left], book.index[right]
        rules = (
            lambda row, job: bool(np.all(book.fair_share[row] < book.allocated[row])),
            lambda row, job: not self._starved(row, job),
            lambda row, job: -book.specs[row].priority,
            self._violates_zero_share,
            lambda row, job: self._dominant_share(row, job),
            lambda row, job: self._dominant_share(row, np.zeros(3)),
        )
        for rule in rules:
            lval, rval = rule(lrow, left_job), rule(rrow, right_job)
            if lval != rval:
                return -1 if lval < rval else 1
        lshare, rshare = book.allocatable_share(lrow), book.allocatable_share(rrow)
        if np.all(lshare <= rshare) and np.any(lshare < rshare):
            return -1
        if np.all(rshare <= lshare) and np.any(rshare < lshare):
            return 1
        return 0

    def _starved(self, row: int, job: np.ndarray) -> bool:
        book = self.session.queues
        deserved = book.deserved[row]
        fits = (book.allocated[row] + job <= deserved + EPSILON) | (deserved == UNLIMITED)
        return bool(np.all(fits))

    def _violates_zero_share(self, row: int, job: np.ndarray) -> bool:
        book = self.session.queues
        share = book.allocatable_share(row)
        return bool(np.any((share == 0) & (book.allocated[row] + job > 0)))

    def _dominant_share(self, row: int, job: np.ndarray) -> float:
        book = self.session.queues
        allocated = book.allocated[row] + job
        share = book.allocatable_share(row)
        share = np.where(share == UNLIMITED, self.session.fairness_totals(), share)
        terms = np.divide(allocated, share, out=allocated * ZERO_SHARE_PENALTY, where=share != 0)
        return float(terms.max(initial=0.0))

    def job_capacity_problem(self, job: Job, tasks: list[Task]) -> str | None:
        vector = self.session.fairness_request(tasks, self.session.max_gpu_memory)
        return self._capacity_problem(job, vector)

    def non_preemptible_quota_problem(self, job: Job, tasks: list[Task]) -> str | None:
        vector = self.session.fairness_request(tasks, self.session.max_gpu_memory)
        return self._quota_problem(job, vector)

    def node_capacity_problem(self, task: Task, accepted_gpus: float) -> str | None:
        vector = np.array([task.spec.cpu_millis, task.spec.memory, accepted_gpus])
        return self._capacity_problem(task.job, vector)

    def _capacity_problem(self, job: Job, vector: np.ndarray) -> str | None:
        book = self.session.queues
        for row in book.chains[job.queue]:
            limit = book.limit[row]
            over = (limit != UNLIMITED) & (vector > 0) & (book.allocated[row] + vector > limit + EPSILON)
            if over.any():
                return _describe(book.names[row], "limit", over, book.allocated[row], vector, limit)
        return self._quota_problem(job, vector)

    def _quota_problem(self, job: Job, vector: np.ndarray) -> str | None:
        if job.spec.preemptible:
            return None
        book = self.session.queues
        for row in book.chains[job.queue]:
            deserved = book.deserved[row]
            used = book.allocated_non_preemptible[row]
            over = (deserved != UNLIMITED) & (vector > 0) & (used + vector > deserved + EPSILON)
            if over.any():
                return _describe(
                    book.names[row], "quota for non-preemptible jobs", over, used, vector, deserved
                )
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
