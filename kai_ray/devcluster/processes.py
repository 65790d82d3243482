"""Processes the dev cluster starts: launched into their own session, recorded, found again, stopped.

`stop` may run in another process than `start` (``kai-ray devcluster down``), so everything
needed to end exactly what was started (PIDs with their kernel start times, to tell a reused
PID) goes into ``DIR/state.json`` before anything waits on it.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from kai_ray.devcluster.binaries import DevClusterError

STATE_FILE = "state.json"
STATE_VERSION = 1
LOOPBACK = "127.0.0.1"

_T = TypeVar("_T")


def _proc_start_time(pid: int) -> int | None:
    """Kernel start time of ``pid`` (clock ticks since boot), to detect PID reuse."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # comm (field 2) may contain spaces and parentheses; fields after the last ')' are fixed.
    fields = stat[stat.rindex(")") + 2 :].split()
    return int(fields[19])  # field 22 overall


def _reap(pid: int) -> bool | None:
    """Collect ``pid``'s exit status if it is our exited child.

    Returns True when reaped, False when it is our child but has not fully exited yet, None
    when it is not our child (started by another process, or already reaped).  Reaping
    matters: an ended child otherwise stays a zombie until the starting process exits.
    """
    try:
        reaped, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return None
    return reaped == pid


def _alive(pid: int, start_time: int | None) -> bool:
    """True while ``pid`` is the very process we started (not exited, not a reused PID)."""
    now = _proc_start_time(pid)
    if start_time is not None and now is not None and now != start_time:
        return False  # the PID now belongs to an unrelated process; ours is long gone
    reaped = _reap(pid)
    if reaped:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        if Path("/proc/self/stat").exists():
            return False  # /proc works, so the process is gone
        # No /proc on this system: fall back to a signal-0 probe.
        try:
            os.kill(pid, 0)
        except (ProcessLookupError, PermissionError):
            return False
        return True
    if stat[stat.rindex(")") + 2] == "Z":
        # A Go program's main thread shows "Z" while its other threads are still exiting, and
        # waitpid cannot collect it yet: for our own child, keep waiting until it is reaped.
        return _reap(pid) is False
    return True


def terminate(pid: int, start_time: int | None, grace: float) -> None:
    """SIGTERM the process group led by ``pid``, SIGKILL it after ``grace`` seconds."""
    if not _alive(pid, start_time):
        return
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            # Each child leads its own session/process group, so this also reaches helpers it forked.
            os.killpg(pid, sig)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if not _alive(pid, start_time):
                return
            time.sleep(0.05)
    raise DevClusterError(f"process {pid} survived SIGKILL")


def read_state(dir: Path) -> dict[str, Any] | None:
    path = dir / STATE_FILE
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write_state(dir: Path, state: Mapping[str, Any]) -> None:
    """Atomically replace state.json so a concurrent ``stop`` never reads half a file."""
    tmp = dir / (STATE_FILE + ".tmp")
    write_private(tmp, json.dumps(state, indent=2, sort_keys=True))  # it holds the admin token
    os.replace(tmp, dir / STATE_FILE)


def write_private(path: Path, data: str | bytes) -> None:
    """Create ``path`` with mode 0600 from its first byte, for files holding credentials.

    Writing first and chmod-ing afterwards would leave the secret world-readable (umask 022)
    for a moment.  An existing file is removed first because ``O_CREAT`` keeps an existing
    file's mode; ``O_EXCL`` also refuses to write through a symlink planted at ``path``.
    """
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data.encode() if isinstance(data, str) else data)


def remove(path: Path) -> None:
    """Delete a file or directory tree if it exists."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """preexec_fn: have the kernel SIGKILL the child when the starting process dies.

    Used by the pytest fixture so a killed test run leaves no etcd/apiserver behind.
    """
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


class Launcher:
    """Starts processes and records each one in state.json *before* waiting on it."""

    def __init__(self, dir: Path, state: dict[str, Any], die_with_parent: bool) -> None:
        self.dir = dir
        self.state = state
        self.die_with_parent = die_with_parent

    def launch(self, name: str, argv: Sequence[str], env: Mapping[str, str] | None = None) -> int:
        log = self.dir / f"{name}.log"
        with log.open("ab") as out:
            proc = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.dir,
                env=None if env is None else dict(env),
                start_new_session=True,
                preexec_fn=_die_with_parent if self.die_with_parent else None,
            )
        self.state["processes"][name] = {
            "pid": proc.pid,
            "start_time": _proc_start_time(proc.pid),
            "argv": list(argv),
            "log": str(log),
        }
        write_state(self.dir, self.state)
        return proc.pid

    def check_alive(self, name: str) -> None:
        info = self.state["processes"][name]
        if not _alive(int(info["pid"]), info.get("start_time")):
            raise ExitedDuringStartup(name, _tail(Path(info["log"])))


class ExitedDuringStartup(DevClusterError):
    """A started process ended before it was ready; `port_taken` says whether to retry on new ports.

    Ports are picked free and handed to the process, which can find them taken by then; its log
    is the only place that says so, read here once so callers decide on a field, not on text."""

    def __init__(self, name: str, log_tail: str) -> None:
        super().__init__(f"{name} exited during start-up:\n{log_tail}")
        self.port_taken = "address already in use" in log_tail


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def free_ports(count: int) -> list[int]:
    """Distinct free loopback ports; held open together so they are not handed out twice."""
    socks: list[socket.socket] = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((LOOPBACK, 0))
            socks.append(s)
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


def wait_until(
    what: str, probe: Callable[[], _T | None], timeout: float, check: Callable[[], None] | None = None
) -> _T:
    """Poll ``probe`` until it returns a non-None value or ``timeout`` elapses.

    ``check`` runs between probes to fail fast (e.g. the process being waited on died)
    instead of waiting out the whole timeout.
    """
    deadline = time.monotonic() + timeout
    delay = 0.05
    last_error: BaseException | None = None
    while True:
        if check is not None:
            check()
        try:
            result = probe()
        except Exception as exc:  # the probe's failures are expected until the thing is up
            last_error = exc
            result = None
        if result is not None:
            return result
        if time.monotonic() >= deadline:
            raise DevClusterError(
                f"timed out after {timeout:.0f}s waiting for {what} (last error: {last_error})"
            )
        time.sleep(delay)
        delay = min(delay * 1.5, 0.5)
