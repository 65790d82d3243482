"""Victim candidates and the order they are given up in (§11.4).

Victims come from the queue that is the most "over" once the victims chosen
so far are taken away (queue order reversed), and inside a queue from the
least important job. A job is peeled in batches: elastic surplus one pod at
a time, then surplus subgroups, then the rest of the job whole.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

import numpy as np

from kai_ray.engine.jobs import Job, PodSet, SubGroupSet, Task, elastic_rank
from kai_ray.engine.plugins.base import OrderKey
from kai_ray.engine.session import Session
from kai_ray.model.objects import ACTIVE_ALLOCATED, JobSpec


@dataclass(eq=False)
class VictimJob:
    """A candidate job and the pods of it not yet handed out as victims."""

    job: Job
    remaining: list[Task] = field(default_factory=list)

    @classmethod
    def of(cls, job: Job) -> VictimJob:
        return cls(job, [t for t in job.tasks if t.status in ACTIVE_ALLOCATED])

    @property
    def spec(self) -> JobSpec:
        return self.job.spec

    @property
    def name(self) -> str:
        return self.job.name

    def elastic_rank(self) -> int:
        remaining = {t.uid for t in self.remaining}
        return elastic_rank(
            [(len(_active(p, remaining)), p.min_available) for p in self.job.pod_sets.values()]
        )


def next_batch(session: Session, victim: VictimJob) -> list[Task]:
    """The pods this job gives up next, in reverse task order."""
    remaining = {t.uid for t in victim.remaining}
    surplus = _elastic_surplus(session, victim.job.root, remaining)
    if surplus:
        return surplus
    member = _surplus_member(session, victim.job.root, remaining)
    if member:
        return member
    return list(reversed(session.sorted_tasks(victim.remaining)))


def _active(pod_set: PodSet, remaining: set[int]) -> list[Task]:
    return [t for t in pod_set.tasks if t.uid in remaining]


def _elastic_surplus(session: Session, node: SubGroupSet, remaining: set[int]) -> list[Task]:
    for member in reversed(session.sorted_members(node)):
        if isinstance(member, SubGroupSet):
            found = _elastic_surplus(session, member, remaining)
            if found:
                return found
            continue
        active = _active(member, remaining)
        if len(active) > member.min_available:
            return [session.sorted_tasks(active)[-1]]
    return []


def _member_satisfied(member: SubGroupSet | PodSet, remaining: set[int]) -> bool:
    if isinstance(member, PodSet):
        return len(_active(member, remaining)) >= member.min_available
    return sum(1 for m in member.members if _member_satisfied(m, remaining)) >= member.min_members()


def _surplus_member(session: Session, node: SubGroupSet, remaining: set[int]) -> list[Task]:
    members = session.sorted_members(node)
    satisfied = [m for m in members if _member_satisfied(m, remaining)]
    if len(satisfied) > node.min_members():
        for least in reversed(satisfied):
            pod_sets = [least] if isinstance(least, PodSet) else least.all_pod_sets()
            tasks = [t for p in pod_sets for t in _active(p, remaining)]
            if tasks:
                return list(reversed(session.sorted_tasks(tasks)))
    for member in members:
        if isinstance(member, SubGroupSet):
            found = _surplus_member(session, member, remaining)
            if found:
                return found
    return []


@dataclass(eq=False)
class _LeastImportantFirst:
    """Heap entry reversing job order: the job that would be scheduled last is evicted first."""

    key: OrderKey
    victim: VictimJob

    def __lt__(self, other: _LeastImportantFirst) -> bool:
        return other.key < self.key


class VictimQueue:
    """Pops victim batches: worst queue first (re-judged after every pop), worst job inside it."""

    def __init__(self, session: Session, candidates: list[Job]) -> None:
        self.session = session
        self._by_leaf: dict[str, list[_LeastImportantFirst]] = {}
        self._taken: dict[str, np.ndarray] = {}
        for job in candidates:
            victim = VictimJob.of(job)
            if victim.remaining:
                self._push(victim)

    def _push(self, victim: VictimJob) -> None:
        """Keyed on what is left of the job, so a peeled elastic job is judged anew."""
        entry = _LeastImportantFirst(self.session.job_order_key(victim), victim)
        heapq.heappush(self._by_leaf.setdefault(victim.job.queue, []), entry)

    def pop(self) -> tuple[Job, list[Task]] | None:
        leaf = self._worst_among(self.session.queues.top_level())
        if leaf is None:
            return None
        victim = heapq.heappop(self._by_leaf[leaf]).victim
        batch = next_batch(self.session, victim)
        taken = {t.uid for t in batch}
        victim.remaining = [t for t in victim.remaining if t.uid not in taken]
        if victim.remaining:
            self._push(victim)
        vector = sum(
            (self.session.placed_fairness(t, t.node) for t in batch if t.node is not None), np.zeros(3)
        )
        for row in self.session.queues.chains[leaf]:
            name = self.session.queues.names[row]
            self._taken[name] = self._taken.get(name, np.zeros(3)) + vector
        return victim.job, batch

    def _has_victims(self, queue: str) -> bool:
        children = self.session.queues.children.get(queue, [])
        if not children:
            return bool(self._by_leaf.get(queue))
        return any(self._has_victims(child) for child in children)

    def _worst_among(self, queues: list[str]) -> str | None:
        """The queue that would be served last, judged with the victims taken so far removed."""
        worst: str | None = None
        worst_key: OrderKey = ()
        for queue in queues:
            if not self._has_victims(queue):
                continue
            taken = -self._taken.get(queue, np.zeros(3))
            key = self.session.queue_order_key(queue, taken.tolist(), taken.tobytes())
            if (
                worst is None
                or key > worst_key
                or (key == worst_key and self.session.queue_tiebreak(queue, worst) > 0)
            ):
                worst, worst_key = queue, key
        if worst is None:
            return None
        children = self.session.queues.children.get(worst, [])
        return self._worst_among(children) if children else worst
