"""LeaderWorkerSet (leaderworkerset.x-k8s.io/v1): a leader StatefulSet, and one worker StatefulSet per group.

As the LWS controller does: the leader StatefulSet `<lws>` has `spec.replicas`
(default 1) pods `<lws>-<group>` from `leaderTemplate` (the worker template
when there is none); for each group, a worker StatefulSet named after its
leader pod and owned by it, `size - 1` replicas from `workerTemplate` with
ordinals from 1, so workers are `<lws>-<group>-<worker>`. Both templates get
`leaderworkerset.sigs.k8s.io/name` and the `…/size` annotation; the leader
template `…/worker-index: "0"`, the worker template `…/group-index`. LWS's
pod webhook (`admit_pod`) then labels each leader with its group index and
each worker with its worker index, from the ordinal in the pod's name.
A size of 1 makes no worker StatefulSets.

Not modelled: under `startupPolicy: LeaderReady` the controller creates a
group's workers only once its leader is ready; here they exist from the
start. Rolling updates, exclusive placement and LWS's own subgroup labels.
"""

from __future__ import annotations

import re
from typing import Any

from kai_ray_operators.errors import InvalidWorkload, NotFound
from kai_ray_operators.expand.model import Child, Expanded, ExpansionContext, Source
from kai_ray_operators.expand.objects import count, new_object, pod_template, template_with
from kai_ray_operators.fields import (
    KubeObject,
    Step,
    describe,
    field_path,
    labels_of,
    map_field,
    name,
    namespace,
)
from kai_ray_operators.identity import stable_uid
from kai_ray_operators.plugins.lws import GROUP_INDEX_LABEL, SIZE_ANNOTATION, TEMPLATE, WORKER_INDEX_LABEL

__all__ = ["admit_pod", "expand_leader_worker_set"]

NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
_ORDINAL = re.compile(r".*-([0-9]+)")


def admit_pod(pod: dict[str, Any]) -> None:
    """LWS's pod webhook: a leader (worker index 0) learns its group index, a worker its worker index."""
    labels = labels_of(pod)
    match = _ORDINAL.fullmatch(name(pod))
    if NAME_LABEL not in labels or match is None:
        return
    key = GROUP_INDEX_LABEL if labels.get(WORKER_INDEX_LABEL) == "0" else WORKER_INDEX_LABEL
    pod["metadata"]["labels"] = {**labels, key: match.group(1)}


def _leader_pod(context: ExpansionContext, lws: KubeObject, group: int) -> KubeObject:
    """The leader pod owning a group's workers: the manifests' one, else the one its StatefulSet makes."""
    pod_name = f"{name(lws)}-{group}"
    try:
        return context.inputs.get("v1", "Pod", namespace(lws), pod_name)
    except NotFound:
        uid = stable_uid("v1", "Pod", namespace(lws), pod_name)
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": pod_name, "namespace": namespace(lws), "uid": uid},
        }


def expand_leader_worker_set(context: ExpansionContext, lws: KubeObject) -> Expanded:
    size = count(lws, *TEMPLATE, "size", default=0, minimum=1)
    if size == 0:
        raise InvalidWorkload(describe(lws), "a size is required", field_path((*TEMPLATE, "size")))
    groups = count(lws, "spec", "replicas", default=1)
    worker_path: tuple[Step, ...] = (*TEMPLATE, "workerTemplate")
    worker_template = pod_template(lws, *worker_path)
    leader_path = (
        (*TEMPLATE, "leaderTemplate")
        if map_field(lws, *TEMPLATE, "leaderTemplate") is not None
        else worker_path
    )
    leader_template = pod_template(lws, *leader_path)
    lws_label = {NAME_LABEL: name(lws)}
    size_annotation = {SIZE_ANNOTATION: str(size)}
    leaders = new_object(
        "apps/v1",
        "StatefulSet",
        lws,
        name(lws),
        labels=lws_label,
        spec={
            "replicas": groups,
            "template": template_with(
                leader_template, {**lws_label, WORKER_INDEX_LABEL: "0"}, size_annotation
            ),
        },
    )
    children = [Child(leaders, {"spec.template": Source(field_path(leader_path))})]
    if size == 1:
        return Expanded(children)
    for group in range(groups):
        labels = {**lws_label, GROUP_INDEX_LABEL: str(group)}
        leader = _leader_pod(context, lws, group)
        workers = new_object(
            "apps/v1",
            "StatefulSet",
            leader,
            name(leader),
            labels=labels,
            spec={
                "replicas": size - 1,
                "ordinals": {"start": 1},
                "template": template_with(worker_template, labels, size_annotation),
            },
        )
        children.append(Child(workers, {"spec.template": Source(field_path(worker_path))}))
    return Expanded(children)
