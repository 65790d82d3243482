"""The BindRequest KAI's scheduler creates for a bind, in wire form: what the applier writes and
the binder reads back (spec/kubernetes-api.md, BindRequest)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from kai_ray.api.constants import (
    BINDREQUEST_API_VERSION,
    SELECTED_NODE_LABEL,
)
from kai_ray.cluster.kube.calls import (
    split_job_key,
)
from kai_ray.engine.plan import Bind

if TYPE_CHECKING:
    pass


__all__ = ["POD_NAME_LABEL", "bind_request_body", "received_gpu"]

POD_NAME_LABEL = "pod-name"
"""KAI's scheduler also labels each BindRequest with its pod's name (pkg/scheduler/cache/cache.go)."""


_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def received_gpu(bind: Bind) -> tuple[str, int, str]:
    """(receivedResourceType, receivedGPU.count, receivedGPU.portion) for a bind, as KAI writes them.

    Shared GPUs (the engine gives them GPU groups) are ``Fraction``: one device per group,
    each with the same portion.  Whole GPUs are ``Regular`` with portion ``"1.00"``; no GPU
    is ``""`` with ``0`` / ``"0.00"`` (KAI formats the portion ``%.2f``, §4.2).
    """
    if bind.gpu_groups:
        count = len(bind.gpu_groups)
        return "Fraction", count, f"{bind.accepted_gpus / count:.2f}"
    if bind.accepted_gpus > 0:
        return "Regular", round(bind.accepted_gpus), "1.00"
    return "", 0, "0.00"


def bind_request_body(
    bind: Bind,
    pod_uid: str,
    *,
    node_pool_label: tuple[str, str] | None = None,
    backoff_limit: int | None = None,
) -> dict[str, Any]:
    """The BindRequest KAI's scheduler would create for this bind (wire form).

    Owned by the pod so it is garbage-collected with it; labelled with the selected node
    (the scheduler deletes requests for vanished nodes by it) and, in a partitioned shard,
    with the shard's node-pool label.  Label values that Kubernetes would reject (names
    longer than 63 characters) are left out rather than failing the request.
    ``backoff_limit`` is how often the binder may try (KAI's scheduler leaves it unset:
    one failure is final); after the last failure the scheduler deletes the request and
    the pod is scheduled again.
    """
    namespace, _ = split_job_key(bind.job)
    resource_type, count, portion = received_gpu(bind)
    labels = {POD_NAME_LABEL: bind.task, SELECTED_NODE_LABEL: bind.node}
    if node_pool_label is not None:
        labels[node_pool_label[0]] = node_pool_label[1]
    spec: dict[str, Any] = {
        "podName": bind.task,
        "selectedNode": bind.node,
        "receivedResourceType": resource_type,
        "receivedGPU": {"count": count, "portion": portion},
    }
    if bind.gpu_groups:
        spec["selectedGPUGroups"] = list(bind.gpu_groups)
    if backoff_limit is not None:
        spec["backoffLimit"] = backoff_limit
    return {
        "apiVersion": BINDREQUEST_API_VERSION,
        "kind": "BindRequest",
        "metadata": {
            "name": bind.task,
            "namespace": namespace,
            "labels": {k: v for k, v in labels.items() if len(v) <= 63 and _LABEL_VALUE.match(v)},
            "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": bind.task, "uid": pod_uid}],
        },
        "spec": spec,
    }
