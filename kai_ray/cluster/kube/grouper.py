"""Give every plain kai-scheduler pod a PodGroup, as KAI's podgrouper does for a bare pod.

The scheduler only schedules PodGroups, so a pod submitted on its own needs
one before it can run.  The PodGroup is the one `kai_ray.convert.bare_pods`
derives (KAI's default grouper rule, the same the simulator uses), created on
the cluster; the pod is then annotated with `pod-group-name`.

Scope: every pod without `pod-group-name` gets its own PodGroup, whatever
owns it; pods whose author named a PodGroup join it, and
`kai.scheduler/skip-podgrouper: "true"` opts a pod out. Owner-aware grouping
(one PodGroup per batch Job, Ray cluster, ...) belongs to the workload
adapters, which annotate pods before this ever sees them unannotated.

Idempotent: an existing PodGroup (409, or already in the cache) is reused,
and the pod annotation is a merge patch. Both results are written through
to the cache so the next snapshot already shows the pod in its group.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError

from kai_ray.api import Pod
from kai_ray.api.constants import (
    BUILTIN_PRIORITY_CLASSES,
    POD_GROUP_NAME_ANNOTATION,
    SKIP_PODGROUPER_ANNOTATION,
)
from kai_ray.cluster.kube.cache import RESOURCES, ClusterCache
from kai_ray.cluster.kube.status import (
    MERGE_PATCH,
    EventWriter,
    ObjectRef,
    api_error_message,
    run_bounded,
)
from kai_ray.convert import bare_pod_group, bare_pod_group_wire

__all__ = ["PODGROUPER_WARNING", "GroupingResult", "ensure_pod_groups"]

log = logging.getLogger(__name__)

PODGROUPER_WARNING = "PodGrouperWarning"
"""KAI's event reason when a pod cannot be grouped (spec/kubernetes-api.md §13.3)."""


@dataclass
class GroupingResult:
    """What one `ensure_pod_groups` pass did, by "namespace/name"."""

    created: list[str] = field(default_factory=list)
    """PodGroups created."""
    annotated: list[str] = field(default_factory=list)
    """Pods given a `pod-group-name`."""
    failed: list[str] = field(default_factory=list)
    """Pods left ungrouped this time (an event says why when the API refused the PodGroup)."""


def ensure_pod_groups(
    api: Any, cache: ClusterCache, recorder: EventWriter | None = None, *, concurrency: int = 16
) -> GroupingResult:
    """Create the missing PodGroups and annotate their pods; safe to call every cycle.

    Pods are handled independently with up to `concurrency` API calls in flight:
    a burst of new pods costs two round trips each, not two in sequence per pod.
    """
    grouper = _Grouper(api, cache, recorder or EventWriter(api, component=cache.scheduler_name))
    pods = [pod for pod in cache.objects("Pod") if _needs_group(pod)]
    run_bounded([functools.partial(grouper.group, pod) for pod in pods], concurrency)
    return grouper.result


class _Grouper:
    def __init__(self, api: Any, cache: ClusterCache, recorder: EventWriter) -> None:
        self.custom = client.CustomObjectsApi(api)
        self.core = client.CoreV1Api(api)
        self.cache = cache
        self.recorder = recorder
        # KAI's four classes count as existing, as in the translation of PodGroups (`Priorities`).
        cluster_classes = {str(pc["metadata"]["name"]) for pc in cache.objects("PriorityClass")}
        self.classes = set(BUILTIN_PRIORITY_CLASSES) | cluster_classes
        self.result = GroupingResult()  # list.append is atomic, so threads share it safely

    def group(self, pod: dict[str, Any]) -> None:
        """Never raises (`run_bounded`'s contract): a pod that fails is retried on the next pass."""
        meta = pod["metadata"]
        where = f"{meta['namespace']}/{meta['name']}"
        try:
            self._group(pod, where)
        except Exception as error:  # connection loss and the like
            log.warning("cannot group pod %s: %s", where, api_error_message(error))
            self.result.failed.append(where)

    def _group(self, pod: dict[str, Any], where: str) -> None:
        meta = pod["metadata"]
        try:
            group = bare_pod_group(Pod.model_validate(pod), self.classes)
        except ValidationError as error:
            _warn(
                self.recorder, pod, f"cannot read the pod to group it: {error.error_count()} invalid field(s)"
            )
            self.result.failed.append(where)
            return
        name = group.metadata.name
        if self.cache.get("PodGroup", meta["namespace"], name) is None:
            created = _create(self.custom, self.cache, self.recorder, pod, bare_pod_group_wire(group))
            if created is None:
                self.result.failed.append(where)
                return
            if created:
                self.result.created.append(f"{meta['namespace']}/{name}")
        if _annotate(self.core, self.cache, pod, name):
            self.result.annotated.append(where)
        else:
            self.result.failed.append(where)


def _needs_group(pod: Mapping[str, Any]) -> bool:
    """Unannotated, not opted out, and still wanting to run (terminating or finished pods do not)."""
    meta = pod.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    phase = (pod.get("status") or {}).get("phase")
    return (
        POD_GROUP_NAME_ANNOTATION not in annotations
        and annotations.get(SKIP_PODGROUPER_ANNOTATION) != "true"
        and meta.get("deletionTimestamp") is None
        and phase not in ("Succeeded", "Failed")
    )


def _create(
    custom: Any, cache: ClusterCache, recorder: EventWriter, pod: dict[str, Any], body: dict[str, Any]
) -> bool | None:
    """True if created, False if it already existed, None if the API refused (event on the pod)."""
    resource = RESOURCES["PodGroup"]
    namespace = body["metadata"]["namespace"]
    try:
        created = custom.create_namespaced_custom_object(
            resource.group, resource.version, namespace, resource.plural, body
        )
    except ApiException as error:
        if error.status == 409:
            return False
        if error.status is not None and 400 <= error.status < 500:  # e.g. a name too long: tell the user
            _warn(
                recorder,
                pod,
                f"cannot create PodGroup {body['metadata']['name']}: {api_error_message(error)}",
            )
        else:
            log.warning("cannot create PodGroup %s/%s: %s", namespace, body["metadata"]["name"], error)
        return None
    cache.observe("PodGroup", created)
    return True


def _annotate(core: Any, cache: ClusterCache, pod: dict[str, Any], group: str) -> bool:
    meta = pod["metadata"]
    # The uid makes the patch fail (422) rather than annotate a new pod that reuses the name.
    patch = {"metadata": {"uid": meta["uid"], "annotations": {POD_GROUP_NAME_ANNOTATION: group}}}
    try:
        response = core.patch_namespaced_pod(
            meta["name"], meta["namespace"], patch, _content_type=MERGE_PATCH, _preload_content=False
        )
    except ApiException as error:
        if error.status not in (404, 409, 422):  # the pod is gone or replaced: it needs no group
            log.warning("cannot annotate pod %s/%s: %s", meta["namespace"], meta["name"], error)
        return False
    cache.observe("Pod", _json(response))
    return True


def _json(response: Any) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(response.data)
    return data


def _warn(recorder: EventWriter, pod: Mapping[str, Any], message: str) -> None:
    """KAI's `PodGrouperWarning` on the pod, once per distinct message."""
    meta = pod["metadata"]
    ref = ObjectRef.pod(meta["namespace"], meta["name"], meta["uid"])
    try:
        recorder.record(ref, "Warning", PODGROUPER_WARNING, message, dedupe=True)
    except Exception as error:  # the pod stays ungrouped and is retried next pass anyway
        log.warning("cannot record event on %s: %s", ref, api_error_message(error))
