"""What the pods on each node hold that other pods' placement rules read, kept current as pods move.

Inter-pod affinity, topology spread, host ports and extended resources all ask "which pods are on
that node now": asking it by a scan per placement would make a cycle pods × nodes × pods. The
index keeps, per node row, counts of the pods each selector in use selects, the owners of required
anti-affinity terms, the host ports in use and the extended resources held, and changes one row
per move (`Session.move_task`, which every placement, eviction and rollback goes through), so a
rollback restores it exactly.

Which pods count follows Kubernetes and KAI (spec devices-and-affinity.md §5.3):
- inter-pod affinity counts every pod a node holds, terminating ones too, except a pod this session
  evicted (KAI v0.17.2: it is going, so it must not block the pod that takes its place);
- topology spread counts no terminating pod (kube-scheduler skips pods with a deletion stamp);
- host ports and extended resources are held by every pod on the node; those of terminating or
  evicted pods are free once they go, so a pod may be pipelined onto them but not bound now.
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Generic, TypeVar

import numpy as np

from kai_ray.model.labels import selects
from kai_ray.model.objects import (
    ACTIVE_USED,
    RELEASING,
    LabelSelector,
    PodAffinityTerm,
    TaskSpec,
    TaskStatus,
)
from kai_ray.model.snapshot import NodeTable

_Item = TypeVar("_Item")


class Presence(enum.Enum):
    """How a pod on a node counts for the rules above."""

    LASTING = "lasting"
    TERMINATING = "terminating"
    """Releasing in the snapshot: going on its own, still there as far as affinity is concerned."""
    EVICTED = "evicted"
    """Evicted by this session: gone for affinity and spread, still holding until it goes."""


class CountMode(enum.Enum):
    """Which pods a selector's counts take in (see the module's rules)."""

    AFFINITY = "affinity"
    SPREAD = "spread"


SelectorKey = tuple[LabelSelector | None, frozenset[str] | None, CountMode]
"""What a count is of: the pods a selector selects in some namespaces (None: every namespace)."""

PortKey = tuple[str, int]
"""(protocol, port)."""


@dataclass(frozen=True, slots=True)
class Member:
    """A pod the index holds: where it is and what it says of itself."""

    uid: int
    row: int
    spec: TaskSpec
    namespace: str
    presence: Presence


def presence_of(status: TaskStatus, evicted_here: bool) -> Presence | None:
    """How a pod in that status counts on its node, None when it holds nothing there."""
    if status not in ACTIVE_USED:
        return None
    if status is RELEASING or status is TaskStatus.STUCK_IN_RELEASING:
        return Presence.EVICTED if evicted_here else Presence.TERMINATING
    return Presence.LASTING


def _counts_for(mode: CountMode, presence: Presence) -> bool:
    if mode is CountMode.AFFINITY:
        return presence is not Presence.EVICTED
    return presence is Presence.LASTING


class PodIndex:
    """Per node row: selected-pod counts, anti-affinity owners, host ports, extended resources."""

    def __init__(self, table: NodeTable, members: Iterable[Member]) -> None:
        self.table = table
        self.members: dict[int, Member] = {}
        self._by_label: dict[LabelPair, set[int]] = {}
        """(label, value) → uids of the members carrying it: a selector's first count reads only
        the members its first `matchLabels` pair names, not every pod."""
        self._selected: dict[SelectorKey, _RowCounts] = {}
        """Selector key → the pods it selects, per row and per domain."""
        self._keys = _Buckets[SelectorKey]()
        self._anti_owners: dict[PodAffinityTerm, _RowCounts] = {}
        """Required anti-affinity term of a pod on a node → the pods owning it, per row and domain."""
        self._anti_terms = _Buckets[PodAffinityTerm]()
        self._ports: dict[PortKey, dict[int, Counter[tuple[str, bool]]]] = {}
        """(protocol, port) → row → Counter of (host IP, lasting) in use there."""
        self._extended_held: dict[str, np.ndarray] = {}
        self._extended_going: dict[str, np.ndarray] = {}
        """Per resource name and row: what pods hold, and what of it terminating or evicted pods hold."""
        for member in members:
            self._add(member)

    # ------------------------------------------------------------------ changes
    def place(self, member: Member) -> None:
        self.remove(member.uid)
        self._add(member)

    def remove(self, uid: int) -> None:
        member = self.members.pop(uid, None)
        if member is not None:
            for pair in member.spec.labels.items():
                self._by_label[pair].discard(uid)
            self._book(member, -1)

    def _add(self, member: Member) -> None:
        self.members[member.uid] = member
        for pair in member.spec.labels.items():
            self._by_label.setdefault(pair, set()).add(member.uid)
        self._book(member, +1)

    def _book(self, member: Member, sign: int) -> None:
        row, spec, presence = member.row, member.spec, member.presence
        for key in self._keys.candidates(spec.labels):
            if _counts_for(key[2], presence) and _selected_by(key, member):
                self._selected[key].add(row, sign)
        affinity = spec.pod_affinity
        if affinity is not None and presence is not Presence.EVICTED:
            for term in affinity.required_anti:
                owners = self._anti_owners.get(term)
                if owners is None:
                    owners = self._anti_owners[term] = _RowCounts(len(self.table))
                    self._anti_terms.add(term, term.selector)
                owners.add(row, sign)
        lasting = presence is Presence.LASTING
        for port in spec.host_ports:
            in_use = self._ports.setdefault((port.protocol, port.port), {}).setdefault(row, Counter())
            in_use[(port.host_ip, lasting)] += sign
            if in_use[(port.host_ip, lasting)] <= 0:
                del in_use[(port.host_ip, lasting)]
        for name, amount in spec.extended:
            self._extended(self._extended_held, name)[row] += sign * amount
            if not lasting:
                self._extended(self._extended_going, name)[row] += sign * amount

    def _extended(self, table: dict[str, np.ndarray], name: str) -> np.ndarray:
        column = table.get(name)
        if column is None:
            column = table[name] = np.zeros(len(self.table))
        return column

    # ------------------------------------------------------------------ reads
    def selected(self, key: SelectorKey) -> np.ndarray:
        """Per row, how many pods the key selects: counted once on first ask, then kept current."""
        return self._counts(key).per_row

    def per_domain(self, key: SelectorKey, codes: np.ndarray, domains: int) -> np.ndarray:
        """How many pods the key selects in each domain of a node label (`codes`: each row's
        domain, -1 for none): summed once, then kept current with the rows."""
        return self._counts(key).per_domain(codes, domains)

    def _counts(self, key: SelectorKey) -> _RowCounts:
        counts = self._selected.get(key)
        if counts is None:
            counts = _RowCounts(len(self.table))
            for member in self._possibly_selected(key[0]):
                if _counts_for(key[2], member.presence) and _selected_by(key, member):
                    counts.add(member.row, 1)
            self._selected[key] = counts
            self._keys.add(key, key[0])
        return counts

    def _possibly_selected(self, selector: LabelSelector | None) -> Iterable[Member]:
        if selector is None:
            return ()
        if not selector.match_labels:
            return list(self.members.values())
        uids = self._by_label.get(selector.match_labels[0], set())
        return [self.members[uid] for uid in sorted(uids)]

    def anti_owners(self, labels: dict[str, str]) -> list[PodAffinityTerm]:
        """The required anti-affinity terms of pods on nodes that could select a pod with these
        labels (by their first `matchLabels` pair)."""
        owners = self._anti_owners
        return [term for term in self._anti_terms.candidates(labels) if owners[term].total > 0]

    def owners_per_domain(self, term: PodAffinityTerm, codes: np.ndarray, domains: int) -> np.ndarray:
        """How many pods owning the required anti-affinity term are in each domain of a node label:
        summed once, then kept current with the rows."""
        return self._anti_owners[term].per_domain(codes, domains)

    def port_conflicts(self, protocol: str, port: int, host_ip: str) -> tuple[list[int], list[int]]:
        """Rows where the port is taken by a lasting pod, and rows where only by going ones."""
        lasting: list[int] = []
        going: list[int] = []
        for row, in_use in sorted(self._ports.get((protocol, port), {}).items()):
            clashes = [held for (ip, held), n in in_use.items() if n > 0 and _clash(ip, host_ip)]
            if True in clashes:
                lasting.append(row)
            elif clashes:
                going.append(row)
        return lasting, going

    def extended_free(self, name: str, allocatable: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per row: what is free now, and what will be once terminating and evicted pods go."""
        held = self._extended_held.get(name)
        if held is None:
            return allocatable, allocatable
        going = self._extended_going.get(name)
        now = allocatable - held
        return now, now if going is None else now + going

    def extended_free_at(self, name: str, allocatable: np.ndarray, row: int) -> tuple[float, float]:
        """`extended_free` of one row, without a pass over every row."""
        free = float(allocatable[row])
        held = self._extended_held.get(name)
        if held is None:
            return free, free
        going = self._extended_going.get(name)
        now = free - float(held[row])
        return now, now if going is None else now + float(going[row])

    def members_on(self, rows: np.ndarray) -> list[Member]:
        """The pods on those rows, by name: only an explanation asks."""
        wanted = set(rows.tolist())
        return sorted((m for m in self.members.values() if m.row in wanted), key=lambda m: m.spec.name)


