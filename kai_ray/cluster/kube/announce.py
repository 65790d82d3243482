"""The Events that announce a cycle's direct binds: one per PodGroup, or one per queue in a burst.

KAI writes a `Scheduled` Event on every pod it places, one API write per pod, which in a burst of
thousands of pods costs the API server as much as the binds themselves.  With
`BindMode.DIRECT` a cycle announces its binds per PodGroup instead (the unit a user submitted),
and when more PodGroups than `BURST_PODGROUPS` were bound in one cycle, per queue: a burst is
never announced pod by pod.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from kai_ray.api.constants import DEFAULT_NAMESPACE, QUEUE_API_VERSION
from kai_ray.cluster.kube.apply import pod_key
from kai_ray.cluster.kube.calls import split_job_key
from kai_ray.cluster.kube.events import EventWriter, ObjectRef
from kai_ray.cluster.kube.status import PodGroupRef
from kai_ray.engine.plan import Bind, Plan

__all__ = ["BURST_PODGROUPS", "announce_binds"]

BURST_PODGROUPS = 20
"""More PodGroups bound in one cycle than this are announced per queue."""
_NODES_NAMED = 5


def announce_binds(
    events: EventWriter,
    plan: Plan,
    bound: Collection[str],
    podgroups: Mapping[str, PodGroupRef],
    queue_of: Mapping[str, str],
) -> int:
    """Record the Events for the plan's binds that were carried out (`bound`: "namespace/pod");
    `queue_of` maps job keys to queues.  Returns how many Events were queued."""
    by_job: dict[str, list[Bind]] = {}
    for bind in plan.binds:
        if pod_key(bind) in bound:
            by_job.setdefault(bind.job, []).append(bind)
    if len(by_job) <= BURST_PODGROUPS:
        for job, binds in sorted(by_job.items()):
            namespace, name = split_job_key(job)
            ref = podgroups.get(job)
            target = ObjectRef.podgroup(namespace, name, ref.uid if ref is not None else "")
            events.record(target, "Normal", "Scheduled", _placed(binds))
        return len(by_job)
    by_queue: dict[str, list[str]] = {}
    for job in by_job:
        by_queue.setdefault(queue_of.get(job, ""), []).append(job)
    for queue, jobs in sorted(by_queue.items()):
        pods = sum(len(by_job[job]) for job in jobs)
        message = f"Bound {pods} pods of {len(jobs)} PodGroups in one cycle (announced per queue in a burst)"
        events.record(
            ObjectRef("Queue", DEFAULT_NAMESPACE, queue, "", QUEUE_API_VERSION),
            "Normal",
            "Scheduled",
            message,
        )
    return len(by_queue)


def _placed(binds: list[Bind]) -> str:
    nodes = sorted({bind.node for bind in binds})
    named = ", ".join(nodes[:_NODES_NAMED])
    more = f" and {len(nodes) - _NODES_NAMED} more" if len(nodes) > _NODES_NAMED else ""
    pods = "pod" if len(binds) == 1 else "pods"
    return (
        f"Bound {len(binds)} {pods} to node {named}{more}"
        if len(nodes) == 1
        else f"Bound {len(binds)} {pods} to nodes {named}{more}"
    )
