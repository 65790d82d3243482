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
from kai_ray.engine.requests import FairnessFloats
from kai_ray.engine.session import Session

HeapEntry = tuple[OrderKey, int, Job]
Best = tuple[int, Job, FairnessFloats]
"""The leaf queue's row, its best job and that job's request."""


class JobQueue:
    """Queues are known by their rows in the session's `QueueBook` (fixed for the session), and
    what the queue keeps per queue is a list by row: a pop reads a queue's version, stamp,
    remembered entry and children for several queues, and a list read by an int index costs a
    fraction of a dict lookup by name. Names are read only where a key is computed or two keys
    tie."""

    def __init__(
        self, session: Session, jobs: list[Job], pending: frozenset[int] | set[int] = frozenset()
    ) -> None:
        self.session = session
        self.pending = pending
        self._next_request: dict[Job, FairnessFloats] = {}
        book = session.queues
        count = len(book.names)
        self._names = book.names
        self._rows = book.index
        """Queue → its row in the session's `QueueBook`."""
        self._chains = [book.chains[name] for name in book.names]
        """Row → the rows of its chain (itself and its ancestors)."""
        self._heaps: list[list[HeapEntry]] = [[] for _ in range(count)]
        self._sequence = itertools.count()
        self._stamps = [0] * count
        """Row → pushes and pops so far in its subtree."""
        self._known: list[tuple[int, int, Best | None, OrderKey] | None] = [None] * count
        """Row → (its version plus its stamp then, its version then, its best job below it then,
        its order key with that job's request): see `_best_among`. One flat tuple, stored once
        per queue asked afresh and read by unpacking."""
        self._top_level = [book.index[name] for name in book.top_level()]
        """Listed once: queues do not change within a session, and every pop starts here."""
        self._children: list[list[int] | None] = [
            [book.index[kid] for kid in kids] if (kids := book.children.get(name)) else None
            for name in book.names
        ]
        """Row → its children's rows, None for a leaf (every pop asks of several queues)."""
        self._book = book
        self._key_at = session.queue_key_at
        """`Session.queue_key_at`, read once: a pop computes a key or two."""
        self._count = count
        self._verdicts: dict[int, int] = {}
        """`row * count + other row` → `Session.queue_tiebreak` of the two queues, fixed for the
        session: keys tie on most pops among alike queues, and the session remembers verdicts
        by a tuple of names, built and hashed per tie behind a method call."""
        self._push_all(jobs)

    def _push_all(self, jobs: list[Job]) -> None:
        """What pushing each job in turn into the empty heaps leaves, made in one pass: each
        leaf's heap heapified at once (entries are unique by sequence number, so pops come in the
        same order whatever the heap's layout), sequence numbers by position (as `next` hands
        them out, without a call per job) and each queue stamped once by its leaves' heaps'
        lengths (only a stamp's changes are ever read, and a count per job cost a dict's two
        calls)."""
        order_key, heaps, rows = self.session.standing_job_order_key, self._heaps, self._rows
        for sequence, job in enumerate(jobs):
            heaps[rows[job.spec.queue]].append((order_key(job), sequence, job))
        self._sequence = itertools.count(len(jobs))
        stamps, chains = self._stamps, self._chains
        for leaf, heap in enumerate(heaps):
            if heap:
                heapq.heapify(heap)
                for row in chains[leaf]:
                    stamps[row] += len(heap)

    def push(self, job: Job) -> None:
        self._next_request.pop(job, None)
        entry = (self.session.job_order_key(job), next(self._sequence), job)
        leaf = self._rows[job.queue]
        heapq.heappush(self._heaps[leaf], entry)
        self._stamp(leaf)

    def pop(self) -> Job | None:
        best = self._best_among(self._top_level)
        if best is None:
            return None
        leaf = best[0]
        _, _, job = heapq.heappop(self._heaps[leaf])
        stamps = self._stamps  # `_stamp` written out: once per pop
        for row in self._chains[leaf]:
            stamps[row] += 1
        return job

    def _stamp(self, leaf: int) -> None:
        stamps = self._stamps
        for row in self._chains[leaf]:
            stamps[row] += 1

    def __bool__(self) -> bool:
        return any(self._heaps)

    def _request_of(self, job: Job) -> FairnessFloats:
        """What the job's next attempt would take; only changes when the job itself is placed.
        As floats with its bytes: queue order reads the floats and keys its cache by the bytes."""
        request = self._next_request.get(job)
        if request is None:
            tasks = tasks_to_allocate(self.session, job, self.pending)
            session = self.session
            request = self._next_request[job] = session.fairness_request_floats(tasks, session.min_gpu_memory)
        return request

    def _best_among(self, rows: list[int]) -> Best | None:
        """The best job below the queues of `rows` by queue order, ties broken by
        `Session.queue_tiebreak`.

        Each queue's best job below it and its order key are remembered with the queue's version
        and stamp then, and read back while neither changes (see the module's docstring): half
        the queues a pop asks are unchanged since they last answered. Both counts only grow, so
        their sum changes whenever either does: one comparison per queue asked. A queue asked
        afresh is computed here too, not behind a call per queue (a pop asks two afresh at
        10x50, the charged leaf and its parent).

        A key asked after the queue's version moved since this queue last asked is computed
        without the session's cache: the cache keeps keys by version, so it could only answer one
        some other caller asked at the new version, and after a placement (almost every pop)
        none has; looking it up and storing it cost a third of a key. The cache still serves the
        first key of each queue and keys asked at an unchanged version (a job that placed nothing
        leaves the next one, often alike, the same queue state).

        Keys are compared for a tie first: they tie on most pops among alike queues, and a tuple's
        `<` after a failed `==` only walks to where they differ."""
        versions, stamps, known = self._book.versions, self._stamps, self._known
        best: Best | None = None
        best_row = 0
        best_key: OrderKey = ()
        for row in rows:
            version = versions[row]
            remembered = known[row]
            if remembered is not None and remembered[0] == version + stamps[row]:
                _, _, candidate, key = remembered
            else:
                children = self._children[row]
                if children is None:
                    heap = self._heaps[row]
                    candidate = (row, heap[0][2], self._request_of(heap[0][2])) if heap else None
                else:
                    candidate = self._best_among(children)
                key = ()
                if candidate is not None:
                    vector, vector_bytes = candidate[2]
                    if remembered is not None and remembered[1] != version:
                        key = self._key_at(row, vector)
                    else:
                        key = self.session.queue_order_key(self._names[row], vector, vector_bytes)
                known[row] = (version + stamps[row], version, candidate, key)
            if candidate is None:
                continue
            if best is None:
                best, best_row, best_key = candidate, row, key
            elif key == best_key:
                pair = row * self._count + best_row
                verdict = self._verdicts.get(pair)
                if verdict is None:
                    verdict = self._verdicts[pair] = self.session.queue_tiebreak(
                        self._names[row], self._names[best_row]
                    )
                if verdict < 0:
                    best, best_row, best_key = candidate, row, key
            elif key < best_key:
                best, best_row, best_key = candidate, row, key
        return best