LabelPair = tuple[str, str]


class _Buckets(Generic[_Item]):
    """Items keyed by a selector's first `matchLabels` pair, so the items that could select a pod
    are found from its labels without trying every item; items whose selector has no such pair
    are tried for every pod, those with no selector for none."""

    def __init__(self) -> None:
        self._by_pair: dict[LabelPair, list[_Item]] = {}
        self._general: list[_Item] = []

    def add(self, item: _Item, selector: LabelSelector | None) -> None:
        if selector is None:
            return
        if selector.match_labels:
            self._by_pair.setdefault(selector.match_labels[0], []).append(item)
        else:
            self._general.append(item)

    def candidates(self, labels: dict[str, str]) -> list[_Item]:
        found = list(self._general)
        by_pair = self._by_pair
        if by_pair:
            for pair in labels.items():
                bucket = by_pair.get(pair)
                if bucket:
                    found.extend(bucket)
        return found


class _RowCounts:
    """A count per node row, its total, and the same summed per domain of each node label asked
    for, all changed together one row at a time."""

    def __init__(self, rows: int) -> None:
        self.per_row = np.zeros(rows, dtype=np.int64)
        self.total = 0
        self._domains: list[tuple[np.ndarray, np.ndarray]] = []
        """(a node label's row codes, the counts per domain of it)."""

    def add(self, row: int, sign: int) -> None:
        self.per_row[row] += sign
        self.total += sign
        for codes, counts in self._domains:
            code = codes[row]
            if code >= 0:
                counts[code] += sign

    def per_domain(self, codes: np.ndarray, domains: int) -> np.ndarray:
        """Summed on first ask, reading only the rows that count anything (a new selector selects
        few pods, and a hostname key has a domain per node), then kept current by `add`."""
        for known, counts in self._domains:
            if known is codes:
                return counts
        counts = np.zeros(domains, dtype=np.int64)
        rows = np.flatnonzero(self.per_row)
        rows = rows[codes[rows] >= 0]
        np.add.at(counts, codes[rows], self.per_row[rows])
        self._domains.append((codes, counts))
        return counts


def _selected_by(key: SelectorKey, member: Member) -> bool:
    selector, namespaces, _ = key
    if namespaces is not None and member.namespace not in namespaces:
        return False
    return selects(selector, member.spec.labels)


def _clash(held_ip: str, wanted_ip: str) -> bool:
    """Two binds of one port clash when either is on every address or both on the same one."""
    return not held_ip or not wanted_ip or held_ip == wanted_ip
