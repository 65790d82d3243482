"""What a serving process's threads are doing, and leaving when one of them will not end.

A scheduler that stops cycling, or will not exit, without a word is the one failure its logs
cannot explain. Both tools here say which thread waits where, and the second bounds the wait:
at interpreter exit Python joins every non-daemon thread (the gRPC handler pools' workers
among them, even after `shutdown(wait=False)`), so one handler stuck in a call would keep a
stopped server alive for ever, and its supervisor would have to kill it blind.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
import time
import traceback
from types import FrameType

__all__ = ["EXIT_WAIT_SECONDS", "dump_stacks_on_sigusr1", "leave_within", "thread_stacks"]

log = logging.getLogger(__name__)

EXIT_WAIT_SECONDS = 5.0
"""How long a stopped server waits for its threads to end before it exits without them."""


def dump_stacks_on_sigusr1() -> None:
    """`kill -USR1 <pid>` writes every thread's stack to stderr; the process goes on.

    A Python handler, not `faulthandler`: faulthandler reads other threads' frames from a
    signal handler while they run, and on a busy scheduler it was seen to write a garbled
    frame and never finish (the dumping thread stuck). Python runs this handler on the main
    thread holding the interpreter lock, between two bytecodes (blocking calls are
    interrupted for it), so every frame it reads is whole.
    """
    try:
        signal.signal(signal.SIGUSR1, _dump_stacks)
    except ValueError as error:  # not the main thread (embedded)
        log.debug("no stack dumps on SIGUSR1: %s", error)


def thread_stacks(only: set[int] | None = None) -> str:
    """Every thread's stack (or those whose ident is in `only`), the main thread's last."""
    names = {thread.ident: thread.name for thread in threading.enumerate()}
    main = threading.main_thread().ident
    frames = sys._current_frames()
    lines: list[str] = []
    for ident in sorted(frames, key=lambda key: key == main):
        if only is not None and ident not in only:
            continue
        lines.append(f"Thread 0x{ident:016x} ({names.get(ident, 'unnamed')}) (most recent call first):")
        for entry in reversed(traceback.extract_stack(frames[ident])):
            lines.append(f'  File "{entry.filename}", line {entry.lineno} in {entry.name}')
        lines.append("")
    return "\n".join(lines)


def _dump_stacks(signum: int, frame: FrameType | None) -> None:
    with contextlib.suppress(OSError, AttributeError):  # stderr closed, or none at all
        os.write(sys.stderr.fileno(), thread_stacks().encode(errors="replace"))


def leave_within(seconds: float, code: int) -> None:
    """Wait up to `seconds` for every other non-daemon thread to end; if one does not, log which
    and where it waits, and exit with `code` at once (`os._exit`: no atexit join to hang in).

    Called by a server once it has stopped everything it started; returns when all ended, so
    a clean stop still runs the interpreter's own exit."""
    deadline = time.monotonic() + seconds
    current = threading.current_thread()
    for thread in threading.enumerate():
        if thread is not current and not thread.daemon:
            thread.join(max(0.0, deadline - time.monotonic()))
    stuck = [t for t in threading.enumerate() if t is not current and not t.daemon and t.is_alive()]
    if not stuck:
        return
    log.error(
        "exiting without %d thread(s) that did not end within %.0f s of the stop: %s\n%s",
        len(stuck),
        seconds,
        ", ".join(sorted(thread.name for thread in stuck)),
        thread_stacks({thread.ident for thread in stuck if thread.ident is not None}),
    )
    logging.shutdown()
    with contextlib.suppress(OSError, ValueError):
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(code)
