"""Waiting and object builders shared by the Kubernetes tests (real API server, no sleeps as sync)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

T = TypeVar("T")
TIMEOUT = 60.0
"""Generous: two shared cores run etcd, the API server, kwok and pytest."""


def wait_for(what: str, probe: Callable[[], T | None], timeout: float = TIMEOUT) -> T:
    """Poll ``probe`` until it returns non-None; fail with ``what`` at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        result = probe()
        if result is not None:
            return result
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.1)


def eventually(check: Callable[[], bool], timeout: float, step: Callable[[], object] | None = None) -> bool:
    """Whether ``check`` held before the deadline, running ``step`` (e.g. a cycle) between tries."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if step is not None:
            step()
        if check():
            return True
        time.sleep(0.2)
    return False


def queue_body(name: str, parent: str | None, gpu_quota: float) -> dict[str, Any]:
    """A KAI Queue with the given GPU quota, unlimited otherwise (-1 limits said out loud)."""
    resources = {
        "gpu": {"quota": gpu_quota, "limit": -1, "overQuotaWeight": 1},
        "cpu": {"quota": -1, "limit": -1, "overQuotaWeight": 1},
        "memory": {"quota": -1, "limit": -1, "overQuotaWeight": 1},
    }
    spec: dict[str, Any] = {"resources": resources}
    if parent:
        spec["parentQueue"] = parent
    return {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": name}, "spec": spec}


def node_of(core: client.CoreV1Api, namespace: str, pod: str) -> str | None:
    """The node a pod is bound to, or None."""
    spec = core.read_namespaced_pod(pod, namespace).spec
    return spec.node_name if spec else None


def running_on(core: client.CoreV1Api, namespace: str, pod: str, node: str) -> bool | None:
    """True once the pod runs on `node` (a probe for `wait_for`)."""
    found = core.read_namespaced_pod(pod, namespace)
    on_node = found.spec is not None and found.spec.node_name == node
    return True if on_node and found.status is not None and found.status.phase == "Running" else None


def gone(core: client.CoreV1Api, namespace: str, pod: str) -> bool | None:
    """True once the pod is deleted (a probe for `wait_for`)."""
    try:
        core.read_namespaced_pod(pod, namespace)
    except ApiException as exc:
        if exc.status == 404:
            return True
        raise
    return None


def api_for_kubeconfig(path: Path) -> Any:
    """An ApiClient acting as the kubeconfig's user, e.g. a non-admin ServiceAccount (callers close it)."""
    return config.new_client_from_config(config_file=str(path))


def processes_mentioning(text: str) -> list[str]:
    """Command lines of live processes that contain ``text`` (a zombie's command line is empty):
    how a test sees that what a dev cluster started in a directory is gone."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if text.encode() in cmdline:
                found.append(cmdline.replace(b"\0", b" ").decode(errors="replace"))
    return found
