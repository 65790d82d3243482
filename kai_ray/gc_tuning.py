"""Garbage-collector settings for a process that serves: `kai-ray serve` and the gRPC bench."""

from __future__ import annotations

import gc

__all__ = ["YOUNG_COLLECTION_THRESHOLD", "freeze_what_lives", "tune_gc_for_serving"]

YOUNG_COLLECTION_THRESHOLD = 20_000
"""Allocations between young collections (CPython's default is 700)."""


def tune_gc_for_serving() -> None:
    """Freeze what start-up loaded and collect the young generation less often.

    Why: a scheduler keeps every cluster object for as long as it lives, hundreds of thousands
    of tracked objects at a few thousand pods, while each API call or cycle allocates thousands
    of short-lived ones.  With CPython's defaults that traffic triggers a full collection every
    thousand submits or so, each walking the whole heap (130 ms at 4,000 pods, stalling every
    call in flight), and the collector took a fifth of a submit's time.  Objects of a scheduler
    are freed by reference counting; cycles are rare, so collecting them less often costs a
    little memory, never correctness.  Called once, after start-up, before serving.
    """
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_COLLECTION_THRESHOLD, middle, old)


def freeze_what_lives() -> None:
    """Collect, then move every object alive now out of the collector's reach.

    Why: a scheduler's model of the cluster (a validated model, a converted task and its
    conversion's bookkeeping per pod) is built after start-up and lives as long as the process;
    left to the collector, every full collection walks it again (a third of an idle cycle's CPU
    at 10,000 pods).  Frozen objects are still freed by reference counting when the cluster
    sheds them, and the model holds no reference cycles, so freezing it leaks nothing.  Called
    once the first read of the cluster is done, before the first session is built (sessions
    are cyclic: they must stay collectable).
    """
    gc.collect()
    gc.freeze()
