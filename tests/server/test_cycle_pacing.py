"""When the serve loop's next cycle starts: early on a change, late on a settled cluster."""

from __future__ import annotations

import threading
import time

import pytest
from manifest_builders import node

from kai_ray.cluster.kube.apply import ApplyResult
from kai_ray.cluster.kube.bind_request_cleanup import CleanupResult
from kai_ray.cluster.kube.binder import BindPassResult
from kai_ray.cluster.kube.cache import ClusterCache
from kai_ray.engine.plan import NOT_REACHED, Bind, Plan
from kai_ray.server.scheduler import CycleOutcome, CyclePacing

pytestmark = pytest.mark.unit

LONG = 30.0
"""A wait no passing test sits out: the test ends long before if pacing works."""


def changed_later(cache: ClusterCache, started: threading.Event) -> threading.Thread:
    """A watcher-like thread that applies one event once the pacer has begun waiting."""

    def apply() -> None:
        started.wait(LONG)
        cache.apply_event("ADDED", "Node", {**node("n1"), "metadata": {"name": "n1", "resourceVersion": "9"}})

    thread = threading.Thread(target=apply, daemon=True)
    thread.start()
    return thread


def test_a_change_wakes_a_settled_loop_long_before_its_idle_period() -> None:
    cache = ClusterCache(None)
    pacing = CyclePacing(period=LONG, idle_period=LONG, min_period=0.01)
    began = threading.Event()
    changed_later(cache, began)
    started = time.monotonic()
    began.set()
    pacing.wait(cache, cache.generation, settled=True, stop=threading.Event())
    assert time.monotonic() - started < LONG / 2
    assert cache.sizes()["Node"] == 1


def test_a_settled_loop_waits_its_idle_period_and_a_busy_one_its_period() -> None:
    cache = ClusterCache(None)
    pacing = CyclePacing(period=0.05, idle_period=0.4, min_period=0.01)
    for settled, least, most in ((True, 0.4, LONG / 2), (False, 0.05, 0.4)):
        started = time.monotonic()
        pacing.wait(cache, cache.generation, settled=settled, stop=threading.Event())
        waited = time.monotonic() - started
        assert least <= waited < most, (settled, waited)


def test_even_a_change_already_there_waits_the_minimum_period_and_stop_ends_any_wait() -> None:
    cache = ClusterCache(None)
    seen = cache.generation
    cache.apply_event("ADDED", "Node", {**node("n1"), "metadata": {"name": "n1", "resourceVersion": "9"}})
    started = time.monotonic()
    CyclePacing(min_period=0.2).wait(cache, seen, settled=False, stop=threading.Event())
    assert time.monotonic() - started >= 0.2
    stop = threading.Event()
    stop.set()
    started = time.monotonic()
    CyclePacing(period=LONG, idle_period=LONG).wait(cache, cache.generation, settled=True, stop=stop)
    assert time.monotonic() - started < LONG / 2


def test_a_cycle_is_settled_only_when_it_did_nothing_and_nothing_waits() -> None:
    def outcome(plan: Plan | None = None, waiting: bool = False) -> CycleOutcome:
        return CycleOutcome(
            plan or Plan(), CleanupResult(), ApplyResult(), BindPassResult(), 0.1, waiting=waiting
        )

    assert outcome().settled
    assert not outcome(waiting=True).settled  # a bind retry after its backoff
    pending = Plan(pending_reasons={"team-a/big": NOT_REACHED})
    assert not outcome(pending).settled  # a grace period or a victim's min runtime may run out
    bound = Plan(binds=[Bind("team-a/p", "p-0", "n1", (), 1.0, "allocate")])
    assert not outcome(bound).settled
