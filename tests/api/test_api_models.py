"""The API models read KAI-style manifests with KAI's field names and defaults."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from kai_ray.api import BindRequest, Node, Pod, PodGroup, PriorityClass, Queue, QueueResource, Topology
from kai_ray.api import constants as c

pytestmark = pytest.mark.unit


def parse(text: str) -> Any:
    return yaml.safe_load(text)


def test_reads_the_hand_written_podgroup_example_of_the_spec() -> None:
    group = PodGroup.model_validate(
        parse("""
apiVersion: scheduling.run.ai/v2alpha2
kind: PodGroup
metadata: {name: trio, namespace: team-a}
spec:
  queue: default-queue
  priorityClassName: train
  minSubGroup: 2
  subGroups:
  - {name: head, minMember: 1}
  - {name: workers, minMember: 2,
     topologyConstraint: {topology: cluster-topology, requiredTopologyLevel: topology.kubernetes.io/rack}}
""")
    )
    spec = group.spec
    assert (spec.queue, spec.priority_class_name, spec.min_sub_group, spec.min_member) == (
        "default-queue",
        "train",
        2,
        None,
    )
    assert [(g.name, g.min_member, g.parent) for g in spec.sub_groups] == [
        ("head", 1, None),
        ("workers", 2, None),
    ]
    constraint = spec.sub_groups[1].topology_constraint
    assert constraint is not None
    assert (constraint.topology, constraint.required_topology_level) == (
        "cluster-topology",
        "topology.kubernetes.io/rack",
    )


def test_reads_the_topology_example_of_the_spec() -> None:
    topology = Topology.model_validate(
        parse("""
apiVersion: kai.scheduler/v1alpha1
kind: Topology
metadata: {name: cluster-topology}
spec:
  levels:
  - nodeLabel: cloud.provider.com/topology-block
  - nodeLabel: cloud.provider.com/topology-rack
    alias: rack
  - nodeLabel: kubernetes.io/hostname
""")
    )
    assert [(lv.node_label, lv.alias) for lv in topology.spec.levels] == [
        ("cloud.provider.com/topology-block", None),
        ("cloud.provider.com/topology-rack", "rack"),
        ("kubernetes.io/hostname", None),
    ]


def test_queue_defaults_follow_kai_including_the_zero_limit() -> None:
    queue = Queue.model_validate(
        parse("""
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata: {name: team-a}
spec:
  parentQueue: research
  preemptMinRuntime: 20s
  resources:
    gpu: {quota: 8}
""")
    )
    assert queue.spec.priority == c.DEFAULT_QUEUE_PRIORITY
    assert queue.spec.resources.gpu == QueueResource(quota=8, limit=0, over_quota_weight=0)
    assert queue.spec.resources.cpu == QueueResource()
    assert queue.spec.preempt_min_runtime == "20s"


def test_models_write_camel_case_wire_names() -> None:
    resource = QueueResource(quota=1, limit=-1, over_quota_weight=2)
    assert resource.model_dump() == {"quota": 1.0, "limit": -1.0, "overQuotaWeight": 2.0}


def test_bind_request_uses_kai_capitalised_names_and_knows_when_it_failed() -> None:
    request = BindRequest.model_validate(
        parse("""
apiVersion: scheduling.run.ai/v1alpha2
kind: BindRequest
metadata: {name: p, namespace: team-a, labels: {selected-node: n1}}
spec:
  podName: p
  selectedNode: n1
  receivedResourceType: Fraction
  receivedGPU: {count: 1, portion: "0.50"}
  selectedGPUGroups: [gpu-group-1]
  backoffLimit: 2
status: {phase: Failed, failedAttempts: 1}
""")
    )
    assert request.spec.received_gpu is not None
    assert request.spec.received_gpu.portion == "0.50"
    assert request.spec.selected_gpu_groups == ["gpu-group-1"]
    assert not request.failed
    request.status.failed_attempts = 2
    assert request.failed


def test_core_objects_keep_fields_we_do_not_model() -> None:
    pod = Pod.model_validate(
        parse("""
apiVersion: v1
kind: Pod
metadata: {name: p, namespace: team-a, labels: {kai.scheduler/queue: team-a}}
spec:
  schedulerName: kai-scheduler
  volumes: [{name: data, emptyDir: {}}]
  containers:
  - name: main
    image: busybox
    resources: {requests: {cpu: 500m, memory: 1Gi}, limits: {nvidia.com/gpu: 1}}
""")
    )
    assert pod.spec.scheduler_name == c.SCHEDULER_NAME
    assert pod.spec.containers[0].resources.limits == {c.RESOURCE_GPU: "1"}
    # As objects are written back (only what was set): the volume types kai-ray reads stay absent.
    assert pod.model_dump(exclude_unset=True)["spec"]["volumes"] == [{"name": "data", "emptyDir": {}}]


def test_node_and_priority_class() -> None:
    node = Node.model_validate(
        parse("""
apiVersion: v1
kind: Node
metadata: {name: n1, labels: {nvidia.com/gpu.memory: "81920"}}
spec:
  taints: [{key: gpu, value: "true", effect: NoSchedule}]
status:
  allocatable: {cpu: "64", nvidia.com/gpu: "8"}
  conditions: [{type: Ready, status: "True"}]
""")
    )
    assert node.spec.taints[0].effect == "NoSchedule"
    assert node.status.allocatable[c.RESOURCE_GPU] == "8"
    high = PriorityClass.model_validate(
        parse("{apiVersion: scheduling.k8s.io/v1, kind: PriorityClass, metadata: {name: high}, value: 1000}")
    )
    assert (high.value, high.global_default) == (1000, False)


def test_builtin_priority_classes() -> None:
    assert c.BUILTIN_PRIORITY_CLASSES == {
        "train": 50,
        "build-preemptible": 75,
        "build": 100,
        "inference": 125,
    }
