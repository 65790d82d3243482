"""A fallback pod runner for the dev cluster when kwok was not built: plays the kubelet for fake nodes.

Run as ``python -m kai_ray.devcluster.fake_kubelet KUBECONFIG``.
"""

from __future__ import annotations

import functools
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, cast

from kai_ray.devcluster.processes import LOOPBACK
from kai_ray.devcluster.seeding import FAKE_NODE_ANNOTATION, is_status

# --------------------------------------------------------------------------------------------
# Fake kubelet (fallback pod runner when kwok is unavailable)


def run_fake_kubelet(
    kubeconfig: Path,
    stop_event: threading.Event | None = None,
    node_annotation: tuple[str, str] = FAKE_NODE_ANNOTATION,
) -> None:
    """Play the kubelet for fake nodes until ``stop_event`` is set (or forever).

    Nodes carrying ``node_annotation`` are marked Ready; pods bound to them get status
    Running/Ready; pods on them that are being deleted are removed with grace 0, as a kubelet
    would once the containers stopped.  It list+watches pods with resourceVersion and re-lists
    on 410 Gone or any error, so an apiserver hiccup only delays it.
    """
    from kubernetes import client, config, watch

    # The client's loader and watch helpers are untyped; objects are handled as Any below.
    api: Any = cast(Any, config).new_client_from_config(config_file=str(kubeconfig))
    core: Any = client.CoreV1Api(api)
    fake_nodes: set[str] = set()

    def refresh_nodes() -> None:
        key, value = node_annotation
        current: set[str] = set()
        for node in core.list_node().items:
            if (node.metadata.annotations or {}).get(key) != value:
                continue
            current.add(node.metadata.name)
            conditions = (node.status.conditions if node.status else None) or []
            if not any(c.type == "Ready" and c.status == "True" for c in conditions):
                _ignore_gone(
                    functools.partial(core.patch_node_status, node.metadata.name, _ready_node_status())
                )
        fake_nodes.clear()
        fake_nodes.update(current)

    def handle(pod: Any) -> None:
        node = pod.spec.node_name
        if not node:
            return
        if node not in fake_nodes:
            refresh_nodes()  # a node created after the last refresh
            if node not in fake_nodes:
                return
        name, namespace = pod.metadata.name, pod.metadata.namespace
        if pod.metadata.deletion_timestamp is not None:
            options = client.V1DeleteOptions(
                grace_period_seconds=0, preconditions=client.V1Preconditions(uid=pod.metadata.uid)
            )
            _ignore_gone(lambda: core.delete_namespaced_pod(name, namespace, body=options))
        elif (pod.status.phase or "Pending") == "Pending":
            _ignore_gone(lambda: core.patch_namespaced_pod_status(name, namespace, _running_status(pod)))

    while stop_event is None or not stop_event.is_set():
        try:
            refresh_nodes()
            listing = core.list_pod_for_all_namespaces()
            for pod in listing.items:
                handle(pod)
            rv = listing.metadata.resource_version
            while stop_event is None or not stop_event.is_set():
                stream = (
                    cast(Any, watch)
                    .Watch()
                    .stream(core.list_pod_for_all_namespaces, resource_version=rv, timeout_seconds=2)
                )
                for event in stream:
                    obj = event["object"]
                    rv = obj.metadata.resource_version
                    if event["type"] in ("ADDED", "MODIFIED"):
                        handle(obj)
                refresh_nodes()  # pick up new fake nodes even when no pod event arrives
        except Exception:  # 410 Gone, connection loss, ...: back off briefly and re-list
            if stop_event is None:
                time.sleep(0.5)
            else:
                stop_event.wait(0.5)
    api.close()


def _ignore_gone(call: Callable[[], object]) -> None:
    """Run an API call whose target may have vanished meanwhile (404) or changed (409)."""
    from kubernetes.client.exceptions import ApiException

    try:
        call()
    except ApiException as exc:
        if not is_status(exc, 404, 409):
            raise


def _ready_node_status() -> dict[str, Any]:
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return {
        "status": {
            "phase": "Running",
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "fake kubelet",
                    "lastHeartbeatTime": now,
                    "lastTransitionTime": now,
                }
            ],
        }
    }


def _running_status(pod: Any) -> dict[str, Any]:
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    containers = [
        {
            "name": c.name,
            "image": c.image or "fake",
            "imageID": "",
            "ready": True,
            "restartCount": 0,
            "started": True,
            "state": {"running": {"startedAt": now}},
        }
        for c in pod.spec.containers or []
    ]
    conditions = [
        {"type": t, "status": "True", "lastTransitionTime": now}
        for t in ("PodScheduled", "Initialized", "ContainersReady", "Ready")
    ]
    return {
        "status": {
            "phase": "Running",
            "conditions": conditions,
            "containerStatuses": containers,
            "hostIP": LOOPBACK,
            "podIP": "10.0.0.1",
            "startTime": now,
        }
    }


def _main(argv: Sequence[str]) -> int:
    if len(argv) == 1:
        run_fake_kubelet(Path(argv[0]))
        return 0
    print("usage: python -m kai_ray.devcluster.fake_kubelet KUBECONFIG", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
