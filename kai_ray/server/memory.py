"""Memory given back to the system once the cluster shrinks a lot: collect, then trim malloc.

Why: a burst of 20,000 pods took the scheduler from 112 MB to 1.75 GB, and after every pod and
PodGroup was deleted it still held 1.84 GB.  Reference counting frees the objects as the cache
forgets them, but the allocators keep what was freed: glibc's malloc keeps freed chunks in its
heaps (one per thread that allocated) until `malloc_trim` hands the free pages back, and the
session's reference cycles wait for a full collection, which a scheduler that holds the
collector off during cycles (`kai_ray.collector`) runs rarely.  So after a cycle that finds the
cache much smaller than at its high-water mark, the loop collects and trims once.

What is still kept after that is CPython's own small-object allocator: it returns a 1 MiB arena
only when no object at all lives in it, and the few objects that outlive a burst (the cache's
tombstones of deleted objects, a queue's new status, a log record) are spread over many arenas.
Those arenas are reused by the next burst rather than grown anew, so they bound what a burst
leaves behind by the largest burst's small-object peak; docs/performance.md has the figures.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import logging
from collections.abc import Callable
from typing import Final

__all__ = ["ShrinkTrimmer"]

log = logging.getLogger(__name__)

SHRINK_OBJECTS: Final = 1_000
"""Cached objects fewer than at the high-water mark that count as the cluster having shrunk a lot
(and at least a quarter of that mark): below that, what a cycle frees is reused by the next."""


def _malloc_trim() -> Callable[[], object] | None:
    """glibc's `malloc_trim(0)`, or None on another C library (musl has none)."""
    name = ctypes.util.find_library("c")
    trim = getattr(ctypes.CDLL(name), "malloc_trim", None) if name else None
    return None if trim is None else lambda: trim(0)


class ShrinkTrimmer:
    """Collects and trims malloc once each time the cache shrinks well below its high-water mark."""

    def __init__(self, shrink: int = SHRINK_OBJECTS) -> None:
        self.shrink = shrink
        self._high = 0
        self._trim = _malloc_trim()
        self.trims = 0
        """How often it collected and trimmed (for tests and logs)."""

    def after_cycle(self, cached: int) -> bool:
        """Given the cache's object count after a cycle, collect and trim if it shrank a lot since
        its high-water mark (which then starts again from here); True when it did."""
        self._high = max(self._high, cached)
        if self._high - cached < max(self.shrink, self._high // 4):
            return False
        log.info("the cache holds %d objects, %d at its peak: collecting and trimming", cached, self._high)
        self._high = cached
        gc.collect()
        if self._trim is not None:
            self._trim()
        self.trims += 1
        return True
