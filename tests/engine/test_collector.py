"""`kai_ray.collector`: a cycle runs with automatic collection held off, and overlapping holds
(a cycle and a what-if call in two threads) give it back only when the last one ends."""

from __future__ import annotations

import gc
import threading
import weakref
from collections.abc import Iterator

import pytest
from builders import cluster, config

from kai_ray.collector import collection_paused, hold_collection, leave_to_collector, release_collection
from kai_ray.engine import cycle
from kai_ray.engine.cycle import schedule
from kai_ray.model.snapshot import compile_snapshot

pytestmark = pytest.mark.unit


@pytest.fixture
def collecting() -> Iterator[None]:
    was = gc.isenabled()
    gc.enable()
    yield
    if was:
        gc.enable()
    else:
        gc.disable()


def test_overlapping_holds_resume_collection_only_after_the_last(collecting: None) -> None:
    first_in, second_in, first_out = threading.Event(), threading.Event(), threading.Event()
    seen: list[bool] = []

    def first() -> None:
        with collection_paused():
            first_in.set()
            second_in.wait(10.0)
        first_out.set()

    def second() -> None:
        first_in.wait(10.0)
        with collection_paused():
            second_in.set()
            first_out.wait(10.0)
            seen.append(gc.isenabled())  # the other hold ended: still off, this one runs

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10.0)
    assert seen == [False]
    assert gc.isenabled()


def test_a_collector_that_was_off_stays_off(collecting: None) -> None:
    gc.disable()
    with collection_paused():
        assert not gc.isenabled()
    assert not gc.isenabled()


def test_a_release_without_a_hold_is_a_bug_said_at_once(collecting: None) -> None:
    hold_collection()
    release_collection()
    with pytest.raises(RuntimeError, match="without a hold"):
        release_collection()
    assert gc.isenabled()


def test_a_cycle_runs_with_collection_off_and_gives_it_back(
    collecting: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    during: list[bool] = []
    real = cycle.run_actions

    def watched(session: cycle.Session) -> cycle.Plan:
        during.append(gc.isenabled())
        return real(session)

    monkeypatch.setattr(cycle, "run_actions", watched)
    snapshot = compile_snapshot(cluster().node("n1", gpus=2).queue("q").job("a", queue="q", gpus=1).build())
    plan = schedule(snapshot, config())
    assert [bind.node for bind in plan.binds] == ["n1"]
    assert during == [False]
    assert gc.isenabled()


class Held:
    """A plain object, freed by its last reference going unless left to the collector."""


def test_objects_left_to_the_collector_outlive_their_last_reference_until_a_collection(
    collecting: None,
) -> None:
    kept, dropped = Held(), Held()
    kept_ref, dropped_ref = weakref.ref(kept), weakref.ref(dropped)
    with collection_paused():
        leave_to_collector(kept)
        del kept, dropped
        assert dropped_ref() is None  # freed at once, as any object whose last reference goes
        assert kept_ref() is not None
    gc.collect()
    assert kept_ref() is None
