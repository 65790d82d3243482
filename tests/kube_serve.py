"""`kai-ray serve` as a real process, and a recorder of everything it does to a namespace.

Shared by the Kubernetes tests that run serve the way an operator would: a
subprocess with its own flags, whose JSON log lines and exit status are what
the test reads, and a watch on Pods and BindRequests started before it, so a
pod bound twice or a second BindRequest cannot slip between two polls.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from kubernetes import client, watch

from kai_ray.devcluster import DevCluster, read_audit_events

GROUP = "scheduling.run.ai"
KAI_RAY = Path(sys.executable).parent / "kai-ray"
PERIOD = "0.5"


def wait_until(check: Callable[[], bool], timeout: float, what: str, step: float = 0.05) -> None:
    """Poll `check` until it holds; fail with `what` at the deadline."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(step)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def stop_process(proc: subprocess.Popen[bytes]) -> int:
    """SIGTERM ``proc`` (unless it has ended) and return its exit status; if it is still running
    30 s later, SIGKILL it and fail."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=30)
        raise


def log_entries(path: Path) -> list[dict[str, Any]]:
    """Every JSON log line of a kai-ray process so far; anything else on stderr (a traceback) is
    returned as `raw`, so a test that looks for trouble sees it."""
    out: list[dict[str, Any]] = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            entry = {"raw": line}
        out.append(entry if isinstance(entry, dict) else {"raw": line})
    return out


class Serve:
    """One `kai-ray serve` (or `kai-ray podgrouper`) subprocess with its stderr (JSON log lines) in a file."""

    def __init__(
        self,
        kubeconfig: Path,
        identity: str,
        lease_namespace: str,
        logs: Path,
        extra: Sequence[str] = (),
        command: str = "serve",
    ) -> None:
        self.identity = identity
        self.log_path = logs / f"{command}-{identity}-{time.monotonic_ns()}.log"
        argv = [
            str(KAI_RAY),
            command,
            "--kubeconfig",
            str(kubeconfig),
            "--period",
            PERIOD,
            "--identity",
            identity,
            "--lease-namespace",
            lease_namespace,
            "--metrics-address",
            "127.0.0.1:0",
            # Tests count cycles of a settled cluster too: pace those like the others.
            *(["--idle-period", PERIOD] if command == "serve" else []),
            *extra,
        ]
        with self.log_path.open("wb") as stderr:
            self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=stderr)

    def entries(self) -> list[dict[str, Any]]:
        return log_entries(self.log_path)

    def messages(self) -> list[str]:
        return [str(entry.get("message", "")) for entry in self.entries() if "message" in entry]

    def cycles(self) -> int:
        return sum(1 for message in self.messages() if message.startswith("cycle:"))

    def metrics_url(self) -> str:
        """Where this process serves /metrics (it logs the port it got)."""
        found: list[str] = []

        def logged() -> bool:
            found.extend(
                m.split("metrics on ", 1)[1].split(" ", 1)[0]
                for m in self.messages()
                if m.startswith("metrics on ")
            )
            return bool(found)

        wait_until(logged, 30, f"the metrics address in the log\n{self.tail()}")
        return found[0]

    def tail(self, lines: int = 20) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def signal(self, signum: signal.Signals) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signum)

    def kill(self) -> None:
        """SIGKILL (idempotent, also after SIGSTOP); reaps the process."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=30)


def lease_holder(api: Any, namespace: str, name: str) -> str | None:
    try:
        lease = client.CoordinationV1Api(api).read_namespaced_lease(name, namespace)
    except client.ApiException as error:
        if error.status == 404:
            return None
        raise
    return (lease.spec.holder_identity if lease.spec else None) or None


def writes_by(cluster: DevCluster, identity: str, since: dt.datetime) -> list[str]:
    """Writes the API server received from that replica (its user agent names it) since `since`."""
    found = []
    for event in read_audit_events(cluster):
        received = dt.datetime.fromisoformat(event["requestReceivedTimestamp"].replace("Z", "+00:00"))
        if f"({identity})" in event.get("userAgent", "") and received >= since:
            ref = event.get("objectRef") or {}
            found.append(
                f"{event['verb']} {ref.get('resource')}/{ref.get('subresource', '')} {ref.get('name')}"
            )
    return found


class History:
    """Watches the namespace's Pods and BindRequests from before the scheduler starts.

    Records every node each pod was ever seen on and every BindRequest (uid) ever created,
    so a re-bind or a second request shows even when it is undone before the test looks.
    """

    def __init__(self, cluster: DevCluster, namespace: str) -> None:
        self.namespace = namespace
        self.nodes: dict[str, list[str]] = {}
        self.requests: dict[str, set[str]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._api = cluster.api_client()
        core = client.CoreV1Api(self._api)
        custom = client.CustomObjectsApi(self._api)
        self._error: BaseException | None = None
        self._threads = [
            self._follow(functools.partial(core.list_namespaced_pod, namespace), self._on_pod),
            self._follow(
                functools.partial(
                    custom.list_namespaced_custom_object, GROUP, "v1alpha2", namespace, "bindrequests"
                ),
                self._on_request,
            ),
        ]
        self._ready = threading.Barrier(len(self._threads) + 1)
        for thread in self._threads:
            thread.start()
        self._ready.wait(timeout=30)

    def _follow(
        self, lister: Callable[..., Any], on_event: Callable[[dict[str, Any]], None]
    ) -> threading.Thread:
        """List, then watch from the list's resourceVersion; objects are handled as the server's JSON."""

        def run() -> None:
            try:
                listing = json.loads(lister(_preload_content=False).data)
                for item in listing["items"]:
                    on_event(item)
                version = listing["metadata"]["resourceVersion"]
            finally:
                self._ready.wait(timeout=30)
            try:
                while not self._stop.is_set():
                    watcher: Any = watch.Watch()
                    for event in watcher.stream(lister, resource_version=version, timeout_seconds=2):
                        obj = event["raw_object"]
                        if event["type"] == "ERROR":
                            raise RuntimeError(f"watch failed: {obj}")
                        version = obj["metadata"]["resourceVersion"]
                        if event["type"] in ("ADDED", "MODIFIED"):
                            on_event(obj)
                        if self._stop.is_set():
                            watcher.stop()
            except BaseException as error:
                self._error = error
                raise

        return threading.Thread(target=run, daemon=True)

    def _on_pod(self, obj: dict[str, Any]) -> None:
        node = (obj.get("spec") or {}).get("nodeName")
        with self._lock:
            seen = self.nodes.setdefault(obj["metadata"]["name"], [])
            if node and node not in seen:
                seen.append(node)

    def _on_request(self, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        with self._lock:
            self.requests.setdefault(str(obj["spec"]["podName"]), set()).add(meta["uid"])

    def snapshot(self) -> tuple[dict[str, list[str]], dict[str, set[str]]]:
        if self._error is not None:
            raise AssertionError(f"the history watch failed: {self._error!r}")
        with self._lock:
            return (
                {name: list(nodes) for name, nodes in self.nodes.items()},
                {name: set(uids) for name, uids in self.requests.items()},
            )

    def close(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=10)
        self._api.close()
