"""What the cache keeps of a pod that only occupies its node binds the pods placed beside it too
(its host ports, its pod (anti-)affinity), and such a pod is still counted when even that part is
what the models reject."""

from __future__ import annotations

from typing import Any

import pytest
from manifest_builders import node, pod, queue

from kai_ray.cluster.kube.cache import ClusterCache
from kai_ray.cluster.kube.snapshot import snapshot
from kai_ray.convert import occupancy_only
from kai_ray.model.objects import HeldPod, HostPort

pytestmark = pytest.mark.unit


def web(weight: Any = 10) -> dict[str, Any]:
    """Another scheduler's pod on n1, on the host's network, with a host port and preferred and
    required anti-affinity."""
    body = pod(
        "web", ns="other", gpus=1, labels={"app": "web"}, schedulerName="default-scheduler", nodeName="n1"
    )
    body["spec"]["containers"][0]["ports"] = [
        {"containerPort": 80, "hostPort": 8080, "name": "http"},
        {"containerPort": 9090},
    ]
    term = {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname"}
    body["spec"]["affinity"] = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [term],
            "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": weight, "podAffinityTerm": term}],
        }
    }
    body["spec"]["volumes"] = [{"name": "data", "emptyDir": {}}]
    body["spec"]["hostNetwork"] = True
    body["status"] = {"phase": "Running"}
    return body


def test_occupancy_keeps_ports_and_affinity_unless_told_not_to() -> None:
    full = web()
    reduced = occupancy_only(full)
    assert reduced["spec"]["affinity"] == full["spec"]["affinity"]
    assert reduced["spec"]["hostNetwork"] is True
    assert reduced["spec"]["containers"][0]["ports"] == full["spec"]["containers"][0]["ports"]
    assert "volumes" not in reduced["spec"]
    bare = occupancy_only(full, constraints=False)
    assert "affinity" not in bare["spec"] and "hostNetwork" not in bare["spec"]
    assert "ports" not in bare["spec"]["containers"][0]
    assert bare["spec"]["containers"][0]["resources"] == full["spec"]["containers"][0]["resources"]


def held_after(*objects: dict[str, Any]) -> tuple[list[HeldPod], list[str]]:
    """The held pods and the fields of the problems once the cache received these objects (pods
    as other schedulers')."""
    cache = ClusterCache(None)
    for number, obj in enumerate([queue("team-a"), node("n1"), *objects], start=1):
        obj["metadata"]["resourceVersion"] = str(number)
        cache.apply_event("ADDED", "ForeignPod" if obj["kind"] == "Pod" else obj["kind"], obj)
    state, problems = snapshot(cache, now=0.0)
    return state.held, [problem.field for problem in problems]


def test_a_foreign_pod_in_the_cache_keeps_its_ports_and_anti_affinity() -> None:
    (held,), problems = held_after(web())
    assert problems == []
    assert held.task.host_ports == (HostPort(8080), HostPort(9090))  # 9090 on the host's network
    assert held.task.pod_affinity is not None
    assert held.task.pod_affinity.required_anti[0].namespaces == {"other"}


def test_a_pod_whose_constraints_the_models_reject_still_occupies_its_node() -> None:
    (held,), problems = held_after(web(weight="heavy"))
    assert problems == [
        "spec.affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight"
    ]
    assert (held.key, held.task.gpu, held.task.host_ports, held.task.pod_affinity) == (
        "other/web",
        1,
        (),
        None,
    )
