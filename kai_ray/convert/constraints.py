"""A pod's placement constraints as the model states them: node affinity (required and preferred),
inter-pod (anti-)affinity, topology spread constraints and host ports.

The API server validates these fields and folds `matchLabelKeys` / `mismatchLabelKeys` into the
selectors when it admits a pod; manifests given to `simulate` never met one.  So the same checks run
here, and a value the API server would refuse raises `Invalid` naming the field (the pod is reported,
not placed by rules nobody can state), and the same folding, so the engine reads one form whatever
the source.  Folding a selector the API server already folded adds nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from kai_ray.api import Pod
from kai_ray.api.core import LabelSelector as ApiLabelSelector
from kai_ray.api.core import NodeSelectorRequirement, PodSpec
from kai_ray.api.core import NodeSelectorTerm as ApiNodeSelectorTerm
from kai_ray.api.core import PodAffinity as ApiPodAffinity
from kai_ray.api.core import PodAffinityTerm as ApiPodAffinityTerm
from kai_ray.convert.common import Invalid
from kai_ray.model.labels import selects
from kai_ray.model.objects import (
    AffinityRequirement,
    HostPort,
    LabelRequirement,
    LabelSelector,
    NodeSelectorTerm,
    NodeSelectorTerms,
    PodAffinitySpec,
    PodAffinityTerm,
    PreferredNodeTerm,
    SpreadConstraint,
)

NamespaceLabels = Mapping[str, dict[str, str]]
"""Namespace name → its labels: what a `namespaceSelector` is matched against."""

_NODE_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
_LABEL_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")
_PROTOCOLS = ("TCP", "UDP", "SCTP")
_WHEN_UNSATISFIABLE = ("DoNotSchedule", "ScheduleAnyway")
_POLICIES = ("Honor", "Ignore")
_MAX_PORT = 65535
_MAX_WEIGHT = 100
_ALL_ADDRESSES = ("", "0.0.0.0")
_REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
_PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"
_NODE_AFFINITY = "spec.affinity.nodeAffinity"


def node_affinity(spec: PodSpec) -> NodeSelectorTerms:
    """Required node affinity: every term (ORed), each with its expressions and fields (ANDed)."""
    affinity = spec.affinity.node_affinity if spec.affinity else None
    required = affinity.required_during_scheduling_ignored_during_execution if affinity else None
    terms = required.node_selector_terms if required else []
    path = f"{_NODE_AFFINITY}.{_REQUIRED}.nodeSelectorTerms"
    return tuple(_node_term(term, f"{path}[{i}]") for i, term in enumerate(terms))


def preferred_node_affinity(spec: PodSpec) -> tuple[PreferredNodeTerm, ...]:
    affinity = spec.affinity.node_affinity if spec.affinity else None
    preferred = affinity.preferred_during_scheduling_ignored_during_execution if affinity else []
    terms = []
    for i, entry in enumerate(preferred):
        path = f"{_NODE_AFFINITY}.{_PREFERRED}[{i}]"
        weight = _weight(entry.weight, f"{path}.weight")
        terms.append(PreferredNodeTerm(weight, _node_term(entry.preference, f"{path}.preference")))
    return tuple(terms)


def _node_term(term: ApiNodeSelectorTerm, path: str) -> NodeSelectorTerm:
    for j, expression in enumerate(term.match_expressions):
        path_j = f"{path}.matchExpressions[{j}]"
        _check_requirement(expression.operator, expression.values, path_j, _NODE_OPERATORS)
    for j, expression in enumerate(term.match_fields):
        _check_field(expression, f"{path}.matchFields[{j}]")
    return node_selector_term(term)


def node_selector_term(term: ApiNodeSelectorTerm) -> NodeSelectorTerm:
    """An API node selector term as the model states it, unchecked: a pod's is checked first
    (`_node_term`), a volume's the API server validated."""
    return NodeSelectorTerm(
        expressions=_requirements(term.match_expressions), fields=_requirements(term.match_fields)
    )


def _requirements(requirements: Sequence[NodeSelectorRequirement]) -> tuple[AffinityRequirement, ...]:
    return tuple(AffinityRequirement(r.key, r.operator, tuple(r.values)) for r in requirements)


def _check_field(requirement: NodeSelectorRequirement, path: str) -> None:
    """Kubernetes allows `matchFields` on `metadata.name` only, with In or NotIn and one value."""
    if requirement.key != "metadata.name":
        raise Invalid(f"{path}.key", f"only metadata.name is supported, got {requirement.key!r}")
    _check_requirement(requirement.operator, requirement.values, path, ("In", "NotIn"))
    if len(requirement.values) != 1:
        raise Invalid(f"{path}.values", f"a field selector takes one value, got {len(requirement.values)}")


