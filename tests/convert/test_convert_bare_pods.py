"""The one bare-pod grouping rule, shared by `serve`'s grouper and the simulator (issue 8, item 8)."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from manifest_builders import pod

from kai_ray.api import Pod, load_manifest_text
from kai_ray.convert import bare_pod_group, bare_pod_group_wire, cluster_from_manifest_set

pytestmark = pytest.mark.unit

CLASSES = {"train", "inference", "high"}


def group_of(labels: dict[str, str] | None = None, **overrides: Any) -> dict[str, Any]:
    body = pod("p", labels=labels or {}, **overrides.pop("spec", {}))
    body["metadata"].update(uid="u-1", **overrides)
    return bare_pod_group_wire(bare_pod_group(Pod.model_validate(body), CLASSES))


@pytest.mark.parametrize(
    ("labels", "queue"),
    [
        ({"kai.scheduler/queue": "q1", "project": "proj"}, "q1"),
        ({"project": "proj"}, "proj"),
        ({"project": "proj", "kai.scheduler/node-pool": "a100"}, "proj-a100"),
        ({}, "default-queue"),
    ],
)
def test_queue_from_label_then_project_then_default(labels: dict[str, str], queue: str) -> None:
    assert group_of(labels)["spec"]["queue"] == queue


def test_name_owner_and_copied_metadata() -> None:
    body = group_of({"team": "a"}, annotations={"user": "alice"})
    meta = body["metadata"]
    assert (body["apiVersion"], body["kind"]) == ("scheduling.run.ai/v2alpha2", "PodGroup")
    assert meta["name"] == "pg-p-u-1" and meta["namespace"] == "team-a"
    assert meta["ownerReferences"] == [{"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "u-1"}]
    assert meta["labels"] == {"team": "a"} and meta["annotations"]["user"] == "alice"
    assert "name: p" in meta["annotations"]["kai.scheduler/top-owner-metadata"]
    assert body["spec"] == {"minMember": 1, "queue": "default-queue", "priorityClassName": "train"}


@pytest.mark.parametrize(
    ("labels", "spec", "expected"),
    [
        ({"priorityClassName": "high"}, {}, "high"),
        ({}, {"priorityClassName": "inference"}, "inference"),
        ({"priorityClassName": "missing"}, {"priorityClassName": "inference"}, "train"),
        ({}, {}, "train"),
    ],
)
def test_priority_class_only_when_it_exists(
    labels: dict[str, str], spec: dict[str, str], expected: str
) -> None:
    assert group_of(labels, spec=spec)["spec"]["priorityClassName"] == expected


@pytest.mark.parametrize(
    ("annotations", "delay", "grace"),
    [
        ({"kai.scheduler/preemption-delay": "90s"}, "90s", None),
        ({"kai.scheduler/preemption-delay": "-5s"}, None, None),
        ({"kai.scheduler/preemption-delay": "soon"}, None, None),
        ({"kai.scheduler/staleness-grace-period": "-1s"}, None, "-1s"),
        ({"kai.scheduler/staleness-grace-period": "never"}, None, None),
    ],
)
def test_invalid_durations_are_ignored_as_kais_grouper_does(
    annotations: dict[str, str], delay: str | None, grace: str | None
) -> None:
    spec = group_of(annotations=annotations)["spec"]
    assert (spec.get("preemptionDelay"), spec.get("stalenessGracePeriod")) == (delay, grace)


@pytest.mark.parametrize(("value", "expected"), [("non-preemptible", "non-preemptible"), ("maybe", None)])
def test_preemptibility_label_only_when_valid(value: str, expected: str | None) -> None:
    assert group_of({"kai.scheduler/preemptibility": value})["spec"].get("preemptibility") == expected


def test_topology_annotations_become_the_constraint() -> None:
    annotations = {
        "kai.scheduler/topology": "cluster",
        "kai.scheduler/topology-required-placement": "rack",
    }
    constraint = group_of(annotations=annotations)["spec"]["topologyConstraint"]
    assert constraint == {"topology": "cluster", "requiredTopologyLevel": "rack"}


def test_the_simulator_schedules_a_bare_pod_under_that_podgroup() -> None:
    """Same rule: the simulator's implicit job has the queue, priority and timers of the PodGroup."""
    bare = pod(
        "solo",
        labels={"project": "proj", "priorityClassName": "inference"},
        annotations={"kai.scheduler/preemption-delay": "-3s", "kai.scheduler/staleness-grace-period": "2m"},
    )
    manifests = [
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": "inference"},
            "value": 125,
        },
        {
            "apiVersion": "scheduling.run.ai/v2",
            "kind": "Queue",
            "metadata": {"name": "proj"},
            "spec": {"resources": {}},
        },
        bare,
    ]
    loaded = load_manifest_text(yaml.safe_dump_all(manifests, sort_keys=False), "test.yaml")
    state, problems = cluster_from_manifest_set(loaded)
    assert problems == []
    (job,) = state.jobs
    assert (job.name, job.queue, job.priority, job.preemptible) == ("solo", "proj", 125, False)
    assert (job.preemption_delay, job.staleness_grace) == (None, 120)
