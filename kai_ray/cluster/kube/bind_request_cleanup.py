"""Delete the BindRequests that can never be carried out, so their pods are scheduled again.

A BindRequest is named after its pod, so while a failed one exists the pod can
get no other: the API server answers 409 to every new request and the pod
stays Pending forever.  KAI's scheduler therefore deletes, at every snapshot,
the requests that failed for good (`phase: Failed` with no retries left,
spec/kubernetes-api.md §4.3) and those whose selected node no longer exists;
the next cycle sees the pod Pending and places it again.  This does the same
from the informer cache, before the cycle takes its snapshot.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kai_ray.api.constants import SCHEDULING_GROUP
from kai_ray.cluster.kube.binder import bind_request_failed
from kai_ray.cluster.kube.cache import ClusterCache
from kai_ray.cluster.kube.calls import (
    BINDREQUEST_VERSION,
    BINDREQUESTS,
    OperationError,
    api_error_message,
    discard,
    run_bounded,
)
from kai_ray.cluster.kube.status import Tally

__all__ = ["CleanupResult", "delete_stale_bind_requests", "stale_bind_requests"]

log = logging.getLogger(__name__)


@dataclass
class CleanupResult(Tally):
    deleted: list[tuple[str, str]] = field(default_factory=list)
    """(``"namespace/name"``, why) of every BindRequest deleted."""


def stale_bind_requests(
    requests: Iterable[Mapping[str, Any]], nodes: Iterable[str]
) -> list[tuple[Mapping[str, Any], str]]:
    """The requests to delete, each with why: failed for good, or naming a node that is gone."""
    existing = set(nodes)
    stale = []
    for request in requests:
        if (request.get("metadata") or {}).get("deletionTimestamp"):
            continue
        node = str((request.get("spec") or {}).get("selectedNode") or "")
        if bind_request_failed(request):
            reason = str((request.get("status") or {}).get("reason") or "binding failed")
            stale.append((request, f"failed for good: {reason}"))
        elif node not in existing:
            stale.append((request, f"node {node!r} no longer exists"))
    return stale


def delete_stale_bind_requests(api: Any, cache: ClusterCache, *, concurrency: int = 16) -> CleanupResult:
    """Delete what `stale_bind_requests` finds in the cache; never raises for API errors.

    Nothing is deleted until the cache has listed both Nodes and BindRequests: a node list
    that failed would otherwise make every request look like one for a vanished node.
    """
    result = CleanupResult()
    if not (cache.synced("Node") and cache.synced("BindRequest")):
        return result
    # Unparsed, so only the requests are parsed: nodes are many and large, and only their names
    # matter here (parsing every node each cycle was a sixth of an idle cycle at 1,250 nodes).
    entries = cache.entries(["BindRequest", "Node"])
    requests = [json.loads(entry.text) for entry in entries.objects["BindRequest"]]
    if not requests:
        return result
    nodes = [entry.name for entry in entries.objects["Node"]]
    custom = client.CustomObjectsApi(api)
    calls = [
        functools.partial(_delete, custom, cache, request, why, result)
        for request, why in stale_bind_requests(requests, nodes)
    ]
    run_bounded(calls, concurrency)
    return result


def _delete(
    custom: Any, cache: ClusterCache, request: Mapping[str, Any], why: str, result: CleanupResult
) -> None:
    meta = request.get("metadata") or {}
    namespace, name = str(meta.get("namespace")), str(meta.get("name"))
    key = f"{namespace}/{name}"
    # The uid precondition: a request recreated meanwhile under the same name is not ours to delete.
    options = client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=meta.get("uid")))
    try:
        discard(
            custom.delete_namespaced_custom_object(
                SCHEDULING_GROUP,
                BINDREQUEST_VERSION,
                namespace,
                BINDREQUESTS,
                name,
                body=options,
                _preload_content=False,
            )
        )
    except ApiException as exc:
        if exc.status not in (404, 409):  # gone already, or replaced: nothing left to do
            result.add("errors", OperationError("delete", f"BindRequest {key}", api_error_message(exc)))
        return
    except Exception as exc:  # NotLeader, a lost connection: the next cycle tries again
        result.add("errors", OperationError("delete", f"BindRequest {key}", api_error_message(exc)))
        return
    cache.observe_deleted("BindRequest", request)
    result.add("deleted", (key, why))
    log.info("deleted BindRequest %s: %s; its pod will be scheduled again", key, why)
