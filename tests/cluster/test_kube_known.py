"""What the loop's writers know of pods, PodGroups and queues, kept from the cache's changes."""

from __future__ import annotations

import random
from typing import Any

import pytest
from manifest_builders import pod, podgroup, queue

from kai_ray.cluster.kube.cache import ClusterCache
from kai_ray.cluster.kube.known import KnownObjects
from kai_ray.cluster.kube.status import PodGroupRef

pytestmark = pytest.mark.unit

POOL_LABEL = "kai.scheduler/node-pool"


def stamped(obj: dict[str, Any], version: int, uid: str = "") -> dict[str, Any]:
    meta = {**obj["metadata"], "resourceVersion": str(version)} | ({"uid": uid} if uid else {})
    return {**obj, "metadata": meta}


def test_writers_see_each_change_and_forget_what_is_gone() -> None:
    cache = ClusterCache(None)
    known = KnownObjects(POOL_LABEL)
    stored = podgroup("g")
    stored["status"] = {"schedulingConditions": [{"type": "Unschedulable", "reason": "x"}]}
    named = queue("team-a", displayName="Team A")
    for version, (kind, obj, uid) in enumerate(
        [("PodGroup", stored, "pg-1"), ("Pod", pod("p", group="g"), "u-1"), ("Queue", named, "")], start=1
    ):
        cache.apply_event("ADDED", kind, stamped(obj, version, uid))
    known.refresh(cache)
    assert dict(known.pod_uids) == {("team-a", "p"): "u-1"}
    ref = known.podgroup_refs()["team-a/g"]
    assert (ref.uid, ref.scheduling_conditions) == ("pg-1", ({"type": "Unschedulable", "reason": "x"},))
    assert dict(ref.pod_uids) == {"p": "u-1"}
    assert known.display_names == {"team-a": "Team A"} and known.queue_names() == {"team-a"}
    assert ("Pod", "team-a", "p") in known and ("Queue", "default", "team-a") in known
    cache.apply_event("ADDED", "Pod", stamped(pod("q", group="g"), 10, "u-2"))
    cache.apply_event("DELETED", "Queue", stamped(named, 11))
    known.refresh(cache)
    assert dict(ref.pod_uids) == {"p": "u-1", "q": "u-2"}  # the PodGroup's pods, live
    assert known.queue_names() == set() and ("Queue", "default", "team-a") not in known
    cache.apply_event("DELETED", "Pod", stamped(pod("p"), 12))
    cache.apply_event("DELETED", "Pod", stamped(pod("q"), 13))
    cache.apply_event("DELETED", "PodGroup", stamped(stored, 14))
    known.refresh(cache)
    assert dict(known.pod_uids) == {} and known.podgroup_refs() == {}
    assert ("Pod", "team-a", "p") not in known and ("PodGroup", "team-a", "g") not in known


@pytest.mark.parametrize("seed", range(4))
def test_after_any_stream_of_changes_what_is_known_is_what_the_cache_holds(seed: int) -> None:
    rng = random.Random(seed)
    cache = ClusterCache(None)
    known = KnownObjects(POOL_LABEL)
    for version in range(1, 200):
        if rng.random() < 0.5:
            kind, obj = "Pod", pod(f"p{rng.randrange(8)}", ns=rng.choice(["a", "b"]))
        else:
            kind, obj = "PodGroup", podgroup(f"g{rng.randrange(4)}", ns=rng.choice(["a", "b"]))
        event = "DELETED" if rng.random() < 0.3 else "MODIFIED"
        cache.apply_event(event, kind, stamped(obj, version, uid=f"uid-{version}"))
        if rng.random() < 0.2:
            known.refresh(cache)
    known.refresh(cache)
    pods = {
        (p["metadata"]["namespace"], p["metadata"]["name"]): p["metadata"]["uid"]
        for p in cache.objects("Pod")
    }
    assert dict(known.pod_uids) == pods
    for group in cache.objects("PodGroup"):
        ref = PodGroupRef.from_object(group, POOL_LABEL)
        kept = known.podgroup_refs()[f"{ref.namespace}/{ref.name}"]
        assert (kept.uid, kept.namespace) == (ref.uid, ref.namespace)
        assert dict(kept.pod_uids) == {name: uid for (ns, name), uid in pods.items() if ns == ref.namespace}
    assert len(known.podgroup_refs()) == len(cache.objects("PodGroup"))
