"""Automatic garbage collection held off while a scheduling cycle runs.

Why: a cycle allocates hundreds of thousands of objects (680,000 at `big-5000x40000`) that all
live until its plan is out: the session, its jobs, tasks, statements and node states. CPython's
collector, started every 700 allocations, walks them again and again and finds no garbage
among them: 1.3 s of a 4.7 s cycle there. Held off, they are walked once, by the first
collection after the cycle, which also frees the session (it is cyclic). A cycle's garbage
cycles wait until then, so memory peaks a little higher, for the length of one cycle.

The collector is process-wide, and cycles, what-if calls and split parts may overlap in
threads: holds are counted, and collection resumes when the last hold is released, only if
it was on when the first was taken.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["collection_paused", "hold_collection", "leave_to_collector", "release_collection"]

_lock = threading.Lock()
_holds = 0
_was_enabled = False


def hold_collection() -> None:
    """Stop automatic collection until the matching `release_collection`."""
    global _holds, _was_enabled
    with _lock:
        if _holds == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _holds += 1


def release_collection() -> None:
    global _holds
    with _lock:
        if _holds == 0:
            raise RuntimeError("release_collection without a hold")
        _holds -= 1
        if _holds == 0 and _was_enabled:
            gc.enable()


@contextmanager
def collection_paused() -> Iterator[None]:
    """No automatic collection inside the block (one cycle: session opened, actions run, plan
    built)."""
    hold_collection()
    try:
        yield
    finally:
        release_collection()


def leave_to_collector(*objects: object) -> None:
    """Have `objects` freed by the next collection rather than when the caller drops them.

    A cycle's session is cyclic, so it is freed by the first collection after the cycle, once the
    plan is out. What a cycle holds that is not cyclic (a split cycle's answers, layout and
    checks: hundreds of thousands of tuples, strings and sets at 40,000 pods) would otherwise be
    freed one object at a time as the cycle's function returns, before its plan is handed on
    (60 ms at `big-5000x40000`). Held in a list that holds itself, they become cyclic garbage too.
    """
    held: list[object] = [*objects]
    held.append(held)
