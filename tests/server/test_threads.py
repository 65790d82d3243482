"""`leave_within`: a stopped server exits even when a thread of it will not end, and says which
(in a child process: it may end the process)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.unit

PROBE = """
import sys, threading
from kai_ray.server.logs import configure_logging
from kai_ray.server.threads import leave_within
configure_logging()
release = threading.Event()
def wait_for_ever():
    release.wait()
def finish_soon():
    release.wait(0.05)
threading.Thread(target=wait_for_ever if sys.argv[1] == "stuck" else finish_soon, name="handler-7").start()
leave_within(0.5, 3)
print("left normally", flush=True)
"""


def run_probe(mode: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", PROBE, mode], capture_output=True, text=True, timeout=60, check=False
    )


def test_a_thread_that_will_not_end_is_named_with_its_stack_and_the_process_exits_anyway() -> None:
    done = run_probe("stuck")
    assert done.returncode == 3, done.stderr
    assert "left normally" not in done.stdout
    errors = [json.loads(line) for line in done.stderr.splitlines() if line.startswith("{")]
    messages = [entry["message"] for entry in errors if entry.get("level") == "ERROR"]
    assert len(messages) == 1, done.stderr
    assert "handler-7" in messages[0] and "wait_for_ever" in messages[0]


def test_threads_that_end_in_time_let_the_process_exit_normally() -> None:
    done = run_probe("ends")
    assert done.returncode == 0, done.stderr
    assert "left normally" in done.stdout
