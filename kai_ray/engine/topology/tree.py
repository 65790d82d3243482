"""The domain tree of one Topology over the session's node table (spec §18.1).

A node belongs to the topology only if it carries every level label; a domain
at level i is identified by the dot-joined label values of levels 0..i, so two
racks named alike in different zones stay apart. A synthetic `root` domain
holds every member node. The tree is static for a session (labels do not
change inside a cycle), so it is built once and only its per-job figures
(free resources, ratios) are computed on demand by `selection`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from kai_ray.model.objects import TopologySpec
from kai_ray.model.snapshot import NodeTable

ROOT_LEVEL = "root"
"""KAI's name of the level above the topology's first one (and of its single domain)."""


@dataclass(eq=False)
class Domain:
    """One domain: `rows` are its member node rows, ascending; `children` are sorted by id."""

    id: str
    level: str
    depth: int
    """0 for root, i + 1 for the topology's level i."""
    rows: np.ndarray
    children: list[Domain] = field(default_factory=list)

    def walk(self) -> list[Domain]:
        """This domain and everything under it, parents before children."""
        found = [self]
        for child in self.children:
            found.extend(child.walk())
        return found


@dataclass
class DomainTree:
    topology: TopologySpec
    root: Domain
    member: np.ndarray
    """Per node row: does it carry every level label."""
    codes: np.ndarray
    """Per level, per node row: the index of the row's domain among `levels[level]` (-1 outside)."""
    levels: list[list[Domain]]
    """Per level, its domains in id order."""

    @property
    def name(self) -> str:
        return self.topology.name

    def depth_of(self, level: str) -> int | None:
        """The depth of a level label or alias (root is 0), or None when the topology has no such level."""
        if level == ROOT_LEVEL:
            return 0
        level = dict(self.topology.aliases).get(level, level)
        if level in self.topology.levels:
            return self.topology.levels.index(level) + 1
        return None

    def level_name(self, depth: int) -> str:
        return ROOT_LEVEL if depth == 0 else self.topology.levels[depth - 1]

    def domain_of(self, row: int, depth: int) -> Domain:
        """The domain at that depth holding a member row."""
        if depth == 0:
            return self.root
        return self.levels[depth - 1][int(self.codes[depth - 1, row])]

    def lowest_common(self, rows: np.ndarray, stop_depth: int | None) -> Domain:
        """The deepest domain holding all these member rows, not below `stop_depth` (§18.3 step 1)."""
        depth = 0
        if len(rows):
            for level in range(len(self.topology.levels)):
                codes = self.codes[level, rows]
                if codes[0] < 0 or np.any(codes != codes[0]):
                    break
                depth = level + 1
                if depth == stop_depth:
                    break
        return self.domain_of(int(rows[0]), depth) if depth else self.root

    def level_domains(self, depth: int) -> list[Domain]:
        """Every domain at a depth, in id order."""
        return [self.root] if depth == 0 else list(self.levels[depth - 1])


def build_tree(topology: TopologySpec, nodes: NodeTable) -> DomainTree:
    """Domains from the member nodes' labels, children in id order (a job's sorted order is kept apart)."""
    count = len(nodes.names)
    member = np.array(
        [all(level in spec.labels for level in topology.levels) for spec in nodes.specs], dtype=bool
    )
    member_rows = np.flatnonzero(member)
    root = Domain(ROOT_LEVEL, ROOT_LEVEL, 0, member_rows)
    codes = np.full((len(topology.levels), count), -1, dtype=np.int64)
    levels: list[list[Domain]] = []
    parents = [root]
    parent_codes = np.zeros(count, dtype=np.int64)
    ids = [""] * count
    for level, label in enumerate(topology.levels):
        for row in member_rows.tolist():
            value = nodes.specs[row].labels[label]
            ids[row] = value if level == 0 else f"{ids[row]}.{value}"
        names = sorted({ids[row] for row in member_rows.tolist()})
        index = {name: i for i, name in enumerate(names)}
        codes[level, member_rows] = [index[ids[row]] for row in member_rows.tolist()]
        domains = [
            Domain(name, label, level + 1, member_rows[codes[level, member_rows] == i])
            for i, name in enumerate(names)
        ]
        for domain in domains:
            parents[int(parent_codes[domain.rows[0]])].children.append(domain)
        levels.append(domains)
        parents, parent_codes = domains, codes[level]
    return DomainTree(topology, root, member, codes, levels)
