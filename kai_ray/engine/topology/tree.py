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
    labels: list[list[str]]
    """Per level, per node row: the label value ('' for non-members)."""
    by_id: dict[tuple[int, str], Domain]

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
        return self.by_id[(depth, ".".join(self.labels[d][row] for d in range(depth)))]

    def lowest_common(self, rows: np.ndarray, stop_depth: int | None) -> Domain:
        """The deepest domain holding all these member rows, not below `stop_depth` (§18.3 step 1)."""
        depth = 0
        for level in range(len(self.topology.levels)):
            values = {self.labels[level][row] for row in rows.tolist()}
            if len(values) != 1 or "" in values:
                break
            depth = level + 1
            if depth == stop_depth:
                break
        if depth == 0 or len(rows) == 0:
            return self.root
        return self.domain_of(int(rows[0]), depth)

    def level_domains(self, depth: int) -> list[Domain]:
        """Every domain at a depth, in id order."""
        return [d for d in self.root.walk() if d.depth == depth]


def build_tree(topology: TopologySpec, nodes: NodeTable) -> DomainTree:
    count = len(nodes.names)
    labels = [[spec.labels.get(level, "") for spec in nodes.specs] for level in topology.levels]
    member = np.array(
        [all(level in spec.labels for level in topology.levels) for spec in nodes.specs], dtype=bool
    )
    member_rows = np.flatnonzero(member) if count else np.zeros(0, dtype=np.int64)
    root = Domain(ROOT_LEVEL, ROOT_LEVEL, 0, member_rows)
    by_id: dict[tuple[int, str], Domain] = {}
    rows_by_id: dict[tuple[int, str], list[int]] = {}
    for row in member_rows.tolist():
        for level in range(len(topology.levels)):
            key = (level + 1, ".".join(labels[d][row] for d in range(level + 1)))
            rows_by_id.setdefault(key, []).append(row)
    for key in sorted(rows_by_id):
        depth, domain_id = key
        by_id[key] = Domain(
            domain_id, topology.levels[depth - 1], depth, np.array(rows_by_id[key], dtype=np.int64)
        )
    for (depth, _), domain in sorted(by_id.items()):
        first = int(domain.rows[0])
        parent = (
            root if depth == 1 else by_id[(depth - 1, ".".join(labels[d][first] for d in range(depth - 1)))]
        )
        parent.children.append(domain)
    return DomainTree(topology, root, member, labels, by_id)