def _check_requirement(operator: str, values: Sequence[str], path: str, operators: Sequence[str]) -> None:
    """The API server's rule for a selector requirement: In and NotIn need values, Exists and
    DoesNotExist take none, Gt and Lt exactly one."""
    _check_known(operator, operators, f"{path}.operator")
    if operator in ("In", "NotIn") and not values:
        raise Invalid(f"{path}.values", f"required with operator {operator}")
    if operator in ("Exists", "DoesNotExist") and values:
        raise Invalid(f"{path}.values", f"must be empty with operator {operator}")
    if operator in ("Gt", "Lt") and len(values) != 1:
        raise Invalid(f"{path}.values", f"takes exactly one value with operator {operator}")


def _check_known(value: str, known: Sequence[str], path: str) -> None:
    if value not in known:
        raise Invalid(path, f"unknown value {value!r} (known: {', '.join(known)})")


def _weight(weight: int, path: str) -> int:
    if not 1 <= weight <= _MAX_WEIGHT:
        raise Invalid(path, f"must be between 1 and {_MAX_WEIGHT}, got {weight}")
    return weight


def label_selector(selector: ApiLabelSelector | None, path: str) -> LabelSelector | None:
    if selector is None:
        return None
    expressions = []
    for i, expression in enumerate(selector.match_expressions):
        _check_requirement(
            expression.operator, expression.values, f"{path}.matchExpressions[{i}]", _LABEL_OPERATORS
        )
        expressions.append(LabelRequirement(expression.key, expression.operator, tuple(expression.values)))
    return LabelSelector(tuple(sorted(selector.match_labels.items())), tuple(expressions))


def _fold(
    selector: LabelSelector | None,
    labels: dict[str, str],
    match_keys: Sequence[str],
    mismatch_keys: Sequence[str],
    path: str,
) -> LabelSelector | None:
    """`key In (value)` for each `matchLabelKeys` key the pod carries, `key NotIn (value)` for each
    `mismatchLabelKeys` one: the API server's folding, which lets a term say "pods of my own
    revision" (or "of other tenants") without knowing the value in advance."""
    if not match_keys and not mismatch_keys:
        return selector
    if selector is None:
        field = "matchLabelKeys" if match_keys else "mismatchLabelKeys"
        raise Invalid(f"{path}.{field}", "must not be set without a labelSelector")
    for key in mismatch_keys:
        if key in match_keys:
            raise Invalid(f"{path}.mismatchLabelKeys", f"{key!r} is also in matchLabelKeys")
    added = [LabelRequirement(key, "In", (labels[key],)) for key in match_keys if key in labels]
    added += [LabelRequirement(key, "NotIn", (labels[key],)) for key in mismatch_keys if key in labels]
    new = tuple(requirement for requirement in added if requirement not in selector.expressions)
    return replace(selector, expressions=selector.expressions + new) if new else selector


def pod_affinity(pod: Pod, namespaces: NamespaceLabels) -> PodAffinitySpec | None:
    """`podAffinity` and `podAntiAffinity`, namespaces resolved against `namespaces`; None when
    the pod states no term at all (the engine's fast path)."""
    affinity = pod.spec.affinity
    if affinity is None:
        return None
    terms = _TermReader(pod, namespaces)
    required, preferred = terms.read(affinity.pod_affinity, "spec.affinity.podAffinity")
    required_anti, preferred_anti = terms.read(affinity.pod_anti_affinity, "spec.affinity.podAntiAffinity")
    if not (required or preferred or required_anti or preferred_anti):
        return None
    return PodAffinitySpec(
        required=required, required_anti=required_anti, preferred=preferred, preferred_anti=preferred_anti
    )


def reads_namespaces(spec: PodSpec) -> bool:
    """Whether the pod's conversion reads namespace labels (a term with a non-empty
    `namespaceSelector`): such a pod is converted again when they change."""
    affinity = spec.affinity
    if affinity is None:
        return False
    for kind in (affinity.pod_affinity, affinity.pod_anti_affinity):
        if kind is None:
            continue
        terms = [*kind.required_during_scheduling_ignored_during_execution]
        terms += [
            weighted.pod_affinity_term
            for weighted in kind.preferred_during_scheduling_ignored_during_execution
        ]
        for term in terms:
            selector = term.namespace_selector
            if selector is not None and (selector.match_labels or selector.match_expressions):
                return True
    return False


