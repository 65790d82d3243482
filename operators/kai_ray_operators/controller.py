"""KAI's podgrouper as a pass of the scheduling loop, over the scheduler's informer cache.

Each pass plans every pod of ours that has no PodGroup yet, and re-plans a linked pod when
its labels, annotations, owners or spec changed (not its status or node), and, when its last
plan read other objects (owners, PodGroups, PriorityClasses), once that plan is
`refresh_seconds` old, so a workload whose spec changed (a Ray worker group scaled, a new gang
size) reaches its PodGroup without a read per pod per cycle (KAI re-plans on every pod event).
A plan that read nothing but the pod (a bare pod linked to its PodGroup) is never re-planned on
the timer: re-planning every linked pod was most of an idle cycle's CPU at 10,000 pods.  Planning
is pure (`plan_pod`) over a `ClusterReader`; pods of one workload share one
PodGroup, which is created or brought up to date once per pass (§1.6), then
each pod is linked to it (`pod-group-name`, leaf SubGroup label).  A pod that
cannot be grouped gets a `PodGrouperWarning` Event and stays ungrouped: it is
never scheduled under a guessed PodGroup, and every other pod goes on.

A pass plans at most `max_pods` pods and leaves the rest for the next (`GroupingResult.left`):
the passes run beside the scheduling cycles (`kai_ray.server.grouping_passes`), and a bounded
pass lets the pods it grouped be scheduled while a burst is still being grouped.
"""

from __future__ import annotations

import functools
import itertools
import json
import logging
import threading
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any, Final, cast

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kai_ray.api.constants import POD_GROUP_NAME_ANNOTATION
from kai_ray.cluster.kube.cache import ClusterCache
from kai_ray.cluster.kube.calls import MERGE_PATCH, api_error_message, run_bounded
from kai_ray.cluster.kube.events import EventWriter, ObjectRef
from kai_ray.cluster.kube.grouping import PODGROUPER_WARNING, GroupingResult
from kai_ray.cluster.kube.reduced import reduce_pod
from kai_ray.cluster.kube.resources import RESOURCES
from kai_ray_operators.cluster_reader import ClusterReader, ReadTrace
from kai_ray_operators.config import GroupingConfig
from kai_ray_operators.errors import GroupingError
from kai_ray_operators.fields import KubeObject, annotations_of
from kai_ray_operators.pipeline import PodPlan, plan_pod
from kai_ray_operators.wire import build_pod_group, merge_pod_group

__all__ = ["PodGroupController"]

log = logging.getLogger(__name__)

_PODGROUP = RESOURCES["PodGroup"]

PodKey = tuple[str, str]

DEFAULT_MAX_PODS: Final = 200
"""Pods one pass plans at most: 400 API writes (a PodGroup and a pod patch each), one to two
seconds on a 2-core dev cluster, so a pod created during a burst waits a pass or two for its
PodGroup (500 took up to five seconds with the API server's audit log on)."""


@dataclass
class _Planned:
    pod: KubeObject
    plan: PodPlan


@dataclass
class _PlanRecord:
    """What a pod's last plan depended on."""

    inputs: int | None
    """`_plan_inputs` of the pod as planned (as linked, once the link is written); None when
    unknown, so that any change of the pod re-plans it."""
    refresh_at: float | None
    """When to re-plan anyway: None when the plan read nothing but the pod."""


