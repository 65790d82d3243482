"""apps/v1 Deployment, ReplicaSet and StatefulSet, as kube-controller-manager creates their children.

- A Deployment makes one ReplicaSet, `<deployment>-<pod-template-hash>`, at
  full size: the steady state after a rollout. Kubernetes derives the hash from
  the pod template; so do we (a stable FNV-1a hash of its JSON, written in
  Kubernetes' safe alphabet), so a changed template names a new ReplicaSet,
  but the value differs from a cluster's.
- A ReplicaSet makes `spec.replicas` (default 1) pods `<replicaset>-<i>`,
  where Kubernetes appends five random characters instead of `i`.
- A StatefulSet makes pods `<statefulset>-<ordinal>` for `spec.replicas`
  (default 1) ordinals from `spec.ordinals.start` (default 0), labelled as the
  StatefulSet controller labels them. LeaderWorkerSet's worker StatefulSets
  start at ordinal 1.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping

from kai_ray_operators.expand.model import Child, Expanded, ExpansionContext, Source
from kai_ray_operators.expand.objects import (
    canonical_hash,
    count,
    new_object,
    new_pod,
    pod_template,
    template_with,
)
from kai_ray_operators.fields import KubeObject, labels_of, map_field, name

__all__ = ["expand_deployment", "expand_replica_set", "expand_stateful_set"]

POD_TEMPLATE_HASH_LABEL = "pod-template-hash"
STATEFULSET_POD_NAME_LABEL = "statefulset.kubernetes.io/pod-name"
POD_INDEX_LABEL = "apps.kubernetes.io/pod-index"
TEMPLATE = ("spec", "template")


def expand_deployment(context: ExpansionContext, deployment: KubeObject) -> Expanded:
    template = pod_template(deployment, *TEMPLATE)
    replicas = count(deployment, "spec", "replicas", default=1)
    template_hash = canonical_hash(template)
    hash_label = {POD_TEMPLATE_HASH_LABEL: template_hash}
    selector = copy.deepcopy(dict(map_field(deployment, "spec", "selector") or {}))
    match_labels = selector.get("matchLabels")
    selector["matchLabels"] = {**(match_labels if isinstance(match_labels, Mapping) else {}), **hash_label}
    replica_set = new_object(
        "apps/v1",
        "ReplicaSet",
        deployment,
        f"{name(deployment)}-{template_hash}",
        labels={**labels_of(template), **hash_label},
        spec={"replicas": replicas, "selector": selector, "template": template_with(template, hash_label)},
    )
    return Expanded([Child(replica_set, {"spec.template": Source("spec.template")})])


def expand_replica_set(context: ExpansionContext, replica_set: KubeObject) -> Expanded:
    pod_template(replica_set, *TEMPLATE)
    replicas = count(replica_set, "spec", "replicas", default=1)
    return Expanded(
        [Child(new_pod(replica_set, TEMPLATE, f"{name(replica_set)}-{i}")) for i in range(replicas)]
    )


def expand_stateful_set(context: ExpansionContext, stateful_set: KubeObject) -> Expanded:
    pod_template(stateful_set, *TEMPLATE)
    replicas = count(stateful_set, "spec", "replicas", default=1)
    start = count(stateful_set, "spec", "ordinals", "start", default=0)
    pods = []
    for ordinal in range(start, start + replicas):
        pod_name = f"{name(stateful_set)}-{ordinal}"
        labels = {STATEFULSET_POD_NAME_LABEL: pod_name, POD_INDEX_LABEL: str(ordinal)}
        pods.append(Child(new_pod(stateful_set, TEMPLATE, pod_name, labels)))
    return Expanded(pods)