class _TermReader:
    """Reads the terms of one pod: its namespace and labels resolve every term's namespaces and
    fold its label keys."""

    def __init__(self, pod: Pod, namespaces: NamespaceLabels) -> None:
        self._own = pod.metadata.namespace or ""
        self._labels = pod.metadata.labels
        self._namespaces = namespaces

    def read(
        self, affinity: ApiPodAffinity | None, path: str
    ) -> tuple[tuple[PodAffinityTerm, ...], tuple[PodAffinityTerm, ...]]:
        if affinity is None:
            return (), ()
        required = tuple(
            self._term(term, f"{path}.{_REQUIRED}[{i}]")
            for i, term in enumerate(affinity.required_during_scheduling_ignored_during_execution)
        )
        preferred = []
        for i, weighted in enumerate(affinity.preferred_during_scheduling_ignored_during_execution):
            where = f"{path}.{_PREFERRED}[{i}]"
            weight = _weight(weighted.weight, f"{where}.weight")
            preferred.append(self._term(weighted.pod_affinity_term, f"{where}.podAffinityTerm", weight))
        return required, tuple(preferred)

    def _term(self, term: ApiPodAffinityTerm, path: str, weight: int = 0) -> PodAffinityTerm:
        if not term.topology_key:
            raise Invalid(f"{path}.topologyKey", "required")
        selector = _fold(
            label_selector(term.label_selector, f"{path}.labelSelector"),
            self._labels,
            term.match_label_keys,
            term.mismatch_label_keys,
            path,
        )
        return PodAffinityTerm(term.topology_key, selector, self._term_namespaces(term, path), weight)

    def _term_namespaces(self, term: ApiPodAffinityTerm, path: str) -> frozenset[str] | None:
        """`namespaces` ∪ the namespaces `namespaceSelector` selects; neither: the pod's own; an
        empty selector: every namespace (None)."""
        selector = label_selector(term.namespace_selector, f"{path}.namespaceSelector")
        if selector is None:
            return frozenset(term.namespaces or (self._own,))
        if not selector.match_labels and not selector.expressions:
            return None
        selected = (name for name, labels in self._namespaces.items() if selects(selector, labels))
        return frozenset(term.namespaces).union(selected)


def spread_constraints(pod: Pod) -> tuple[SpreadConstraint, ...]:
    constraints: list[SpreadConstraint] = []
    seen: set[tuple[str, str]] = set()
    for i, constraint in enumerate(pod.spec.topology_spread_constraints):
        path = f"spec.topologySpreadConstraints[{i}]"
        if constraint.max_skew < 1:
            raise Invalid(f"{path}.maxSkew", f"must be at least 1, got {constraint.max_skew}")
        if not constraint.topology_key:
            raise Invalid(f"{path}.topologyKey", "required")
        when = constraint.when_unsatisfiable
        _check_known(when, _WHEN_UNSATISFIABLE, f"{path}.whenUnsatisfiable")
        if (constraint.topology_key, when) in seen:
            raise Invalid(path, f"a second constraint on {constraint.topology_key!r} with {when}")
        seen.add((constraint.topology_key, when))
        hard = when == "DoNotSchedule"
        if constraint.min_domains is not None:
            if constraint.min_domains < 1:
                raise Invalid(f"{path}.minDomains", f"must be at least 1, got {constraint.min_domains}")
            if not hard:
                raise Invalid(f"{path}.minDomains", "only allowed with whenUnsatisfiable: DoNotSchedule")
        selector = _fold(
            label_selector(constraint.label_selector, f"{path}.labelSelector"),
            pod.metadata.labels,
            constraint.match_label_keys,
            (),
            path,
        )
        constraints.append(
            SpreadConstraint(
                max_skew=constraint.max_skew,
                topology_key=constraint.topology_key,
                selector=selector,
                hard=hard,
                min_domains=constraint.min_domains,
                honor_node_affinity=_policy(
                    constraint.node_affinity_policy, "Honor", f"{path}.nodeAffinityPolicy"
                ),
                honor_node_taints=_policy(
                    constraint.node_taints_policy, "Ignore", f"{path}.nodeTaintsPolicy"
                ),
            )
        )
    return tuple(constraints)


def _policy(value: str | None, default: str, path: str) -> bool:
    """Whether a spread policy (`nodeAffinityPolicy`, `nodeTaintsPolicy`) is Honor."""
    if value is None:
        return default == "Honor"
    _check_known(value, _POLICIES, path)
    return value == "Honor"


def host_ports(spec: PodSpec) -> tuple[HostPort, ...]:
    """The ports the pod binds on its node, init containers' included (kubelet binds them too);
    0.0.0.0 is written as "" (every address), so equal claims compare equal.  On the host's network
    a container port is a host port even where `hostPort` is not written (the API server's
    defaulting, which manifests never met)."""
    ports: set[HostPort] = set()
    for section, containers in (("containers", spec.containers), ("initContainers", spec.init_containers)):
        for i, container in enumerate(containers):
            for j, port in enumerate(container.ports):
                path = f"spec.{section}[{i}].ports[{j}]"
                _check_known(port.protocol, _PROTOCOLS, f"{path}.protocol")
                _check_port(port.container_port, f"{path}.containerPort")
                if port.host_port:
                    _check_port(port.host_port, f"{path}.hostPort")
                bound = port.host_port or (port.container_port if spec.host_network else 0)
                if bound:
                    address = "" if port.host_ip in _ALL_ADDRESSES else port.host_ip
                    ports.add(HostPort(bound, port.protocol, address))
    return tuple(sorted(ports, key=lambda p: (p.port, p.protocol, p.host_ip)))


def _check_port(number: int, path: str) -> None:
    if not 0 < number <= _MAX_PORT:
        raise Invalid(path, f"must be between 1 and {_MAX_PORT}, got {number}")
