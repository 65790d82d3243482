"""Carrying out a `Plan` on a real cluster: BindRequests, evictions, pipelined Events.

KAI's scheduler never binds a pod itself: it creates a ``BindRequest``
(``scheduling.run.ai/v1alpha2``, named after the pod, owned by it) and a
separate binder does the ``pods/binding`` call (spec/kubernetes-api.md §4,
scheduling.md §2.2).  We keep that split, which is also what makes "never bind
twice" hold across scheduler restarts: the BindRequest name is the pod name, so
the API server itself refuses a second request for a pod (409), and a pod that
already has ``spec.nodeName`` is never given one.

Evictions go through the Eviction API (``policy/v1``), so graceful termination
and PodDisruptionBudgets apply.  This is stricter than KAI, which deletes victims
outright (§12 step 7): an eviction a budget refuses (429) is not forced, the
victim stays this cycle, and the refusal is returned (`BlockedEviction`) so the
PodGroup that needed the room can say which budget stopped it.  Each evicted
pod gets an ``Evict`` Event on its PodGroup naming the engine's reason, and the
PodGroup's ``kai.scheduler/last-eviction-timestamp`` is set (it restarts the
preemption-delay window, §3.7), with the other clocks the engine keeps on PodGroups between
cycles (`job_marks`: a gang's start, when it fell below its minimum).  Pipelined pods only
get a ``Pipelined`` Event: nothing is reserved for them.

A pod with delayed claims (unbound claims of a `WaitForFirstConsumer` class) has each annotated
with ``volume.kubernetes.io/selected-node`` before it gets its BindRequest or is bound directly,
as kube-scheduler's VolumeBinding does before binding: the claim's provisioner then provisions
the volume on the node the pod will run on.  A claim that cannot be annotated (the API refuses,
or does not answer in time) keeps its pod unbound this cycle; the next cycle plans it again.

Every call is independent, so they run with bounded concurrency; failures are
collected in `ApplyResult` with the object named, never raised, because one
bad pod must not stop the rest of the cycle.
"""

from __future__ import annotations

import functools
import json
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from kubernetes import client
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from kai_ray.api.constants import (
    DEFAULT_NODE_POOL,
    SCHEDULER_NAME,
    SCHEDULING_GROUP,
    SELECTED_NODE_ANNOTATION,
)
from kai_ray.cluster.kube.bind_requests import bind_request_body
from kai_ray.cluster.kube.calls import (
    BINDREQUEST_VERSION,
    BINDREQUESTS,
    MERGE_PATCH,
    PODGROUP_VERSION,
    PODGROUPS,
    CustomObjects,
    OperationError,
    api_error_message,
    discard,
    run_bounded,
    split_job_key,
)
from kai_ray.cluster.kube.events import EventWriter, ObjectRef
from kai_ray.cluster.kube.failures import API_FAILURES
from kai_ray.cluster.kube.job_marks import JobMarks, job_marks, newly_stale
from kai_ray.cluster.kube.status import Tally
from kai_ray.engine.plan import Bind, Eviction, Plan
from kai_ray.model.objects import ClusterState

if TYPE_CHECKING:
    from kai_ray.cluster.kube.binder import BindOutcome

__all__ = [
    "ApplyResult",
    "BlockedEviction",
    "apply_plan",
    "delayed_claims",
    "pod_key",
]

_Item = TypeVar("_Item", Bind, Eviction)

CLAIM_PATCH_TIMEOUT_SECONDS = 5.0
"""How long annotating one delayed claim may take before its pod's bind waits for the next cycle."""

PodKey = tuple[str, str]
"""(namespace, pod name)."""
Lookup = Callable[[str, str, str], dict[str, Any] | None]
"""(kind, namespace, name) → the cached object, or None (`ClusterCache.get`)."""


@dataclass(frozen=True)
class BlockedEviction:
    """An eviction the API server refused because of a PodDisruptionBudget (HTTP 429)."""

    eviction: Eviction
    message: str
    """The server's explanation, which names the budget."""

    @property
    def pod(self) -> str:
        return pod_key(self.eviction)


@dataclass
class ApplyResult(Tally):
    """What `apply_plan` did.  Objects are named ``"namespace/pod"``.

    ``skipped`` holds binds deliberately not made, with why (already bound, a BindRequest
    already exists, pod gone or terminating, not ours).  ``errors`` holds API failures.
    """

    bind_requests: list[str] = field(default_factory=list)
    bound: list[str] = field(default_factory=list)
    """Pods bound directly (`BindMode.DIRECT`), no BindRequest made."""
    bind_outcomes: list[BindOutcome] = field(default_factory=list)
    """Every direct bind attempt's outcome, failed ones too: the bind metrics (attempts, their
    latency, failures) count them as they count the binder's."""
    skipped: list[tuple[str, str]] = field(default_factory=list)
    evicted: list[str] = field(default_factory=list)
    blocked: list[BlockedEviction] = field(default_factory=list)
    already_gone: list[str] = field(default_factory=list)
    pipelined: list[str] = field(default_factory=list)
    events: int = 0


