"""Direct binds are announced per PodGroup, and per queue in a burst, never pod by pod."""

from __future__ import annotations

from typing import Any

import pytest

from kai_ray.cluster.kube.announce import BURST_PODGROUPS, announce_binds
from kai_ray.cluster.kube.events import ObjectRef
from kai_ray.cluster.kube.status import PodGroupRef
from kai_ray.engine.plan import Bind, Plan

pytestmark = pytest.mark.unit


class Recorded:
    """Stands in for the EventWriter: keeps what would have been written."""

    def __init__(self) -> None:
        self.events: list[tuple[ObjectRef, str, str]] = []

    def record(self, ref: ObjectRef, event_type: str, reason: str, message: str, **_: Any) -> bool:
        self.events.append((ref, reason, message))
        return True


def binds(job: str, nodes: list[str]) -> list[Bind]:
    return [Bind(job, f"{job.split('/')[1]}-{i}", node, (), 1.0, "allocate") for i, node in enumerate(nodes)]


def test_a_gang_bound_in_one_cycle_gets_one_event_on_its_podgroup() -> None:
    plan = Plan(binds=[*binds("ns/train", ["n1", "n1", "n2"]), *binds("ns/other", ["n3"])])
    events = Recorded()
    refs = {"ns/train": PodGroupRef("ns", "train", uid="pg-uid")}
    done = {"ns/train-0", "ns/train-1", "ns/train-2"}  # "other" was not bound after all
    assert announce_binds(events, plan, done, refs, {}) == 1
    [(ref, reason, message)] = events.events
    assert (ref.kind, ref.namespace, ref.name, ref.uid, reason) == (
        "PodGroup",
        "ns",
        "train",
        "pg-uid",
        "Scheduled",
    )
    assert message == "Bound 3 pods to nodes n1, n2"


def test_a_burst_is_announced_once_per_queue() -> None:
    jobs = [f"ns/job-{i}" for i in range(BURST_PODGROUPS + 5)]
    plan = Plan(binds=[bind for job in jobs for bind in binds(job, ["n1"])])
    queue_of = {job: "team-a" if i % 2 else "team-b" for i, job in enumerate(jobs)}
    events = Recorded()
    done = {f"ns/{job.split('/')[1]}-0" for job in jobs}
    assert announce_binds(events, plan, done, {}, queue_of) == 2
    assert [(ref.kind, ref.name) for ref, _, _ in events.events] == [("Queue", "team-a"), ("Queue", "team-b")]
    assert events.events[0][2].startswith("Bound 12 pods of 12 PodGroups in one cycle")
