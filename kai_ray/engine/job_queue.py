"""Jobs ordered across the queue tree (§5.1).

Each leaf queue keeps a heap of its jobs (job order). Popping walks from
the top-level queues down, choosing at each level the child whose best job
goes first by queue order, re-evaluated on every pop because each
allocation changes the queues' accounting.
"""

from __future__ import annotations

import heapq
import itertools

import numpy as np

from kai_ray.engine.gang import tasks_to_allocate
from kai_ray.engine.jobs import Job
from kai_ray.engine.plugins.base import OrderKey
from kai_ray.engine.session import Session

HeapEntry = tuple[OrderKey, int, Job]


class JobQueue:
    def __init__(
        self, session: Session, jobs: list[Job], pending: frozenset[int] | set[int] = frozenset()
    ) -> None:
        self.session = session
        self.pending = pending
        self._next_request: dict[Job, np.ndarray] = {}
        self._heaps: dict[str, list[HeapEntry]] = {}
        self._sequence = itertools.count()
        for job in jobs:
            self.push(job)

    def push(self, job: Job) -> None:
        self._next_request.pop(job, None)
        entry = (self.session.job_order_key(job), next(self._sequence), job)
        heapq.heappush(self._heaps.setdefault(job.queue, []), entry)

    def pop(self) -> Job | None:
        best = self._best_among(self.session.queues.top_level())
        if best is None:
            return None
        leaf = best[0]
        _, _, job = heapq.heappop(self._heaps[leaf])
        return job

    def __bool__(self) -> bool:
        return any(self._heaps.values())

    def _best_in(self, queue: str) -> tuple[str, Job, np.ndarray] | None:
        children = self.session.queues.children.get(queue, [])
        if not children:
            heap = self._heaps.get(queue)
            if not heap:
                return None
            job = heap[0][2]
            return queue, job, self._request_of(job)
        return self._best_among(children)

    def _request_of(self, job: Job) -> np.ndarray:
        """What the job's next attempt would take; only changes when the job itself is placed."""
        vector = self._next_request.get(job)
        if vector is None:
            tasks = tasks_to_allocate(self.session, job, self.pending)
            vector = self.session.fairness_request(tasks, self.session.min_gpu_memory)
            self._next_request[job] = vector
        return vector

    def _best_among(self, queues: list[str]) -> tuple[str, Job, np.ndarray] | None:
        best: tuple[str, Job, np.ndarray] | None = None
        best_queue = ""
        best_key: OrderKey = ()
        for queue in queues:
            candidate = self._best_in(queue)
            if candidate is None:
                continue
            key = self.session.queue_order_key(queue, candidate[2])
            if (
                best is None
                or key < best_key
                or (key == best_key and self.session.queue_tiebreak(queue, best_queue) < 0)
            ):
                best, best_queue, best_key = candidate, queue, key
        return best