class DirectBinder(Protocol):
    """Carries out one BindRequest body without the object existing (`Binder.bind_now`)."""

    def bind_now(self, request: Mapping[str, Any]) -> BindOutcome: ...


class _Applier:
    def __init__(
        self,
        api: ApiClient,
        scheduler_name: str,
        recorder: EventWriter,
        node_pool_label: tuple[str, str] | None,
        pod_uids: Mapping[tuple[str, str], str] | None,
        scheduled_events: bool,
        backoff_limit: int | None,
        result: ApplyResult,
        direct: DirectBinder | None,
        observe: Callable[[str, Mapping[str, Any]], bool] | None,
        claims: Mapping[PodKey, tuple[str, ...]],
        lookup: Lookup | None,
    ) -> None:
        self.direct = direct
        self.observe = observe
        self.claims = claims
        self.lookup = lookup
        self.core = client.CoreV1Api(api)
        self.custom = CustomObjects(api)
        self.scheduler_name = scheduler_name
        self.recorder = recorder
        self.node_pool_label = node_pool_label
        self.pod_uids = pod_uids
        self.scheduled_events = scheduled_events
        self.backoff_limit = backoff_limit
        self.result = result
        self._podgroup_uids: dict[tuple[str, str], str] = {}
        self._lock = threading.Lock()

    def guard(self, operation: str, obj: str, call: Callable[[], None]) -> Callable[[], None]:
        """``call`` with anything it raises (a lost connection, a bug) recorded, not raised."""

        def guarded() -> None:
            try:
                call()
            except Exception as exc:
                self.result.add("errors", OperationError(operation, obj, api_error_message(exc)))

        return guarded

    # ---- binds --------------------------------------------------------------------------

    def bind(self, bind: Bind) -> None:
        namespace, _ = split_job_key(bind.job)
        who = f"{namespace}/{bind.task}"
        known_uid = self.pod_uids.get((namespace, bind.task)) if self.pod_uids is not None else None
        labels: dict[str, str] = {}
        if known_uid:
            # Trust the snapshot: a pod bound or replaced since is refused by the API server
            # when the binder posts the binding (uid precondition, "already assigned").
            uid = known_uid
        else:
            try:
                pod = self.core.read_namespaced_pod(bind.task, namespace)
            except ApiException as exc:
                if exc.status == 404:
                    self.result.add("skipped", (who, "pod no longer exists"))
                else:
                    self.result.add("errors", OperationError("read", f"Pod {who}", api_error_message(exc)))
                return
            uid = (pod.metadata.uid if pod.metadata else None) or ""
            labels = dict((pod.metadata.labels if pod.metadata else None) or {})
            why = self._refusal(bind, pod)
            if why is not None:
                self.result.add("skipped", (who, why))
                return
        if not self._select_node(namespace, bind.task, bind.node):
            return
        body = bind_request_body(
            bind, uid, node_pool_label=self.node_pool_label, backoff_limit=self.backoff_limit
        )
        if self.direct is not None:
            outcome = self.direct.bind_now(body)
            self.result.add("bind_outcomes", outcome)
            if outcome.phase == "Succeeded":
                self.result.add("bound", who)
            else:
                self.result.add("errors", OperationError("bind", f"Pod {who}", outcome.reason))
            return
        try:
            response: Any = self.custom.api.create_namespaced_custom_object(
                SCHEDULING_GROUP, BINDREQUEST_VERSION, namespace, BINDREQUESTS, body, _preload_content=False
            )
            if self.observe is not None:
                # The binder reads BindRequests from the cache: it must find this one at once.
                self.observe("BindRequest", json.loads(response.data))
            discard(response)
        except ApiException as exc:
            if exc.status == 409:
                self.result.add("skipped", (who, self._existing_request(namespace, bind.task)))
                return
            message = api_error_message(exc)
            self.result.add("errors", OperationError("create", f"BindRequest {who}", message))
            self._event(
                ObjectRef.pod(namespace, bind.task, uid),
                "Warning",
                "FailedBinding",
                f"Failed to bind pod {who} to node {bind.node}. {message}",
            )
            return
        self.result.add("bind_requests", who)
        if self.node_pool_label is not None:
            self._label_pod_node_pool(namespace, bind.task, labels)
        if self.scheduled_events:
            pool = self.node_pool_label[1] if self.node_pool_label else DEFAULT_NODE_POOL
            self._event(
                ObjectRef.pod(namespace, bind.task, uid),
                "Normal",
                "Scheduled",
                f"Successfully assigned pod {who} to node {bind.node} at node-pool {pool}",
            )

    def _select_node(self, namespace: str, pod: str, node: str) -> bool:
        """Annotate each delayed claim of the pod with its node (see the module docstring); False
        when one could not be, with the error recorded: the pod is then not bound this cycle."""
        for claim in self.claims.get((namespace, pod), ()):
            cached = self.lookup("PersistentVolumeClaim", namespace, claim) if self.lookup else None
            annotations = ((cached or {}).get("metadata") or {}).get("annotations") or {}
            if annotations.get(SELECTED_NODE_ANNOTATION) == node:
                continue
            body = {"metadata": {"annotations": {SELECTED_NODE_ANNOTATION: node}}}
            try:
                response: Any = self.core.patch_namespaced_persistent_volume_claim(
                    claim,
                    namespace,
                    body,
                    _content_type=MERGE_PATCH,
                    _preload_content=False,
                    _request_timeout=CLAIM_PATCH_TIMEOUT_SECONDS,
                )
            except API_FAILURES as exc:
                message = f"{api_error_message(exc)}; pod {namespace}/{pod} is not bound to {node} this cycle"
                self.result.add(
                    "errors",
                    OperationError("annotate", f"PersistentVolumeClaim {namespace}/{claim}", message),
                )
                return False
            if self.observe is not None:
                # The next cycle must read the claim as selected for this node, as it now is.
                self.observe("PersistentVolumeClaim", json.loads(response.data))
            discard(response)
        return True

    def _refusal(self, bind: Bind, pod: client.V1Pod) -> str | None:
        """Why this pod must not get a BindRequest now, or None when it may."""
        meta, spec = pod.metadata, pod.spec
        if spec is None or meta is None:
            return "pod has no spec"
        if spec.node_name:
            if spec.node_name == bind.node:
                return f"already bound to {spec.node_name}"
            return f"already bound to {spec.node_name}; refusing to bind it to {bind.node}"
        if meta.deletion_timestamp is not None:
            return "pod is terminating"
        if (spec.scheduler_name or "default-scheduler") != self.scheduler_name:
            return f"pod belongs to scheduler {spec.scheduler_name!r}, not {self.scheduler_name!r}"
        return None

    def _existing_request(self, namespace: str, name: str) -> str:
        """Describe the BindRequest that made creation fail with 409 (best effort)."""
        try:
            existing = self.custom.get(BINDREQUESTS, BINDREQUEST_VERSION, namespace, name)
        except ApiException:
            return "a BindRequest for this pod already exists"
        spec = existing.get("spec") or {}
        phase = (existing.get("status") or {}).get("phase") or "not yet processed"
        return f"a BindRequest for this pod already exists (node {spec.get('selectedNode')}, phase {phase})"

    def _label_pod_node_pool(self, namespace: str, pod: str, labels: dict[str, str]) -> None:
        assert self.node_pool_label is not None
        key, value = self.node_pool_label
        if labels.get(key) == value:
            return
        try:
            discard(
                self.core.patch_namespaced_pod(
                    pod,
                    namespace,
                    {"metadata": {"labels": {key: value}}},
                    _content_type="application/merge-patch+json",
                    _preload_content=False,
                )
            )
        except ApiException as exc:
            self.result.add(
                "errors", OperationError("label", f"Pod {namespace}/{pod}", api_error_message(exc))
            )

    # ---- evictions ----------------------------------------------------------------------

    def evict(self, eviction: Eviction, gang_size: int) -> None:
        namespace, podgroup = split_job_key(eviction.job)
        who = f"{namespace}/{eviction.task}"
        uid = self.pod_uids.get((namespace, eviction.task)) if self.pod_uids is not None else None
        options = client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=uid) if uid else None)
        body = client.V1Eviction(
            metadata=client.V1ObjectMeta(name=eviction.task, namespace=namespace), delete_options=options
        )
        try:
            # The response is a Status, which the generated client cannot decode as V1Eviction.
            discard(
                self.core.create_namespaced_pod_eviction(
                    eviction.task, namespace, body, _preload_content=False
                )
            )
        except ApiException as exc:
            if exc.status == 404:
                self.result.add("already_gone", who)
            elif exc.status == 429:
                # A PodDisruptionBudget says no: the victim stays, never forced with a DELETE.
                self.result.add("blocked", BlockedEviction(eviction, _budget_message(exc)))
            else:  # 409 (the pod was replaced: uid precondition), 5xx: the next cycle decides again
                self.result.add("errors", OperationError("evict", f"Pod {who}", api_error_message(exc)))
            return
        self.result.add("evicted", who)
        message = f"Pod {who} was evicted: {eviction.reason}"
        annotations = {
            "num-evicted-pods": str(gang_size),
            "evictor-action-type": eviction.reason.cause.value,
        }
        self._event(
            ObjectRef.podgroup(namespace, podgroup, self._podgroup_uid(namespace, podgroup)),
            "Normal",
            "Evict",
            message,
            annotations=annotations,
        )

    def mark(self, job: str, marks: JobMarks, stale: str | None) -> None:
        """Write the clocks the engine keeps with the job (`job_marks`) on its PodGroup, and tell
        the cache at once, so the next cycle reads them even before the watch shows the change;
        `stale`: the `StaleJob` words when the gang fell below its minimum this cycle."""
        namespace, name = split_job_key(job)
        patch = {"metadata": {"annotations": marks}}
        try:
            stored = self.custom.patch(PODGROUPS, PODGROUP_VERSION, namespace, name, patch)
        except ApiException as exc:
            if exc.status != 404:
                self.result.add(
                    "errors",
                    OperationError("annotate", f"PodGroup {namespace}/{name}", api_error_message(exc)),
                )
            return
        if self.observe is not None:
            self.observe("PodGroup", stored)
        if stale is not None:
            uid = str((stored.get("metadata") or {}).get("uid") or "")
            self._event(ObjectRef.podgroup(namespace, name, uid), "Normal", "StaleJob", stale)

    def _podgroup_uid(self, namespace: str, name: str) -> str:
        """The PodGroup's uid (so the Event shows in ``kubectl describe``), read once per apply."""
        key = (namespace, name)
        with self._lock:
            if key in self._podgroup_uids:
                return self._podgroup_uids[key]
        try:
            uid = str(
                (self.custom.get(PODGROUPS, PODGROUP_VERSION, namespace, name).get("metadata") or {})["uid"]
            )
        except (ApiException, KeyError):
            uid = ""
        with self._lock:
            self._podgroup_uids[key] = uid
        return uid

    # ---- pipelined ----------------------------------------------------------------------

    def pipeline(self, bind: Bind) -> None:
        namespace, _ = split_job_key(bind.job)
        who = f"{namespace}/{bind.task}"
        uid = self.pod_uids.get((namespace, bind.task), "") if self.pod_uids is not None else ""
        message = (
            f"Pod {who} is pipelined to node {bind.node}: it starts once the resources it was given "
            "are released"
        )
        self._event(ObjectRef.pod(namespace, bind.task, uid), "Normal", "Pipelined", message, dedupe=True)
        self.result.add("pipelined", who)

    # ---- events -------------------------------------------------------------------------

    def _event(
        self,
        ref: ObjectRef,
        event_type: str,
        reason: str,
        message: str,
        *,
        annotations: Mapping[str, str] | None = None,
        dedupe: bool = False,
    ) -> bool:
        try:
            sent = self.recorder.record(
                ref, event_type, reason, message, annotations=annotations, dedupe=dedupe
            )
        except ApiException as exc:
            self.result.add(
                "errors", OperationError(f"record {reason} Event on", str(ref), api_error_message(exc))
            )
            return False
        if sent:
            self.result.add("events", 1)
        return sent


