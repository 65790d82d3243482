"""A session's view of the rules that read other pods: one verdict per pod placement.

Made only for a session whose snapshot has a pod with such a rule (`needs_pod_constraints`), so
a cluster without any pays nothing; every other pod then still takes the node finder's fast path
unless an anti-affinity of a pod on a node selects it (the rule is symmetric).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

import numpy as np

from kai_ray.engine.constraints import rules
from kai_ray.engine.constraints.index import Member, PodIndex, presence_of
from kai_ray.engine.constraints.rules import PodView, RuleOutcome
from kai_ray.engine.jobs import JobFacts, Task, job_facts
from kai_ray.engine.reasons import NodeFilterCause, NodeRefusal
from kai_ray.model.objects import OCCUPYING, RELEASING, HeldPod, PodAffinityTerm, TaskStatus
from kai_ray.model.resources import EPSILON
from kai_ray.model.snapshot import Snapshot

if TYPE_CHECKING:
    from collections.abc import Iterator

    from kai_ray.engine.session import Session

_GOING = frozenset({RELEASING, TaskStatus.STUCK_IN_RELEASING})


def needs_pod_constraints(session: Session) -> bool:
    """Whether a pod of the session, ours or held, carries a rule the index serves (the facts its
    jobs already hold, without an identity-cache lookup per job)."""
    return _any_pod_constraints((job.facts for job in session.jobs), session.snapshot.held)


def snapshot_has_pod_constraints(snapshot: Snapshot) -> bool:
    """`needs_pod_constraints` of a snapshot before any session opens over it."""
    return _any_pod_constraints(map(job_facts.of, snapshot.jobs), snapshot.held)


def _any_pod_constraints(facts: Iterable[JobFacts], held: Iterable[HeldPod]) -> bool:
    return any(f.pod_constraints for f in facts) or any(h.task.has_pod_constraints for h in held)


class Verdict:
    """What the rules say of the nodes for one pod: per row (`admits_row`, what walking the node
    finder's ranking asks) or as a mask made on first ask (`admits`), a bonus per row for its
    preferences, and whether it may start on a row now or only wait there (a going pod still
    holds a port or resource it needs)."""

    def __init__(
        self,
        outcomes: list[RuleOutcome],
        bonus: np.ndarray | None,
        starts_now: Callable[[int], bool],
        rows: int,
    ) -> None:
        self.outcomes = outcomes
        self.bonus = bonus
        self.starts_now = starts_now
        self._rows = rows

    @functools.cached_property
    def admits(self) -> np.ndarray:
        admits = np.ones(self._rows, dtype=bool)
        for outcome in self.outcomes:
            admits &= outcome.admits
        return admits

    def admits_row(self, row: int) -> bool:
        return all(outcome.admits_row(row) for outcome in self.outcomes)


class PodConstraints:
    def __init__(self, session: Session) -> None:
        self.session = session
        self.facts = rules.node_facts(session.nodes.table)
        self.index = PodIndex(session.nodes.table, self._members())
        self.checks_predicates = session.predicates_enabled
        """KAI runs Kubernetes' filters (affinity, spread, ports) in its `predicates` plugin; the
        extended-resource fit is node fit, checked always."""
        self._selects: dict[tuple[PodAffinityTerm, int, str], bool] = {}

    def _members(self) -> Iterator[Member]:
        session = self.session
        for job in session.jobs:
            namespace = job.spec.namespace
            for task in job.tasks:
                if task.node is None:
                    continue
                presence = presence_of(task.status, self._evicted_here(task))
                if presence is not None:
                    yield Member(task.uid, task.node, task.spec, namespace, presence)
        index = session.nodes.table.index
        for offset, held in enumerate(session.snapshot.held):
            spec = held.task
            if spec.node is not None and spec.status in OCCUPYING:
                presence = presence_of(spec.status, False)
                if presence is not None:
                    yield Member(-1 - offset, index[spec.node], spec, held.namespace, presence)

    def _evicted_here(self, task: Task) -> bool:
        """Releasing because this session evicted it (not in the snapshot's own releasing)."""
        if task.status not in _GOING:
            return False
        at_open = self.session.placed_at_open.get(task.uid)
        return at_open is not None and at_open[0] not in _GOING

    def moved(self, task: Task) -> None:
        """Keep the index as the session's primitive left the task (`Session.move_task`)."""
        if task.node is None:
            self.index.remove(task.uid)
            return
        presence = presence_of(task.status, self._evicted_here(task))
        if presence is None:
            self.index.remove(task.uid)
        else:
            self.index.place(Member(task.uid, task.node, task.spec, task.job.spec.namespace, presence))

    def verdict(self, task: Task) -> Verdict | None:
        """None when no rule here concerns the pod (the node finder's fast path serves it)."""
        pod = PodView(task.spec, task.job.spec.namespace)
        selecting = self._selecting(pod, task.uid)
        if not (pod.spec.has_pod_constraints or selecting):
            return None
        outcomes, port_waits = self._outcomes(pod, selecting)
        bonus = rules.preference_bonus(self.index, self.facts, pod) if self.checks_predicates else None
        index, facts = self.index, self.facts

        def starts_now(row: int) -> bool:
            return row not in port_waits and rules.extended_now(index, facts, pod, row)

        return Verdict(outcomes, bonus, starts_now, len(facts.table))

    def refusals(self, task: Task) -> list[NodeRefusal]:
        """Each rule's refused nodes, counted on its own over all nodes: for explanations."""
        pod = PodView(task.spec, task.job.spec.namespace)
        outcomes, _ = self._outcomes(pod, self._selecting(pod, task.uid))
        counted: dict[tuple[NodeFilterCause, str], int] = {}
        """(cause, words) → the most nodes one rule saying them refuses, in the rules' order."""
        for outcome in outcomes:
            refused = int(np.count_nonzero(~outcome.admits))
            if refused:
                key = (outcome.cause, outcome.message)
                counted[key] = max(counted.get(key, 0), refused)
        return [NodeRefusal(cause, nodes, words) for (cause, words), nodes in counted.items()]

    def self_affine_domains(self, tasks: list[Task], node_mask: np.ndarray | None) -> list[np.ndarray]:
        """For a gang whose pods require each other's company (a required affinity term that
        selects the gang's own pods, with no selected pod placed yet): each domain of the term's
        key that could hold the whole gang, as a row mask, most packed first, ties by name.

        Kubernetes lets the first such pod go anywhere and the rest must follow it, so a gang
        placed pod by pod fails whenever the first pod's domain is too small; trying each domain
        in turn finds the one that holds it all (beyond KAI, whose issue #165 describes this)."""
        if not self.checks_predicates or not tasks:
            return []
        first = tasks[0]
        affinity = first.spec.pod_affinity
        if affinity is None:
            return []
        pods = [PodView(task.spec, task.job.spec.namespace) for task in tasks]
        term = next((t for t in affinity.required if all(rules.term_selects(t, pod) for pod in pods)), None)
        if term is None:
            return []
        codes, counts = rules.per_domain(self.index, self.facts, term)
        if counts.sum() > 0:
            return []
        request = np.sum([task.request for task in tasks], axis=0)
        nodes = self.session.nodes
        free = nodes.idle + nodes.releasing
        usable = codes >= 0 if node_mask is None else (codes >= 0) & node_mask
        _, values = self.facts.domains(term.topology_key)
        candidates = []
        for code, value in enumerate(values):
            rows = usable & (codes == code)
            room = free[rows].sum(axis=0)
            if np.all(room + EPSILON >= request):
                candidates.append((float(room.sum()), value, rows))
        candidates.sort(key=lambda candidate: (candidate[0], candidate[1]))
        return [rows for _, _, rows in candidates]

    def _selecting(self, pod: PodView, uid: int) -> list[PodAffinityTerm]:
        """Required anti-affinity terms of pods on nodes that select this pod."""
        if not self.checks_predicates:
            return []
        found = []
        for term in self.index.anti_owners(pod.spec.labels):
            key = (term, uid, pod.namespace)
            selected = self._selects.get(key)
            if selected is None:
                selected = self._selects[key] = rules.term_selects(term, pod)
            if selected:
                found.append(term)
        return found

    def _outcomes(self, pod: PodView, selecting: list[PodAffinityTerm]) -> tuple[list[RuleOutcome], set[int]]:
        """The rules that concern the pod, and the rows where only a going pod holds its ports."""
        index, facts = self.index, self.facts
        outcomes: list[RuleOutcome] = []
        port_waits: set[int] = set()
        if self.checks_predicates:
            if pod.spec.pod_affinity is not None:
                required = rules.required_affinity(index, facts, pod)
                if required is not None:
                    outcomes.append(required)
                outcomes.extend(rules.required_anti_affinity(index, facts, pod))
            outcomes.extend(rules.existing_anti_affinity(index, facts, pod, selecting))
            outcomes.extend(rules.spread(index, facts, pod))
            port_outcomes, port_waits = rules.host_ports(index, facts, pod)
            outcomes.extend(port_outcomes)
        if pod.spec.extended:
            outcomes.extend(rules.extended_resources(index, facts, pod))
        return outcomes, port_waits
