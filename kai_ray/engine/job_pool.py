"""Session jobs kept from one cycle to the next, for the job specs that come back unchanged.

A scheduler's cluster is mostly running pods no cycle touches, yet every session built a
`Job` (its SubGroup tree, pod sets and tasks) for each of them: a third of a cycle at 40,000
running pods.  A session's job is kept only when that session never moved one of its tasks,
so it is exactly what `build_job` would build again from the same spec; and only while the
node table is the same object, since its tasks name node rows.  The snapshot compiler hands
back the very same `JobSpec` object for a job whose inputs did not change, which is what
makes "the same spec" an identity test.
"""

from __future__ import annotations

from kai_ray.engine.booking import Opening, open_jobs, reopen_jobs
from kai_ray.engine.jobs import Job, build_job
from kai_ray.model.objects import JobSpec, QueueSpec
from kai_ray.model.snapshot import NodeTable

__all__ = ["JobPool"]


class JobPool:
    """Builds a session's jobs, reusing those the previous session left untouched.

    Task uids come from one counter for the pool's whole life, so a kept task and a new one
    never share a uid (uids are identities in a session, never an order).  Whoever reads a
    session after the next one opened must not use a pool: the next session moves kept jobs.
    """

    def __init__(self) -> None:
        self._table: NodeTable | None = None
        self._kept: dict[int, Job] = {}
        """id(spec) → its job; the job holds the spec, so the id cannot be reused meanwhile."""
        self._next_uid = 0
        self._opening: tuple[dict[str, QueueSpec], Opening] | None = None

    def jobs_for(self, specs: list[JobSpec], table: NodeTable) -> list[Job]:
        if table is not self._table:
            self._table, self._kept, self._opening = table, {}, None
        found = list(map(self._kept.get, map(id, specs)))
        jobs: list[Job] = []
        for spec, kept in zip(specs, found, strict=True):
            if kept is None:
                kept = build_job(spec, table.index, self._next_uid)
                self._next_uid += len(spec.tasks)
            jobs.append(kept)
        return jobs

    def opening(
        self,
        jobs: list[Job],
        queues: dict[str, QueueSpec],
        min_gpu_memory: float,
        chains: dict[str, list[int]],
    ) -> Opening:
        """The opening of a session of `jobs`: the last session's, updated with the jobs that came
        and went, while that is exact (`reopen_jobs`) and the queue tree is the same object (a
        queue change renumbers the chains); else added up afresh."""
        assert self._table is not None  # `jobs_for` came first
        gpu_memory = self._table.gpu_memory
        opening = None
        if self._opening is not None and self._opening[0] is queues:
            opening = reopen_jobs(self._opening[1], jobs, gpu_memory, min_gpu_memory, chains)
        if opening is None:
            opening = open_jobs(jobs, gpu_memory, min_gpu_memory, chains)
        self._opening = (queues, opening)
        return opening

    def keep(self, jobs: list[Job], moved: set[Job]) -> None:
        """After a session: keep its jobs that none of its actions moved."""
        kept = dict(zip(map(id, (job.spec for job in jobs)), jobs, strict=True))
        for job in moved:
            kept.pop(id(job.spec), None)
        self._kept = kept