def apply_plan(
    api: ApiClient,
    plan: Plan,
    *,
    scheduler_name: str = SCHEDULER_NAME,
    concurrency: int = 16,
    recorder: EventWriter | None = None,
    pod_uids: Mapping[tuple[str, str], str] | None = None,
    node_pool_label: tuple[str, str] | None = None,
    scheduled_events: bool = True,
    backoff_limit: int | None = None,
    direct: DirectBinder | None = None,
    observe: Callable[[str, Mapping[str, Any]], bool] | None = None,
    claims: Mapping[PodKey, tuple[str, ...]] | None = None,
    lookup: Lookup | None = None,
) -> ApplyResult:
    """Create BindRequests, evict victims and announce pipelined pods; never raises for API errors.

    Order matters only between evictions and binds: evictions run first so a victim's
    graceful termination starts as early as possible (its capacity is what pipelined pods
    wait for); binds of the same plan target free capacity and run right after.

    ``recorder`` shares Event dedupe memory across cycles (the serve loop passes its own; a
    fresh one is used otherwise).

    ``pod_uids`` ((namespace, pod) → uid, from the snapshot) is the fast path for a
    cache-backed scheduler: binds skip reading the pod (one API call per bind instead of
    two) and evictions carry a uid precondition.  A pod bound or recreated since the
    snapshot then still gets a BindRequest, which the binder fails (it checks the pod's node
    and uid before binding, and the API server refuses to bind a pod twice); without
    ``pod_uids`` each pod is read and such binds are skipped here.

    ``node_pool_label`` (key, value) is the shard's partition label, added to BindRequests
    and pods as KAI does for partitioned shards; leave None for the default shard.
    ``scheduled_events`` writes KAI's ``Scheduled`` Event per bind (one extra API call per
    pod; benchmarks may turn it off).  ``backoff_limit`` goes into every BindRequest
    (see `bind_request_body`).  ``direct`` (`BindMode.DIRECT`) binds each pod at once through
    it instead of creating a BindRequest, and writes no per-pod Event (the caller announces
    the cycle's binds per PodGroup).  ``observe(kind, object)`` (`ClusterCache.observe`) is
    told of every BindRequest created, so a binder reading the cache finds it at once, and of
    every claim annotated.  ``claims`` ((namespace, pod) → its delayed claims, `delayed_claims`)
    are annotated with the pod's node before it is bound; ``lookup`` (`ClusterCache.get`) says
    which already are, so those are not written again.
    """
    result = ApplyResult()
    applier = _Applier(
        api,
        scheduler_name,
        recorder or EventWriter(api, component=scheduler_name),
        node_pool_label,
        pod_uids,
        scheduled_events,
        backoff_limit,
        result,
        direct,
        observe,
        claims or {},
        lookup,
    )
    gang_sizes = Counter(e.job for e in plan.evictions)
    evictions = _unique(plan.evictions)
    run_bounded(
        [
            applier.guard("evict", _pod_name(e), functools.partial(applier.evict, e, gang_sizes[e.job]))
            for e in evictions
        ],
        concurrency,
    )
    done = set(result.evicted)
    evicted_jobs = {e.job for e in evictions if pod_key(e) in done}
    stale = newly_stale(plan)
    run_bounded(
        [
            applier.guard(
                "annotate", f"PodGroup {job}", functools.partial(applier.mark, job, marks, stale.get(job))
            )
            for job, marks in sorted(job_marks(plan, evicted_jobs, time.time()).items())
        ],
        concurrency,
    )
    run_bounded(
        [
            applier.guard("bind", _pod_name(b), functools.partial(applier.bind, b))
            for b in _unique(plan.binds)
        ],
        concurrency,
    )
    run_bounded(
        [
            applier.guard("announce pipelined", _pod_name(b), functools.partial(applier.pipeline, b))
            for b in _unique(plan.pipelined)
        ],
        concurrency,
    )
    return result


