"""What one reader needs of one cached kind, derived once per object version.

Why: the steps around a cycle (which pods have which uid, each PodGroup's status as stored, queue
display names) read a few fields of every object of a kind.  Parsing the whole kind's JSON every
cycle for them cost more than the cycle at tens of thousands of pods; a `DerivedTable` follows
the cache's change log instead, parses only objects that changed since its last refresh, and
keeps the derived values (memory follows the cluster: deleted objects are dropped).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar

from kai_ray.cluster.kube.cache import ClusterCache

__all__ = ["DerivedTable"]

Key = tuple[str, str]
ValueT = TypeVar("ValueT")


class DerivedTable(Generic[ValueT]):
    """`derive(object)` for every cached object of `kind`, by (namespace, name).  One reader."""

    def __init__(self, kind: str, derive: Callable[[Mapping[str, Any]], ValueT]) -> None:
        self.kind = kind
        self._derive = derive
        self._values: dict[Key, ValueT] = {}
        self._generation: int | None = None
        self.changed: set[Key] = set()
        """Keys added, changed or deleted by the last `refresh`."""

    @property
    def values(self) -> Mapping[Key, ValueT]:
        """The table as of the last `refresh` (a live view: the next refresh updates it)."""
        return self._values

    def refresh(self, cache: ClusterCache) -> Mapping[Key, ValueT]:
        """The table as the cache holds it now (a live view: the next refresh updates it)."""
        changes = cache.changes(self._generation, [self.kind])
        items = changes.changed.get(self.kind, {})
        if changes.complete:
            self.changed = set(self._values) | set(items)
            self._values = {}
        else:
            self.changed = set(items)
        for key, item in items.items():
            if item is None:
                self._values.pop(key, None)
            else:
                self._values[key] = self._derive(json.loads(item.text))
        self._generation = changes.generation
        return self._values
