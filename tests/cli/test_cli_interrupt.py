"""Ctrl-C during `kai-ray watch` asks the watch to stop instead of raising inside gRPC's stream
iteration (where a KeyboardInterrupt can leave a call's lock half taken and the process hung);
a second Ctrl-C raises as usual."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator

import pytest

from kai_ray.cli.api import _interrupt_sets

pytestmark = pytest.mark.unit


@pytest.fixture(autouse=True)
def plain_ctrl_c() -> Iterator[None]:
    """Python's own SIGINT handler, as a fresh `kai-ray` process has: tests run earlier in the
    session (Ray, servers) may have installed others."""
    original = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, original)


def test_ctrl_c_sets_stop_and_a_second_one_raises() -> None:
    before = signal.getsignal(signal.SIGINT)
    stop = threading.Event()
    with _interrupt_sets(stop):
        signal.raise_signal(signal.SIGINT)
        assert stop.wait(5)
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGINT)
    assert signal.getsignal(signal.SIGINT) is before


def test_the_handler_is_put_back_when_the_watch_ends_without_ctrl_c() -> None:
    before = signal.getsignal(signal.SIGINT)
    stop = threading.Event()
    with _interrupt_sets(stop):
        assert signal.getsignal(signal.SIGINT) is not before
    assert signal.getsignal(signal.SIGINT) is before
    assert not stop.is_set()


def test_off_the_main_thread_ctrl_c_is_left_alone() -> None:
    seen: list[object] = []

    def watch() -> None:
        with _interrupt_sets(threading.Event()):
            seen.append(signal.getsignal(signal.SIGINT))

    before = signal.getsignal(signal.SIGINT)
    worker = threading.Thread(target=watch)
    worker.start()
    worker.join(10)
    assert seen == [before]
