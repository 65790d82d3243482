"""The slice of Kubernetes core objects the scheduler reads: Pod, Node, Namespace, PriorityClass.

These are read-mostly views over objects that carry much more (probes,
images ...); unknown fields are accepted and kept, so a dump from
`kubectl get -o yaml` loads unchanged.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from kai_ray.api._base import Condition, KubeModel, ObjectMeta, ResourceList
from kai_ray.api.references import EnvFromSource, EnvVar, Volume


class ResourceRequirements(KubeModel):
    requests: ResourceList = Field(default_factory=dict)
    limits: ResourceList = Field(default_factory=dict)


class ContainerPort(KubeModel):
    container_port: int = 0
    host_port: int = 0
    """0 (or absent): the port is not bound on the node."""
    protocol: str = "TCP"
    host_ip: str = Field(default="", alias="hostIP")


class Container(KubeModel):
    name: str = ""
    resources: ResourceRequirements = Field(default_factory=ResourceRequirements)
    ports: list[ContainerPort] = Field(default_factory=list)
    env: list[EnvVar] = Field(default_factory=list)
    env_from: list[EnvFromSource] = Field(default_factory=list)
    restart_policy: str | None = None
    """Only set on init containers; `Always` makes one a native sidecar."""


class NodeSelectorRequirement(KubeModel):
    key: str
    operator: str
    values: list[str] = Field(default_factory=list)


class NodeSelectorTerm(KubeModel):
    match_expressions: list[NodeSelectorRequirement] = Field(default_factory=list)
    match_fields: list[NodeSelectorRequirement] = Field(default_factory=list)


class NodeSelector(KubeModel):
    node_selector_terms: list[NodeSelectorTerm] = Field(default_factory=list)


class PreferredSchedulingTerm(KubeModel):
    weight: int
    preference: NodeSelectorTerm


class NodeAffinity(KubeModel):
    required_during_scheduling_ignored_during_execution: NodeSelector | None = None
    preferred_during_scheduling_ignored_during_execution: list[PreferredSchedulingTerm] = Field(
        default_factory=list
    )


class LabelSelectorRequirement(KubeModel):
    key: str
    operator: str
    values: list[str] = Field(default_factory=list)


class LabelSelector(KubeModel):
    """Absent and empty differ wherever a selector is optional: an empty one selects everything."""

    match_labels: dict[str, str] = Field(default_factory=dict)
    match_expressions: list[LabelSelectorRequirement] = Field(default_factory=list)


class PodAffinityTerm(KubeModel):
    label_selector: LabelSelector | None = None
    namespaces: list[str] = Field(default_factory=list)
    namespace_selector: LabelSelector | None = None
    topology_key: str = ""
    match_label_keys: list[str] = Field(default_factory=list)
    mismatch_label_keys: list[str] = Field(default_factory=list)


class WeightedPodAffinityTerm(KubeModel):
    weight: int
    pod_affinity_term: PodAffinityTerm


class PodAffinity(KubeModel):
    """The shape of both `podAffinity` and `podAntiAffinity`."""

    required_during_scheduling_ignored_during_execution: list[PodAffinityTerm] = Field(default_factory=list)
    preferred_during_scheduling_ignored_during_execution: list[WeightedPodAffinityTerm] = Field(
        default_factory=list
    )


class Affinity(KubeModel):
    node_affinity: NodeAffinity | None = None
    pod_affinity: PodAffinity | None = None
    pod_anti_affinity: PodAffinity | None = None


class TopologySpreadConstraint(KubeModel):
    """Policies stay None when absent: their defaults differ (`nodeAffinityPolicy` Honor,
    `nodeTaintsPolicy` Ignore), and the conversion applies them where it checks the values."""

    max_skew: int = 0
    topology_key: str = ""
    when_unsatisfiable: str = ""
    label_selector: LabelSelector | None = None
    min_domains: int | None = None
    node_affinity_policy: str | None = None
    node_taints_policy: str | None = None
    match_label_keys: list[str] = Field(default_factory=list)


class Toleration(KubeModel):
    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""
    toleration_seconds: int | None = None


class SchedulingGate(KubeModel):
    name: str


class PodSpec(KubeModel):
    scheduler_name: str = "default-scheduler"
    node_name: str = ""
    priority_class_name: str = ""
    containers: list[Container] = Field(default_factory=list)
    init_containers: list[Container] = Field(default_factory=list)
    overhead: ResourceList = Field(default_factory=dict)
    node_selector: dict[str, str] = Field(default_factory=dict)
    affinity: Affinity | None = None
    tolerations: list[Toleration] = Field(default_factory=list)
    scheduling_gates: list[SchedulingGate] = Field(default_factory=list)
    topology_spread_constraints: list[TopologySpreadConstraint] = Field(default_factory=list)
    host_network: bool = False
    volumes: list[Volume] = Field(default_factory=list)


class PodStatus(KubeModel):
    """Only the phase: no part of the scheduler reads a pod's conditions, and leaving them out
    keeps a condition written on a pending pod (ours, `PodScheduled=False`) from being a change
    to the scheduler's cache (`kai_ray.cluster.kube.reduced`)."""

    phase: str = "Pending"


class Pod(KubeModel):
    api_version: Literal["v1"] = "v1"
    kind: Literal["Pod"] = "Pod"
    metadata: ObjectMeta
    spec: PodSpec = Field(default_factory=PodSpec)
    status: PodStatus = Field(default_factory=PodStatus)


class Taint(KubeModel):
    key: str
    value: str = ""
    effect: str


class NodeSpec(KubeModel):
    taints: list[Taint] = Field(default_factory=list)
    unschedulable: bool = False


class NodeStatus(KubeModel):
    capacity: ResourceList = Field(default_factory=dict)
    allocatable: ResourceList = Field(default_factory=dict)
    conditions: list[Condition] = Field(default_factory=list)


class Node(KubeModel):
    api_version: Literal["v1"] = "v1"
    kind: Literal["Node"] = "Node"
    metadata: ObjectMeta
    spec: NodeSpec = Field(default_factory=NodeSpec)
    status: NodeStatus = Field(default_factory=NodeStatus)


class Namespace(KubeModel):
    api_version: Literal["v1"] = "v1"
    kind: Literal["Namespace"] = "Namespace"
    metadata: ObjectMeta


class PriorityClass(KubeModel):
    """Unlike most objects, `value` and `globalDefault` sit at the top level, not in a spec."""

    api_version: Literal["scheduling.k8s.io/v1"] = "scheduling.k8s.io/v1"
    kind: Literal["PriorityClass"] = "PriorityClass"
    metadata: ObjectMeta
    value: int
    global_default: bool = False
    preemption_policy: str | None = None
    description: str = ""
