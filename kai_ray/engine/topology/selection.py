"""Which domains a constrained (sub)group may be placed in, in the order to try them (spec §18.3-18.4).

KAI's SubsetNodes for topology: from the node set the parent left, find the
lowest common domain, work out every domain's free resources (idle +
releasing) inside it, sort each domain's children most packed first, and
offer as candidates the domains at the relevant levels that could hold the
tasks, bottom level first. The allocator tries them in that order and keeps
the first where the whole gang fits. A preferred level also yields node
scores that concentrate pods inside the chosen domain.

Everything here reads arrays over node rows; the tree only groups rows.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from kai_ray.engine.topology.tree import ROOT_LEVEL, Domain, DomainTree
from kai_ray.model.objects import TopologyConstraintSpec
from kai_ray.model.resources import CPU, EPSILON, GPU, MEMORY, NUM_RESOURCES, PODS

MISSING_RESOURCE_RATIO = 1000.0
"""KAI's ratio for a resource the tasks need and the domain has none of."""
DOMAIN_SCORE = 100_000.0
"""KAI's topology score unit: above every lower-priority node plugin's scores (§16.2)."""

_RESOURCE_WORDS = {CPU: ("CPU cores", 1000.0), MEMORY: ("GB of memory", 1e9), GPU: ("GPUs", 1.0)}


@dataclass(frozen=True)
class GroupDemand:
    """What a (sub)group's tasks of this attempt ask for, one topology request row per task."""

    requests: np.ndarray
    needs_gpu: tuple[bool, ...]
    active_rows: np.ndarray
    """Rows of nodes holding the group's already placed pods (step 6)."""

    @property
    def count(self) -> int:
        return len(self.needs_gpu)

    @property
    def homogeneous(self) -> bool:
        """All tasks or none need GPUs: then domains count whole pods (AllocatablePods)."""
        return all(self.needs_gpu) or not any(self.needs_gpu)


@dataclass(frozen=True)
class DomainShortfall:
    """The domain that came closest to holding the tasks, and what it lacked.

    `resource` None: the resources add up, but the nodes have room for too few whole pods.
    """

    domain: str
    level: str
    available: float
    needed: float
    resource: str | None

    def __str__(self) -> str:
        where = "its nodes together have" if self.level == ROOT_LEVEL else f"{self.level} {self.domain} has"
        if self.resource is None:
            return f"{where} room for {self.available:g} of {self.needed:g} pods"
        return f"{where} {self.available:g} of {self.needed:g} {self.resource}"


@dataclass(frozen=True)
class NoDomain:
    """No domain at the relevant levels can hold the tasks; `closest` None: none was even considered."""

    level: str
    closest: DomainShortfall | None


@dataclass(frozen=True)
class DomainChoice:
    candidates: list[np.ndarray]
    """Boolean node-row masks, in the order to try them."""
    scores: np.ndarray | None
    """Per node row: the preferred-level bonus (§18.4), or None without a preferred level."""


class _Figures:
    """Free vectors, allocatable pod counts and ratios of the domains under the starting domain.

    Domains outside it keep KAI's reset values (nothing free, pod count not set), so they never
    fit a task that asks for any resource.
    """

    def __init__(
        self,
        start: Domain,
        demand: GroupDemand,
        free: np.ndarray,
        shared_free: Callable[[np.ndarray], np.ndarray],
    ) -> None:
        self.demand = demand
        self.need: np.ndarray = demand.requests.sum(axis=0)
        self.inside = start.walk()
        self.free: dict[Domain, np.ndarray] = {d: free[d.rows].sum(axis=0) for d in self.inside}
        self.allocatable: dict[Domain, int] | None = None
        if demand.homogeneous:
            per_row = np.zeros(len(free), dtype=np.int64)
            per_row[start.rows] = _accommodation(demand, start.rows, free, shared_free)
            self.allocatable = {d: int(per_row[d.rows].sum()) for d in self.inside}

    def free_of(self, domain: Domain) -> np.ndarray:
        return self.free.get(domain, np.zeros(NUM_RESOURCES))

    def _ratios(self, domain: Domain) -> list[tuple[float, int]]:
        """(need / free, resource) for every resource the tasks ask for, pod slots aside."""
        free = self.free_of(domain)
        return [
            (float(self.need[d] / free[d]) if free[d] > 0 else MISSING_RESOURCE_RATIO, d)
            for d in (CPU, MEMORY, GPU)
            if self.need[d] > 0
        ]

    def ratio(self, domain: Domain) -> float:
        """The largest need / free: above 1 the domain cannot hold the tasks; higher = more packed."""
        return max((ratio for ratio, _ in self._ratios(domain)), default=0.0)

    def fits(self, domain: Domain) -> bool:
        if self.allocatable is not None and domain in self.allocatable:
            return self.allocatable[domain] >= self.demand.count
        return self.ratio(domain) <= 1.0 + EPSILON

    def shortfall(self, domain: Domain) -> DomainShortfall:
        ratio, resource = max(self._ratios(domain), default=(0.0, PODS))
        if ratio > 1.0 + EPSILON:
            words, unit = _RESOURCE_WORDS[resource]
            available = float(self.free_of(domain)[resource]) / unit
            return DomainShortfall(
                domain.id, domain.level, available, float(self.need[resource]) / unit, words
            )
        room = self.allocatable.get(domain, 0) if self.allocatable is not None else 0
        return DomainShortfall(domain.id, domain.level, room, self.demand.count, None)

    def closeness(self, domain: Domain) -> tuple[float, str]:
        """Sort key, closest first: most pods it has room for, else lowest ratio; ties by id."""
        if self.allocatable is not None:
            return (-float(self.allocatable.get(domain, 0)), domain.id)
        return (self.ratio(domain), domain.id)


