"""The placement rules that read other pods or resources outside the node vector.

Kubernetes' InterPodAffinity, PodTopologySpread, NodePorts and the extended-resource part of
NodeResourcesFit, each read off the `PodIndex`'s counts per row or per topology domain, so a
pod's check costs a few reads whatever the number of pods. Each rule answers row by row (what
walking the node finder's ranking asks) or as a mask over every row (what a scan and an
explanation ask), with its typed cause and, for an explanation, its words; preferred terms give
a bonus per row.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from kai_ray.engine.constraints.index import CountMode, Member, PodIndex
from kai_ray.engine.plugins.predicates import explained_rows, static_signature
from kai_ray.engine.reasons import NodeFilterCause
from kai_ray.identity_cache import IdentityCache
from kai_ray.model.affinity import term_matches
from kai_ray.model.labels import selects
from kai_ray.model.objects import PodAffinityTerm, PreferredNodeTerm, SpreadConstraint, TaskSpec
from kai_ray.model.resources import EPSILON
from kai_ray.model.snapshot import NodeTable

PREFERENCE_SCORE = 100.0
"""What a fully preferred node gains for each kind of preference (preferred node affinity,
preferred pod (anti-)affinity, ScheduleAnyway spread), each scaled to [0, this] as kube-scheduler
normalises its scores to [0, 100]: above what bin packing tells apart (under 20), below a node
where the pod starts now rather than waits (`kernels.IDLE_FIT_SCORE`)."""


class RuleOutcome:
    """What one rule says of the nodes: row by row (`admits_row`, what walking the node finder's
    ranking asks, a few scalar reads), or as a mask over every row (`admits`, made on first ask:
    at thousands of nodes a mask per rule per pod cost more than the rest of the placement), and
    its words for the rows it refuses, made only when an explanation asks."""

    def __init__(
        self,
        cause: NodeFilterCause,
        mask: Callable[[], np.ndarray],
        row_ok: Callable[[int], bool],
        words: Callable[[np.ndarray], str],
    ) -> None:
        self.cause = cause
        self._mask = mask
        self.admits_row = row_ok
        self._words = words

    @functools.cached_property
    def admits(self) -> np.ndarray:
        return self._mask()

    @property
    def message(self) -> str:
        return self._words(~self.admits)


@dataclass(frozen=True)
class PodView:
    """The pod being placed, as the rules read it."""

    spec: TaskSpec
    namespace: str


class NodeFacts:
    """What the rules read of a node table alone, kept as long as the table lives."""

    def __init__(self, table: NodeTable) -> None:
        self.table = table
        self._domains: dict[str, tuple[np.ndarray, list[str]]] = {}
        self._extended: dict[str, np.ndarray] = {}
        self._spread: dict[object, tuple[np.ndarray, np.ndarray, bool]] = {}
        self._preferred: dict[tuple[PreferredNodeTerm, ...], np.ndarray] = {}

    def domains(self, key: str) -> tuple[np.ndarray, list[str]]:
        """Per row the code of its value of the node label `key` (-1: no such label), and the
        values by code (codes follow the values' sorted order, so ties break by name)."""
        found = self._domains.get(key)
        if found is None:
            labels = [spec.labels.get(key) for spec in self.table.specs]
            values = sorted({value for value in labels if value is not None})
            code = {value: i for i, value in enumerate(values)}
            codes = np.array([-1 if v is None else code[v] for v in labels], dtype=np.int64)
            found = self._domains[key] = (codes, values)
        return found

    def extended(self, name: str) -> np.ndarray:
        """Per row, the node's allocatable of an extended resource (0 where it has none)."""
        column = self._extended.get(name)
        if column is None:
            column = np.array([spec.extended.get(name, 0.0) for spec in self.table.specs])
            self._extended[name] = column
        return column

    def spread_domains(
        self, spec: TaskSpec, constraint: SpreadConstraint, keys: tuple[str, ...]
    ) -> tuple[np.ndarray, np.ndarray, bool]:
        """The rows whose pods count for a spread constraint of this pod (they carry every key,
        and pass its node affinity and taints where the policies say Honor), the domain codes they
        make up, and whether those rows are all that carry the constraint's key (then the index's
        running counts per domain serve): read of the table and the pod's static constraints
        alone, so kept."""
        signature = (
            constraint.topology_key,
            keys,
            constraint.honor_node_affinity,
            constraint.honor_node_taints,
            static_signature(spec),
        )
        found = self._spread.get(signature)
        if found is None:
            codes = self.domains(constraint.topology_key)[0]
            eligible = np.ones(len(self.table), dtype=bool)
            for key in keys:
                eligible &= self.domains(key)[0] >= 0
            static = {cause: rows for cause, rows, _ in explained_rows(self.table, spec)}
            if constraint.honor_node_affinity:
                eligible &= static[NodeFilterCause.NODE_AFFINITY]
            if constraint.honor_node_taints:
                eligible &= static[NodeFilterCause.TAINTS]
            every_keyed_row = bool(np.array_equal(eligible, codes >= 0))
            present = np.unique(codes[eligible & (codes >= 0)])
            found = self._spread[signature] = (eligible, present, every_keyed_row)
        return found

    def preferred_node_scores(self, spec: TaskSpec) -> np.ndarray:
        """Per row, the summed weights of the pod's preferred node terms that match it: pods alike
        in their preferences share one pass over the nodes."""
        terms = spec.preferred_node_affinity
        total = self._preferred.get(terms)
        if total is None:
            total = np.zeros(len(self.table))
            for preferred in terms:
                matched = [term_matches(preferred.term, node) for node in self.table.specs]
                total += preferred.weight * np.array(matched, dtype=float)
            total.flags.writeable = False
            self._preferred[terms] = total
        return total


node_facts: IdentityCache[NodeTable, NodeFacts] = IdentityCache(NodeFacts)


def term_selects(term: PodAffinityTerm, pod: PodView) -> bool:
    """Whether a term (namespaces resolved for its owner) selects that pod."""
    if term.namespaces is not None and pod.namespace not in term.namespaces:
        return False
    return selects(term.selector, pod.spec.labels)


def per_domain(index: PodIndex, facts: NodeFacts, term: PodAffinityTerm) -> tuple[np.ndarray, np.ndarray]:
    """(codes per row, pods the term selects per domain) for an affinity term."""
    codes, values = facts.domains(term.topology_key)
    return codes, index.per_domain((term.selector, term.namespaces, CountMode.AFFINITY), codes, len(values))


def _by_domain(
    codes: np.ndarray, per_row: np.ndarray, domains: int, rows: np.ndarray | None = None
) -> np.ndarray:
    keep = codes >= 0 if rows is None else (codes >= 0) & rows
    return np.bincount(codes[keep], weights=per_row[keep], minlength=domains)


def _at(codes: np.ndarray, per_domain: np.ndarray) -> np.ndarray:
    """Per row, its domain's value (0 for a row without the label)."""
    if per_domain.size == 0:
        return np.zeros(len(codes))
    return np.where(codes >= 0, per_domain[np.maximum(codes, 0)], 0)


def required_affinity(index: PodIndex, facts: NodeFacts, pod: PodView) -> RuleOutcome | None:
    """Every required affinity term has a selected pod in the node's domain; the first pod of a
    group that selects itself may go anywhere the keys exist (Kubernetes' exception)."""
    assert pod.spec.pod_affinity is not None
    terms = pod.spec.pod_affinity.required
    if not terms:
        return None
    domains = [per_domain(index, facts, term) for term in terms]
    first_pod = sum(float(counts.sum()) for _, counts in domains) == 0 and all(
        term_selects(term, pod) for term in terms
    )

    def mask() -> np.ndarray:
        admits = np.ones(len(facts.table), dtype=bool)
        for codes, counts in domains:
            admits &= codes >= 0 if first_pod else (codes >= 0) & (_at(codes, counts) > 0)
        return admits

    def row_ok(row: int) -> bool:
        for codes, counts in domains:
            code = codes[row]
            if code < 0 or not (first_pod or counts[code] > 0):
                return False
        return True

    keys = ", ".join(sorted({term.topology_key for term in terms}))
    return RuleOutcome(
        NodeFilterCause.POD_AFFINITY, mask, row_ok, lambda _: f"no pod the pod's affinity needs on {keys}"
    )


def _domain_rule(
    cause: NodeFilterCause,
    codes: np.ndarray,
    counts: np.ndarray,
    words: Callable[[np.ndarray], str],
) -> RuleOutcome:
    """A rule that refuses every node whose domain holds some of what `counts` counts."""

    def mask() -> np.ndarray:
        blocked: np.ndarray = (codes >= 0) & (_at(codes, counts) > 0)
        return ~blocked

    def row_ok(row: int) -> bool:
        code = codes[row]
        return bool(code < 0 or counts[code] == 0)

    return RuleOutcome(cause, mask, row_ok, words)


def required_anti_affinity(index: PodIndex, facts: NodeFacts, pod: PodView) -> list[RuleOutcome]:
    """No pod a required anti-affinity term selects in the node's domain (a node without the
    term's label passes it)."""
    assert pod.spec.pod_affinity is not None
    outcomes = []
    for term in pod.spec.pod_affinity.required_anti:
        codes, counts = per_domain(index, facts, term)
        words = _anti_words(index, term)
        outcomes.append(_domain_rule(NodeFilterCause.POD_ANTI_AFFINITY, codes, counts, words))
    return outcomes


def existing_anti_affinity(
    index: PodIndex, facts: NodeFacts, pod: PodView, selecting: list[PodAffinityTerm]
) -> list[RuleOutcome]:
    """Symmetry: no pod whose required anti-affinity selects this one in the node's domain."""
    outcomes = []
    for term in selecting:
        codes, values = facts.domains(term.topology_key)
        owners = index.owners_per_domain(term, codes, len(values))
        words = _owner_words(index, term)
        outcomes.append(_domain_rule(NodeFilterCause.EXISTING_ANTI_AFFINITY, codes, owners, words))
    return outcomes


def spread(index: PodIndex, facts: NodeFacts, pod: PodView) -> list[RuleOutcome]:
    """`DoNotSchedule` constraints: placing the pod keeps each constraint's skew within maxSkew."""
    hard = [c for c in pod.spec.spread if c.hard]
    if not hard:
        return []
    keys = _spread_keys(hard)
    return [_spread_rule(index, facts, pod, constraint, keys) for constraint in hard]


def _spread_rule(
    index: PodIndex, facts: NodeFacts, pod: PodView, constraint: SpreadConstraint, keys: tuple[str, ...]
) -> RuleOutcome:
    codes, domain_counts, present = _spread_counts(index, facts, pod, constraint, keys)
    low = float(domain_counts[present].min()) if present.size else 0.0
    if constraint.min_domains is not None and present.size < constraint.min_domains:
        low = 0.0
    own = 1.0 if selects(constraint.selector, pod.spec.labels) else 0.0
    allowed = constraint.max_skew + EPSILON + low - own
    """A node passes when its domain's count is at most this."""

    def mask() -> np.ndarray:
        admits: np.ndarray = (codes >= 0) & (_at(codes, domain_counts) <= allowed)
        return admits

    def row_ok(row: int) -> bool:
        code = codes[row]
        return bool(code >= 0 and domain_counts[code] <= allowed)

    words = f"topology spread on {constraint.topology_key} (maxSkew {constraint.max_skew})"
    return RuleOutcome(NodeFilterCause.SPREAD, mask, row_ok, lambda _: words)


def _spread_keys(constraints: list[SpreadConstraint]) -> tuple[str, ...]:
    """The keys a node must carry for its pods to count (kube-scheduler: every constraint's)."""
    return tuple(sorted({constraint.topology_key for constraint in constraints}))


def _spread_counts(
    index: PodIndex, facts: NodeFacts, pod: PodView, constraint: SpreadConstraint, keys: tuple[str, ...]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(codes per row, selected pods per domain, the domains eligible nodes make up)."""
    codes, values = facts.domains(constraint.topology_key)
    eligible, present, every_keyed_row = facts.spread_domains(pod.spec, constraint, keys)
    key = (constraint.selector, frozenset({pod.namespace}), CountMode.SPREAD)
    if every_keyed_row:
        return codes, index.per_domain(key, codes, len(values)), present
    return codes, _by_domain(codes, index.selected(key), len(values), eligible), present


def host_ports(index: PodIndex, facts: NodeFacts, pod: PodView) -> tuple[list[RuleOutcome], set[int]]:
    """Rows where a lasting pod binds one of the pod's host ports are refused; rows where only a
    going pod does are returned too: the pod may wait there, not start."""
    outcomes = []
    waits: set[int] = set()
    for port in pod.spec.host_ports:
        lasting, going = index.port_conflicts(port.protocol, port.port, port.host_ip)
        waits.update(going)
        outcomes.append(
            _port_rule(len(facts.table), set(lasting), f"host port {port.port}/{port.protocol} in use")
        )
    return outcomes, waits


def _port_rule(rows: int, taken: set[int], words: str) -> RuleOutcome:
    def mask() -> np.ndarray:
        admits = np.ones(rows, dtype=bool)
        admits[sorted(taken)] = False
        return admits

    def row_ok(row: int) -> bool:
        return row not in taken

    return RuleOutcome(NodeFilterCause.HOST_PORTS, mask, row_ok, _said(words))


def extended_resources(index: PodIndex, facts: NodeFacts, pod: PodView) -> list[RuleOutcome]:
    """Each extended request fits what will be free once terminating and evicted pods go."""
    return [_extended_rule(index, name, amount, facts.extended(name)) for name, amount in pod.spec.extended]


def _extended_rule(index: PodIndex, name: str, amount: float, allocatable: np.ndarray) -> RuleOutcome:
    def mask() -> np.ndarray:
        admits: np.ndarray = index.extended_free(name, allocatable)[1] + EPSILON >= amount
        return admits

    def row_ok(row: int) -> bool:
        return index.extended_free_at(name, allocatable, row)[1] + EPSILON >= amount

    return RuleOutcome(NodeFilterCause.INSUFFICIENT_RESOURCES, mask, row_ok, _said(f"insufficient {name}"))


def extended_now(index: PodIndex, facts: NodeFacts, pod: PodView, row: int) -> bool:
    """Whether every extended request fits what is free on the row now (not only once going pods go)."""
    for name, amount in pod.spec.extended:
        if index.extended_free_at(name, facts.extended(name), row)[0] + EPSILON < amount:
            return False
    return True


def preference_bonus(index: PodIndex, facts: NodeFacts, pod: PodView) -> np.ndarray | None:
    """Preferred node affinity, preferred pod (anti-)affinity and ScheduleAnyway spread, each
    scaled to [0, PREFERENCE_SCORE] over the nodes; None when the pod prefers nothing."""
    parts = [
        facts.preferred_node_scores(pod.spec) if pod.spec.preferred_node_affinity else None,
        _preferred_pod_scores(index, facts, pod),
        _soft_spread_scores(index, facts, pod),
    ]
    scaled = [_scaled(part) for part in parts if part is not None]
    if not scaled:
        return None
    total: np.ndarray = np.sum(scaled, axis=0)
    return total


def _preferred_pod_scores(index: PodIndex, facts: NodeFacts, pod: PodView) -> np.ndarray | None:
    affinity = pod.spec.pod_affinity
    if affinity is None or not (affinity.preferred or affinity.preferred_anti):
        return None
    total = np.zeros(len(facts.table))
    for sign, terms in ((1.0, affinity.preferred), (-1.0, affinity.preferred_anti)):
        for term in terms:
            codes, counts = per_domain(index, facts, term)
            total += sign * term.weight * _at(codes, counts)
    return total


def _soft_spread_scores(index: PodIndex, facts: NodeFacts, pod: PodView) -> np.ndarray | None:
    """Fewer selected pods in the node's domain is better: the negated count, nodes without a
    constraint's key scoring as the fullest domain."""
    soft = [c for c in pod.spec.spread if not c.hard]
    if not soft:
        return None
    keys = _spread_keys(soft)
    total = np.zeros(len(facts.table))
    for constraint in soft:
        codes, domain_counts, _ = _spread_counts(index, facts, pod, constraint, keys)
        at = _at(codes, domain_counts)
        worst = float(domain_counts.max()) + 1.0 if domain_counts.size else 1.0
        total -= np.where(codes >= 0, at, worst)
    return total


def _scaled(scores: np.ndarray) -> np.ndarray:
    low, high = float(scores.min()), float(scores.max())
    if high - low <= EPSILON:
        return np.zeros_like(scores)
    scaled: np.ndarray = (scores - low) / (high - low) * PREFERENCE_SCORE
    return scaled


def _said(words: str) -> Callable[[np.ndarray], str]:
    return lambda _: words


def _anti_words(index: PodIndex, term: PodAffinityTerm) -> Callable[[np.ndarray], str]:
    """Names the first pod by name on a refused node that the term selects."""

    def words(blocked: np.ndarray) -> str:
        named = _first_named(index, blocked, lambda m: term_selects(term, PodView(m.spec, m.namespace)))
        return f"pod anti-affinity with {named} on {term.topology_key}"

    return words


def _owner_words(index: PodIndex, term: PodAffinityTerm) -> Callable[[np.ndarray], str]:
    """Names the first pod by name on a refused node whose anti-affinity is the term."""

    def owns(member: Member) -> bool:
        affinity = member.spec.pod_affinity
        return affinity is not None and term in affinity.required_anti

    def words(blocked: np.ndarray) -> str:
        return (
            f"anti-affinity of {_first_named(index, blocked, owns)} on {term.topology_key} keeps the pod away"
        )

    return words


def _first_named(index: PodIndex, blocked: np.ndarray, wanted: Callable[[Member], bool]) -> str:
    if not blocked.any():
        return "no pod"
    for member in index.members_on(np.flatnonzero(blocked)):
        if wanted(member):
            name = member.spec.name
            return f"{member.namespace}/{name}" if member.namespace else name
    return "a pod"
