"""Jobs ordered across the queue tree (§5.1).

Each leaf queue keeps a heap of its jobs (job order). Popping walks from
the top-level queues down, choosing at each level the child whose best job
goes first by queue order, re-evaluated on every pop because each
allocation changes the queues' accounting.

Each queue's best job and its order key are remembered until its subtree
changes: a queue's order key reads only its own accounting (`QueueBook.versions`
counts every charge to it, and a charge to a leaf bumps every ancestor too), its
best job's request (fixed until that job is pushed again) and tie-breaks fixed
for the session; so a choice made under the same version of the queue and the
same pushes and pops below it is the choice a fresh walk makes, and its key the
key a fresh walk computes.
"""

from __future__ import annotations

import heapq
import itertools

from kai_ray.engine.gang import tasks_to_allocate
from kai_ray.engine.jobs import Job
from kai_ray.engine.plugins.base import OrderKey
from kai_ray.engine.session import FairnessFloats, Session

HeapEntry = tuple[OrderKey, int, Job]
Best = tuple[str, Job, FairnessFloats]
"""The leaf queue, its best job and that job's request."""
Entry = tuple[Best, OrderKey]
"""A queue's best job below it and the queue's order key with that job's request."""


class JobQueue:
    def __init__(
        self, session: Session, jobs: list[Job], pending: frozenset[int] | set[int] = frozenset()
    ) -> None:
        self.session = session
        self.pending = pending
        self._next_request: dict[Job, FairnessFloats] = {}
        self._heaps: dict[str, list[HeapEntry]] = {}
        self._sequence = itertools.count()
        self._stamps: dict[str, int] = dict.fromkeys(session.queues.names, 0)
        """Queue → pushes and pops so far in its subtree."""
        self._known: dict[str, tuple[int, int, Entry | None]] = {}
        """Queue → (its version plus its stamp then, its version then, its entry then): see
        `_entry`."""
        self._rows = session.queues.index
        """Queue → its row in the session's `QueueBook` (fixed for the session)."""
        self._top_level = session.queues.top_level()
        """Listed once: queues do not change within a session, and every pop starts here."""
        self._children = {queue: kids for queue, kids in session.queues.children.items() if kids}
        """Parent queue → its children, without the leaves (every pop asks of several queues)."""
        self._push_all(jobs)

    def _push_all(self, jobs: list[Job]) -> None:
        """What pushing each job in turn leaves, made in one pass: each leaf's heap heapified at
        once (entries are unique by sequence number, so pops come in the same order whatever the
        heap's layout) and each queue stamped once by its count (only a stamp's changes are ever
        read)."""
        counts: dict[str, int] = {}
        order_key, sequence, heaps = self.session.job_order_key, self._sequence, self._heaps
        for job in jobs:
            queue = job.spec.queue
            heaps.setdefault(queue, []).append((order_key(job), next(sequence), job))
            counts[queue] = counts.get(queue, 0) + 1
        for heap in self._heaps.values():
            heapq.heapify(heap)
        book = self.session.queues
        for leaf, count in counts.items():
            for row in book.chains[leaf]:
                self._stamps[book.names[row]] += count

    def push(self, job: Job) -> None:
        self._next_request.pop(job, None)
        entry = (self.session.job_order_key(job), next(self._sequence), job)
        heapq.heappush(self._heaps.setdefault(job.queue, []), entry)
        self._stamp(job.queue)

    def pop(self) -> Job | None:
        best = self._best_among(self._top_level)
        if best is None:
            return None
        leaf = best[0]
        _, _, job = heapq.heappop(self._heaps[leaf])
        self._stamp(leaf)
        return job

    def _stamp(self, leaf: str) -> None:
        book = self.session.queues
        for row in book.chains[leaf]:
            self._stamps[book.names[row]] += 1

    def __bool__(self) -> bool:
        return any(self._heaps.values())

    def _entry(self, queue: str) -> Entry | None:
        """The queue's best job below it and its order key, remembered while neither the queue's
        version nor its stamp changes (see the module's docstring). Both counts only grow, so
        their sum changes whenever either does: one comparison per queue asked (a pop asks two
        queues per level, and one of each pair is the queue the last placement left alone).

        A key asked after the queue's version moved since this queue last asked is computed
        without the session's cache: the cache keeps keys by version, so it could only answer one
        some other caller asked at the new version, and after a placement (almost every pop)
        none has; looking it up and storing it cost a third of a key. The cache still serves the
        first key of each queue and keys asked at an unchanged version (a job that placed nothing
        leaves the next one, often alike, the same queue state)."""
        session = self.session
        version = session.queues.versions[self._rows[queue]]
        count = version + self._stamps[queue]
        known = self._known.get(queue)
        if known is not None and known[0] == count:
            return known[2]
        children = self._children.get(queue)
        if children is None:
            heap = self._heaps.get(queue)
            best = (queue, heap[0][2], self._request_of(heap[0][2])) if heap else None
        else:
            best = self._best_among(children)
        entry = None
        if best is not None:
            vector, vector_bytes = best[2]
            if known is not None and known[1] != version:
                entry = (best, session.uncached_queue_order_key(queue, vector))
            else:
                entry = (best, session.queue_order_key(queue, vector, vector_bytes))
        self._known[queue] = (count, version, entry)
        return entry

    def _request_of(self, job: Job) -> FairnessFloats:
        """What the job's next attempt would take; only changes when the job itself is placed.
        As floats with its bytes: queue order reads the floats and keys its cache by the bytes."""
        request = self._next_request.get(job)
        if request is None:
            tasks = tasks_to_allocate(self.session, job, self.pending)
            session = self.session
            request = self._next_request[job] = session.fairness_request_floats(tasks, session.min_gpu_memory)
        return request

    def _best_among(self, queues: list[str]) -> Best | None:
        best: Best | None = None
        best_queue = ""
        best_key: OrderKey = ()
        session = self.session
        for queue in queues:
            entry = self._entry(queue)
            if entry is None:
                continue
            candidate, key = entry
            if (
                best is None
                or key < best_key
                or (key == best_key and session.queue_tiebreak(queue, best_queue) < 0)
            ):
                best, best_queue, best_key = candidate, queue, key
        return best