def _accommodation(
    demand: GroupDemand, rows: np.ndarray, free: np.ndarray, shared_free: Callable[[np.ndarray], np.ndarray]
) -> np.ndarray:
    """Per row: how many copies of the largest task fit in its free resources (KAI's representor pod)."""
    largest = demand.requests.max(axis=0)
    asked = largest > 0
    if not np.any(np.delete(asked, PODS)) and largest[PODS] <= 1:
        return np.full(len(rows), demand.count, dtype=np.int64)
    available = free[rows].copy()
    if 0 < largest[GPU] < 1:
        available[:, GPU] += shared_free(rows)
    fits = np.all(largest <= available + EPSILON, axis=1)
    copies = np.floor(available[:, asked] / largest[asked] + EPSILON).min(axis=1)
    result: np.ndarray = np.where(fits, copies, 0).astype(np.int64)
    return result


def choose_domains(
    tree: DomainTree,
    constraint: TopologyConstraintSpec,
    demand: GroupDemand,
    inherited: np.ndarray,
    free: np.ndarray,
    shared_free: Callable[[np.ndarray], np.ndarray],
) -> DomainChoice | NoDomain:
    """Candidate domains for the tasks, given the node rows the parent left (`inherited`, a mask).

    Levels must already be known to the tree (`level_problem`).
    """
    required = tree.depth_of(constraint.required_level) if constraint.required_level else None
    preferred = tree.depth_of(constraint.preferred_level) if constraint.preferred_level else None
    valid = inherited & tree.member
    start = tree.lowest_common(np.flatnonzero(valid), preferred)
    figures = _Figures(start, demand, free, shared_free)
    if not figures.fits(start):
        return NoDomain(start.level, figures.shortfall(start))
    children = _sorted_children(figures)
    scores = None
    if preferred is not None:
        scores = _preferred_scores(start, preferred, children, len(free))
    relevant = _relevant_depths(len(tree.topology.levels), required, preferred)
    eligible = _eligible(tree, demand, required)
    order = _ordered(tree.root, children)
    candidates: list[np.ndarray] = []
    for depth in relevant:
        for domain in order:
            if domain.depth == depth and eligible(domain) and figures.fits(domain):
                mask = np.zeros(len(free), dtype=bool)
                mask[domain.rows] = True
                candidates.append(mask & valid)
    if not candidates:
        top = relevant[-1]
        considered = [d for d in figures.inside if d.depth == top and eligible(d)]
        closest = min(considered, key=figures.closeness) if considered else None
        return NoDomain(tree.level_name(top), None if closest is None else figures.shortfall(closest))
    return DomainChoice(candidates, scores)


def _relevant_depths(deepest: int, required: int | None, preferred: int | None) -> list[int]:
    """From the preferred level (else the required one) upward, up to the required level or the root."""
    relevant: list[int] = []
    started = False
    for depth in range(deepest, -1, -1):
        started = started or depth in (required, preferred)
        if started:
            relevant.append(depth)
        if depth == required:
            break
    return relevant


def level_problem(tree: DomainTree, constraint: TopologyConstraintSpec) -> str | None:
    """Why the constraint's levels cannot be used with this topology, or None."""
    if not constraint.required_level and not constraint.preferred_level:
        return "names neither a required nor a preferred level"
    for kind, level in (("required", constraint.required_level), ("preferred", constraint.preferred_level)):
        if level and tree.depth_of(level) is None:
            return f"{kind} level {level} is not a level of topology {tree.name}"
    return None


def _sorted_children(figures: _Figures) -> dict[Domain, list[Domain]]:
    """Children of every domain under the start, most packed first (ratio descending), ties by id."""
    ratios = {d: figures.ratio(d) for d in figures.inside}
    return {d: sorted(d.children, key=lambda c: (-ratios[c], c.id)) for d in figures.inside if d.children}


def _ordered(root: Domain, children: dict[Domain, list[Domain]]) -> list[Domain]:
    """Every domain, parents before children, children in sorted order where sorted, else by id."""
    found = [root]
    for child in children.get(root, root.children):
        found.extend(_ordered(child, children))
    return found


def _preferred_scores(
    start: Domain, preferred: int, children: dict[Domain, list[Domain]], rows: int
) -> np.ndarray:
    """The most free preferred-level domain scores highest, so pods gather in the roomiest one (§18.4)."""
    domains = [d for d in _ordered(start, children) if d.depth == preferred]
    scores = np.zeros(rows)
    for i, domain in enumerate(domains):
        scores[domain.rows] = math.floor((i + 1) / len(domains) * 10) * DOMAIN_SCORE
    return scores


def _eligible(tree: DomainTree, demand: GroupDemand, required: int | None) -> Callable[[Domain], bool]:
    """With a required level and pods already placed, only domains under those pods' required domain."""
    active = [row for row in demand.active_rows.tolist() if tree.member[row]]
    if required is None or len(demand.active_rows) == 0:
        return lambda domain: True
    allowed = {tree.domain_of(row, required).id for row in active}
    return lambda domain: (
        domain.depth >= required and tree.domain_of(int(domain.rows[0]), required).id in allowed
    )