def delayed_claims(state: ClusterState, binds: Iterable[Bind]) -> dict[PodKey, tuple[str, ...]]:
    """(namespace, pod) → the delayed claims (`TaskSpec.delayed_claims`) of each pod these binds
    place, read from the state the plan was made from; only the binds' jobs are looked at."""
    jobs = {bind.job for bind in binds}
    if not jobs:
        return {}
    return {
        (job.namespace, task.name): task.delayed_claims
        for job in state.jobs
        if job.key in jobs
        for task in job.tasks
        if task.delayed_claims
    }


def _budget_message(exc: ApiException) -> str:
    """The refusal's cause, which names the budget ("The disruption budget web needs 2 healthy pods ...")."""
    try:
        status = json.loads(exc.body or "{}")
    except (TypeError, ValueError):
        return api_error_message(exc)
    causes = ((status.get("details") or {}).get("causes") or []) if isinstance(status, dict) else []
    messages = [str(c.get("message")) for c in causes if isinstance(c, dict) and c.get("message")]
    return "; ".join(messages) or api_error_message(exc)


def pod_key(item: Bind | Eviction) -> str:
    """``"namespace/pod"``, how results name pods."""
    namespace, _ = split_job_key(item.job)
    return f"{namespace}/{item.task}"


def _pod_name(item: Bind | Eviction) -> str:
    return f"Pod {pod_key(item)}"


def _unique(items: list[_Item]) -> list[_Item]:
    """Drop a repeated (job, task) — a plan never has one, but a double bind must be impossible."""
    seen: set[tuple[str, str]] = set()
    out: list[_Item] = []
    for item in items:
        key = (item.job, item.task)
        if key not in seen:
            seen.add(key)
            out.append(item)
    return out