class PodGroupController:
    """Implements the scheduler's `PodGrouper`; one per process (it remembers what it planned)."""

    def __init__(
        self,
        api: Any,
        config: GroupingConfig | None = None,
        *,
        concurrency: int = 16,
        refresh_seconds: float = 30.0,
        max_pods: int = DEFAULT_MAX_PODS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._api = api
        self._config = config or GroupingConfig()
        self._custom = client.CustomObjectsApi(api)
        self._core = client.CoreV1Api(api)
        self._concurrency = concurrency
        self._refresh = refresh_seconds
        self._max_pods = max_pods
        self._clock = clock
        self._reader: ClusterReader | None = None
        self._plans: dict[PodKey, _PlanRecord] = {}
        self._unlinked: set[PodKey] = set()
        """Pods seen without a PodGroup: planned again every pass until one is linked."""
        self._deferred: set[PodKey] = set()
        """Pods the last pass left for the next (it plans at most `max_pods`)."""
        self._generation: int | None = None
        """The cache generation the last pass read its changes up to."""
        self._lock = threading.Lock()

    # ---------------------------------------------------------------- the PodGrouper protocol
    def group(self, cache: ClusterCache, events: EventWriter) -> GroupingResult:
        reader = self._reader_for(cache)
        reader.prune()
        candidates, left = self._candidates(cache)
        result = GroupingResult(left=left)
        planned: list[_Planned] = []
        for pod in candidates:
            try:
                with reader.tracing() as trace:
                    plan = plan_pod(reader, self._config, pod)
            except GroupingError as error:
                if not (pod.get("metadata") or {}).get("deletionTimestamp"):  # KAI: a leaving pod needs none
                    self._refuse(pod, str(error), events, result)
                self._retry_later(pod)
                continue
            except (KeyError, TypeError, ValueError, AttributeError) as error:
                # A shape no plugin expected is a bug of ours, but only this pod pays for it.
                log.exception("grouping pod %s/%s failed", *_pod_key(pod), extra={"repeat_key": "bug"})
                self._refuse(pod, f"cannot group this pod: {type(error).__name__}: {error}", events, result)
                self._retry_later(pod)
                continue
            self._mark_planned(pod, trace)
            if plan is not None:
                planned.append(_Planned(pod, plan))
                for notice in plan.notices:
                    self._warn(pod, notice, events)
                    result.noticed.append(("/".join(_pod_key(pod)), notice))
        outcomes = self._write_pod_groups(cache, planned, result)
        links = []
        for item in planned:
            refused = outcomes.get(_key_of(item.plan))
            if refused is not None:
                self._retry_later(item.pod)
                self._refuse(item.pod, refused, events, result)
            elif item.plan.pod_patch is not None:
                links.append(functools.partial(self._link, cache, item, result))
        run_bounded(links, self._concurrency)
        return result

    def forget(self, pods: Collection[tuple[str, str]]) -> None:
        with self._lock:
            for key in [k for k in self._plans if k not in pods]:
                del self._plans[key]
            self._unlinked = {key for key in self._unlinked if key in pods}
            self._deferred = {key for key in self._deferred if key in pods}

    def tracked(self) -> dict[str, int]:
        with self._lock:
            planned = len(self._plans)
        return {
            "podgrouper_planned": planned,
            "podgrouper_reads": self._reader.tracked() if self._reader else 0,
        }

    # ---------------------------------------------------------------- planning
    def _candidates(self, cache: ClusterCache) -> tuple[list[KubeObject], int]:
        """The pods this pass plans, at most `max_pods`, and how many due ones it leaves for the
        next: those still without a PodGroup, those whose plan inputs changed since their last
        plan, those whose plan is due for a refresh, and those the last pass left.

        Why not every cached pod: parsing each one every cycle to find the few that need work
        cost more than the cycle at tens of thousands of pods (issue 12).  Why this order: pods
        never planned come first, then the others, and within each the namespaces take turns
        (each in name order), so a burst of 20,000 pods in one namespace does not keep a pod
        created after it in another waiting for every pass of the burst, and pods whose plan
        keeps failing never crowd out new ones (issue 35).
        """
        changes = cache.changes(self._generation, ["Pod"])
        self._generation = changes.generation
        now = self._clock()
        changed = {key for key, item in changes.changed.get("Pod", {}).items() if item is not None}
        with self._lock:
            changed |= self._deferred
            due = set(self._unlinked)
            due |= {k for k, r in self._plans.items() if r.refresh_at is not None and r.refresh_at <= now}
            fresh = {key for key in due | changed if key not in self._plans}
        order = [*_in_turns(fresh), *_in_turns((due | changed) - fresh)]
        pods: list[KubeObject] = []
        for position, key in enumerate(order):
            if len(pods) == self._max_pods:
                with self._lock:
                    self._deferred = set(order[position:])
                return pods, len(order) - position
            pod = cache.get("Pod", *key)
            with self._lock:
                if pod is None or POD_GROUP_NAME_ANNOTATION in annotations_of(pod):
                    self._unlinked.discard(key)
                else:
                    self._unlinked.add(key)
                    due.add(key)
                record = self._plans.get(key)
            if pod is None:
                continue
            if key not in due and record is not None and record.inputs == _plan_inputs(pod):
                continue  # its status or node moved, which no plan reads
            pods.append(pod)
        with self._lock:
            self._deferred = set()
        return pods, 0

    def _reader_for(self, cache: ClusterCache) -> ClusterReader:
        if self._reader is None:
            self._reader = ClusterReader(self._api, cache, clock=self._clock)
        return self._reader

    def _mark_planned(self, pod: KubeObject, trace: ReadTrace) -> None:
        refresh_at = self._clock() + self._refresh if trace.reads else None
        with self._lock:
            self._plans[_pod_key(pod)] = _PlanRecord(_plan_inputs(pod), refresh_at)

    def _retry_later(self, pod: KubeObject) -> None:
        """A pod whose plan or PodGroup failed is planned again once `refresh_seconds` pass, or as
        soon as it changes (its inputs are unknown); never every pass, each failing the same way."""
        key = _pod_key(pod)
        with self._lock:
            self._plans[key] = _PlanRecord(None, self._clock() + self._refresh)

    def _refuse(self, pod: KubeObject, reason: str, events: EventWriter, result: GroupingResult) -> None:
        result.failed.append(("/".join(_pod_key(pod)), reason))
        self._warn(pod, reason, events)

    def _warn(self, pod: KubeObject, reason: str, events: EventWriter) -> None:
        """KAI's `PodGrouperWarning` on the pod, once per distinct message."""
        namespace, name = _pod_key(pod)
        uid = str((pod.get("metadata") or {}).get("uid") or "")
        try:
            events.record(
                ObjectRef.pod(namespace, name, uid), "Warning", PODGROUPER_WARNING, reason, dedupe=True
            )
        except Exception as error:  # best effort: the next pass says it again
            log.warning("cannot record event on pod %s/%s: %s", namespace, name, api_error_message(error))

    # ---------------------------------------------------------------- writing
    def _write_pod_groups(
        self, cache: ClusterCache, planned: list[_Planned], result: GroupingResult
    ) -> dict[tuple[str, str], str | None]:
        """Create or update each planned PodGroup once: per key, None when it is now as desired,
        else why the API server refused it.  Connection loss and `NotLeader` propagate: the
        whole pass ends, as a scheduling cycle does, and the next one starts over."""
        desired: dict[tuple[str, str], dict[str, Any]] = {}
        for item in planned:
            # The last pod's plan wins, as KAI's podgrouper ends on the last pod event it handles.
            desired[_key_of(item.plan)] = build_pod_group(item.plan.metadata)
        outcomes: dict[tuple[str, str], str | None] = {}
        lock = threading.Lock()

        def write(key: tuple[str, str], body: dict[str, Any]) -> None:
            outcome = self._apply(cache, key, body, result)
            with lock:
                outcomes[key] = outcome

        run_bounded(
            [functools.partial(write, key, body) for key, body in sorted(desired.items())], self._concurrency
        )
        return outcomes

    def _apply(
        self, cache: ClusterCache, key: tuple[str, str], body: dict[str, Any], result: GroupingResult
    ) -> str | None:
        namespace, name = key
        existing: dict[str, Any] | None = cache.get("PodGroup", namespace, name)
        if existing is None:
            try:
                created = cast(
                    dict[str, Any],
                    self._custom.create_namespaced_custom_object(
                        _PODGROUP.group, _PODGROUP.version, namespace, _PODGROUP.plural, body
                    ),
                )
            except ApiException as error:
                if error.status != 409:
                    return f"cannot create PodGroup {namespace}/{name}: {api_error_message(error)}"
                existing = cast(  # made meanwhile, or by a replica whose cache we have not seen
                    dict[str, Any],
                    self._custom.get_namespaced_custom_object(
                        _PODGROUP.group, _PODGROUP.version, namespace, _PODGROUP.plural, name
                    ),
                )
            else:
                cache.observe("PodGroup", created)
                result.created.append(f"{namespace}/{name}")
                return None
        update = merge_pod_group(existing, body, self._config)
        if not update.changed:
            return None
        try:
            replaced = cast(
                dict[str, Any],
                self._custom.replace_namespaced_custom_object(
                    _PODGROUP.group, _PODGROUP.version, namespace, _PODGROUP.plural, name, update.pod_group
                ),
            )
        except ApiException as error:
            if error.status == 409:  # changed meanwhile: the pods keep their link, the next pass merges
                return None
            return f"cannot update PodGroup {namespace}/{name}: {api_error_message(error)}"
        cache.observe("PodGroup", replaced)
        result.updated.append(f"{namespace}/{name}")
        return None

    def _link(self, cache: ClusterCache, item: _Planned, result: GroupingResult) -> None:
        namespace, name = _pod_key(item.pod)
        patch: Mapping[str, Any] = item.plan.pod_patch or {}
        meta = dict(patch.get("metadata") or {})
        # The uid makes the patch fail rather than link a new pod that reuses the name.
        meta["uid"] = (item.pod.get("metadata") or {}).get("uid")
        try:
            response: Any = self._core.patch_namespaced_pod(
                name,
                namespace,
                {**patch, "metadata": meta},
                _content_type=MERGE_PATCH,
                _preload_content=False,
            )
        except ApiException as error:
            if error.status not in (404, 409, 422):  # gone or replaced: it needs no group
                log.warning("cannot link pod %s/%s: %s", namespace, name, api_error_message(error))
            return
        linked = cast(dict[str, Any], json.loads(response.data))
        cache.observe("Pod", linked)
        with self._lock:
            self._unlinked.discard((namespace, name))
            record = self._plans.get((namespace, name))
            if record is not None:  # the link is this plan's own doing, not a change to re-plan for
                record.inputs = _plan_inputs(reduce_pod(linked))  # the pod as the cache keeps it
        result.annotated.append(f"{namespace}/{name}")


def _plan_inputs(pod: KubeObject) -> int:
    """A digest of what a plan can read of its pod: labels, annotations, owners and spec, but
    not its node (binding changes nothing of its PodGroup), status or resourceVersion."""
    meta = pod.get("metadata") or {}
    spec = {k: v for k, v in (pod.get("spec") or {}).items() if k != "nodeName"}
    read = [meta.get("labels"), meta.get("annotations"), meta.get("ownerReferences"), spec]
    return hash(json.dumps(read, sort_keys=True, separators=(",", ":")))


def _in_turns(keys: Collection[PodKey]) -> list[PodKey]:
    """`keys` with the namespaces taking turns, each namespace's pods in name order."""
    by_namespace: dict[str, list[PodKey]] = {}
    for key in sorted(keys):
        by_namespace.setdefault(key[0], []).append(key)
    return [key for turn in itertools.zip_longest(*by_namespace.values()) for key in turn if key is not None]


def _pod_key(pod: KubeObject) -> tuple[str, str]:
    meta = pod.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


def _key_of(plan: PodPlan) -> tuple[str, str]:
    return plan.metadata.namespace, plan.metadata.name
