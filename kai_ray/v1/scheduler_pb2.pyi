import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Preemptibility(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PREEMPTIBILITY_UNSPECIFIED: _ClassVar[Preemptibility]
    PREEMPTIBLE: _ClassVar[Preemptibility]
    NON_PREEMPTIBLE: _ClassVar[Preemptibility]

class WorkloadState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    WORKLOAD_STATE_UNSPECIFIED: _ClassVar[WorkloadState]
    PENDING: _ClassVar[WorkloadState]
    RUNNING: _ClassVar[WorkloadState]
    EVICTED: _ClassVar[WorkloadState]
    SUCCEEDED: _ClassVar[WorkloadState]
    FAILED: _ClassVar[WorkloadState]
    CANCELLED: _ClassVar[WorkloadState]
PREEMPTIBILITY_UNSPECIFIED: Preemptibility
PREEMPTIBLE: Preemptibility
NON_PREEMPTIBLE: Preemptibility
WORKLOAD_STATE_UNSPECIFIED: WorkloadState
PENDING: WorkloadState
RUNNING: WorkloadState
EVICTED: WorkloadState
SUCCEEDED: WorkloadState
FAILED: WorkloadState
CANCELLED: WorkloadState

class Toleration(_message.Message):
    __slots__ = ("key", "operator", "value", "effect")
    KEY_FIELD_NUMBER: _ClassVar[int]
    OPERATOR_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    EFFECT_FIELD_NUMBER: _ClassVar[int]
    key: str
    operator: str
    value: str
    effect: str
    def __init__(self, key: _Optional[str] = ..., operator: _Optional[str] = ..., value: _Optional[str] = ..., effect: _Optional[str] = ...) -> None: ...

class PodTemplate(_message.Message):
    __slots__ = ("requests", "gpu_fraction", "gpu_memory", "node_selector", "tolerations", "labels", "annotations", "image")
    class RequestsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class NodeSelectorEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class AnnotationsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    GPU_FRACTION_FIELD_NUMBER: _ClassVar[int]
    GPU_MEMORY_FIELD_NUMBER: _ClassVar[int]
    NODE_SELECTOR_FIELD_NUMBER: _ClassVar[int]
    TOLERATIONS_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    ANNOTATIONS_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    requests: _containers.ScalarMap[str, str]
    gpu_fraction: float
    gpu_memory: str
    node_selector: _containers.ScalarMap[str, str]
    tolerations: _containers.RepeatedCompositeFieldContainer[Toleration]
    labels: _containers.ScalarMap[str, str]
    annotations: _containers.ScalarMap[str, str]
    image: str
    def __init__(self, requests: _Optional[_Mapping[str, str]] = ..., gpu_fraction: _Optional[float] = ..., gpu_memory: _Optional[str] = ..., node_selector: _Optional[_Mapping[str, str]] = ..., tolerations: _Optional[_Iterable[_Union[Toleration, _Mapping]]] = ..., labels: _Optional[_Mapping[str, str]] = ..., annotations: _Optional[_Mapping[str, str]] = ..., image: _Optional[str] = ...) -> None: ...

class PodSet(_message.Message):
    __slots__ = ("name", "replicas", "template", "sub_group")
    NAME_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    TEMPLATE_FIELD_NUMBER: _ClassVar[int]
    SUB_GROUP_FIELD_NUMBER: _ClassVar[int]
    name: str
    replicas: int
    template: PodTemplate
    sub_group: str
    def __init__(self, name: _Optional[str] = ..., replicas: _Optional[int] = ..., template: _Optional[_Union[PodTemplate, _Mapping]] = ..., sub_group: _Optional[str] = ...) -> None: ...

class TopologyConstraint(_message.Message):
    __slots__ = ("topology", "required_level", "preferred_level")
    TOPOLOGY_FIELD_NUMBER: _ClassVar[int]
    REQUIRED_LEVEL_FIELD_NUMBER: _ClassVar[int]
    PREFERRED_LEVEL_FIELD_NUMBER: _ClassVar[int]
    topology: str
    required_level: str
    preferred_level: str
    def __init__(self, topology: _Optional[str] = ..., required_level: _Optional[str] = ..., preferred_level: _Optional[str] = ...) -> None: ...

class SubGroup(_message.Message):
    __slots__ = ("name", "parent", "min_available", "topology")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PARENT_FIELD_NUMBER: _ClassVar[int]
    MIN_AVAILABLE_FIELD_NUMBER: _ClassVar[int]
    TOPOLOGY_FIELD_NUMBER: _ClassVar[int]
    name: str
    parent: str
    min_available: int
    topology: TopologyConstraint
    def __init__(self, name: _Optional[str] = ..., parent: _Optional[str] = ..., min_available: _Optional[int] = ..., topology: _Optional[_Union[TopologyConstraint, _Mapping]] = ...) -> None: ...

class WorkloadSpec(_message.Message):
    __slots__ = ("queue", "priority_class", "preemptibility", "min_available", "sub_groups", "pod_sets", "topology")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_CLASS_FIELD_NUMBER: _ClassVar[int]
    PREEMPTIBILITY_FIELD_NUMBER: _ClassVar[int]
    MIN_AVAILABLE_FIELD_NUMBER: _ClassVar[int]
    SUB_GROUPS_FIELD_NUMBER: _ClassVar[int]
    POD_SETS_FIELD_NUMBER: _ClassVar[int]
    TOPOLOGY_FIELD_NUMBER: _ClassVar[int]
    queue: str
    priority_class: str
    preemptibility: Preemptibility
    min_available: int
    sub_groups: _containers.RepeatedCompositeFieldContainer[SubGroup]
    pod_sets: _containers.RepeatedCompositeFieldContainer[PodSet]
    topology: TopologyConstraint
    def __init__(self, queue: _Optional[str] = ..., priority_class: _Optional[str] = ..., preemptibility: _Optional[_Union[Preemptibility, str]] = ..., min_available: _Optional[int] = ..., sub_groups: _Optional[_Iterable[_Union[SubGroup, _Mapping]]] = ..., pod_sets: _Optional[_Iterable[_Union[PodSet, _Mapping]]] = ..., topology: _Optional[_Union[TopologyConstraint, _Mapping]] = ...) -> None: ...

class Manifests(_message.Message):
    __slots__ = ("documents",)
    DOCUMENTS_FIELD_NUMBER: _ClassVar[int]
    documents: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, documents: _Optional[_Iterable[str]] = ...) -> None: ...

class SubmitWorkloadRequest(_message.Message):
    __slots__ = ("namespace", "name", "workload", "manifests")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    WORKLOAD_FIELD_NUMBER: _ClassVar[int]
    MANIFESTS_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    name: str
    workload: WorkloadSpec
    manifests: Manifests
    def __init__(self, namespace: _Optional[str] = ..., name: _Optional[str] = ..., workload: _Optional[_Union[WorkloadSpec, _Mapping]] = ..., manifests: _Optional[_Union[Manifests, _Mapping]] = ...) -> None: ...

class SubmitWorkloadResponse(_message.Message):
    __slots__ = ("id", "workload")
    ID_FIELD_NUMBER: _ClassVar[int]
    WORKLOAD_FIELD_NUMBER: _ClassVar[int]
    id: str
    workload: Workload
    def __init__(self, id: _Optional[str] = ..., workload: _Optional[_Union[Workload, _Mapping]] = ...) -> None: ...

class Workload(_message.Message):
    __slots__ = ("id", "namespace", "name", "queue", "priority_class", "priority", "preemptible", "state", "min_available", "pods", "pods_bound", "requested", "allocated", "reason", "message", "created", "last_transition", "pod_groups", "placements", "topology")
    class RequestedEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    class AllocatedEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_CLASS_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    PREEMPTIBLE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    MIN_AVAILABLE_FIELD_NUMBER: _ClassVar[int]
    PODS_FIELD_NUMBER: _ClassVar[int]
    PODS_BOUND_FIELD_NUMBER: _ClassVar[int]
    REQUESTED_FIELD_NUMBER: _ClassVar[int]
    ALLOCATED_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    LAST_TRANSITION_FIELD_NUMBER: _ClassVar[int]
    POD_GROUPS_FIELD_NUMBER: _ClassVar[int]
    PLACEMENTS_FIELD_NUMBER: _ClassVar[int]
    TOPOLOGY_FIELD_NUMBER: _ClassVar[int]
    id: str
    namespace: str
    name: str
    queue: str
    priority_class: str
    priority: int
    preemptible: bool
    state: WorkloadState
    min_available: int
    pods: int
    pods_bound: int
    requested: _containers.ScalarMap[str, float]
    allocated: _containers.ScalarMap[str, float]
    reason: str
    message: str
    created: _timestamp_pb2.Timestamp
    last_transition: _timestamp_pb2.Timestamp
    pod_groups: _containers.RepeatedScalarFieldContainer[str]
    placements: _containers.RepeatedCompositeFieldContainer[PodPlacement]
    topology: TopologyConstraint
    def __init__(self, id: _Optional[str] = ..., namespace: _Optional[str] = ..., name: _Optional[str] = ..., queue: _Optional[str] = ..., priority_class: _Optional[str] = ..., priority: _Optional[int] = ..., preemptible: _Optional[bool] = ..., state: _Optional[_Union[WorkloadState, str]] = ..., min_available: _Optional[int] = ..., pods: _Optional[int] = ..., pods_bound: _Optional[int] = ..., requested: _Optional[_Mapping[str, float]] = ..., allocated: _Optional[_Mapping[str, float]] = ..., reason: _Optional[str] = ..., message: _Optional[str] = ..., created: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., last_transition: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., pod_groups: _Optional[_Iterable[str]] = ..., placements: _Optional[_Iterable[_Union[PodPlacement, _Mapping]]] = ..., topology: _Optional[_Union[TopologyConstraint, _Mapping]] = ...) -> None: ...

class PodPlacement(_message.Message):
    __slots__ = ("pod", "node")
    POD_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    pod: str
    node: str
    def __init__(self, pod: _Optional[str] = ..., node: _Optional[str] = ...) -> None: ...

class GetWorkloadRequest(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class ListWorkloadsRequest(_message.Message):
    __slots__ = ("namespace", "queue", "state", "page_size", "page_token")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    queue: str
    state: WorkloadState
    page_size: int
    page_token: str
    def __init__(self, namespace: _Optional[str] = ..., queue: _Optional[str] = ..., state: _Optional[_Union[WorkloadState, str]] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListWorkloadsResponse(_message.Message):
    __slots__ = ("workloads", "next_page_token")
    WORKLOADS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    workloads: _containers.RepeatedCompositeFieldContainer[Workload]
    next_page_token: str
    def __init__(self, workloads: _Optional[_Iterable[_Union[Workload, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class WatchWorkloadsRequest(_message.Message):
    __slots__ = ("namespace", "queue", "resume_token")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    RESUME_TOKEN_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    queue: str
    resume_token: str
    def __init__(self, namespace: _Optional[str] = ..., queue: _Optional[str] = ..., resume_token: _Optional[str] = ...) -> None: ...

class WorkloadEvent(_message.Message):
    __slots__ = ("type", "workload", "resume_token")
    class Type(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        TYPE_UNSPECIFIED: _ClassVar[WorkloadEvent.Type]
        ADDED: _ClassVar[WorkloadEvent.Type]
        MODIFIED: _ClassVar[WorkloadEvent.Type]
        DELETED: _ClassVar[WorkloadEvent.Type]
    TYPE_UNSPECIFIED: WorkloadEvent.Type
    ADDED: WorkloadEvent.Type
    MODIFIED: WorkloadEvent.Type
    DELETED: WorkloadEvent.Type
    TYPE_FIELD_NUMBER: _ClassVar[int]
    WORKLOAD_FIELD_NUMBER: _ClassVar[int]
    RESUME_TOKEN_FIELD_NUMBER: _ClassVar[int]
    type: WorkloadEvent.Type
    workload: Workload
    resume_token: str
    def __init__(self, type: _Optional[_Union[WorkloadEvent.Type, str]] = ..., workload: _Optional[_Union[Workload, _Mapping]] = ..., resume_token: _Optional[str] = ...) -> None: ...

class CancelWorkloadRequest(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class ExplainRequest(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class GangShortfall(_message.Message):
    __slots__ = ("min_available", "pods_existing", "pods_bound", "pods_placeable")
    MIN_AVAILABLE_FIELD_NUMBER: _ClassVar[int]
    PODS_EXISTING_FIELD_NUMBER: _ClassVar[int]
    PODS_BOUND_FIELD_NUMBER: _ClassVar[int]
    PODS_PLACEABLE_FIELD_NUMBER: _ClassVar[int]
    min_available: int
    pods_existing: int
    pods_bound: int
    pods_placeable: int
    def __init__(self, min_available: _Optional[int] = ..., pods_existing: _Optional[int] = ..., pods_bound: _Optional[int] = ..., pods_placeable: _Optional[int] = ...) -> None: ...

class PredicateFailure(_message.Message):
    __slots__ = ("predicate", "nodes", "message")
    PREDICATE_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    predicate: str
    nodes: int
    message: str
    def __init__(self, predicate: _Optional[str] = ..., nodes: _Optional[int] = ..., message: _Optional[str] = ...) -> None: ...

class WorkloadRef(_message.Message):
    __slots__ = ("id", "queue", "priority")
    ID_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    id: str
    queue: str
    priority: int
    def __init__(self, id: _Optional[str] = ..., queue: _Optional[str] = ..., priority: _Optional[int] = ...) -> None: ...

class Explanation(_message.Message):
    __slots__ = ("id", "state", "cause", "message", "gang", "predicates", "nodes_total", "queue", "ahead", "to_free", "evicted_by")
    class ToFreeEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    CAUSE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    GANG_FIELD_NUMBER: _ClassVar[int]
    PREDICATES_FIELD_NUMBER: _ClassVar[int]
    NODES_TOTAL_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    AHEAD_FIELD_NUMBER: _ClassVar[int]
    TO_FREE_FIELD_NUMBER: _ClassVar[int]
    EVICTED_BY_FIELD_NUMBER: _ClassVar[int]
    id: str
    state: WorkloadState
    cause: str
    message: str
    gang: GangShortfall
    predicates: _containers.RepeatedCompositeFieldContainer[PredicateFailure]
    nodes_total: int
    queue: Queue
    ahead: _containers.RepeatedCompositeFieldContainer[WorkloadRef]
    to_free: _containers.ScalarMap[str, float]
    evicted_by: str
    def __init__(self, id: _Optional[str] = ..., state: _Optional[_Union[WorkloadState, str]] = ..., cause: _Optional[str] = ..., message: _Optional[str] = ..., gang: _Optional[_Union[GangShortfall, _Mapping]] = ..., predicates: _Optional[_Iterable[_Union[PredicateFailure, _Mapping]]] = ..., nodes_total: _Optional[int] = ..., queue: _Optional[_Union[Queue, _Mapping]] = ..., ahead: _Optional[_Iterable[_Union[WorkloadRef, _Mapping]]] = ..., to_free: _Optional[_Mapping[str, float]] = ..., evicted_by: _Optional[str] = ...) -> None: ...

class QueueResource(_message.Message):
    __slots__ = ("quota", "limit", "over_quota_weight", "fair_share", "allocated", "requested")
    QUOTA_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    OVER_QUOTA_WEIGHT_FIELD_NUMBER: _ClassVar[int]
    FAIR_SHARE_FIELD_NUMBER: _ClassVar[int]
    ALLOCATED_FIELD_NUMBER: _ClassVar[int]
    REQUESTED_FIELD_NUMBER: _ClassVar[int]
    quota: float
    limit: float
    over_quota_weight: float
    fair_share: float
    allocated: float
    requested: float
    def __init__(self, quota: _Optional[float] = ..., limit: _Optional[float] = ..., over_quota_weight: _Optional[float] = ..., fair_share: _Optional[float] = ..., allocated: _Optional[float] = ..., requested: _Optional[float] = ...) -> None: ...

class Queue(_message.Message):
    __slots__ = ("name", "parent", "children", "priority", "resources", "workloads_pending", "workloads_running")
    class ResourcesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: QueueResource
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[QueueResource, _Mapping]] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    PARENT_FIELD_NUMBER: _ClassVar[int]
    CHILDREN_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    WORKLOADS_PENDING_FIELD_NUMBER: _ClassVar[int]
    WORKLOADS_RUNNING_FIELD_NUMBER: _ClassVar[int]
    name: str
    parent: str
    children: _containers.RepeatedScalarFieldContainer[str]
    priority: int
    resources: _containers.MessageMap[str, QueueResource]
    workloads_pending: int
    workloads_running: int
    def __init__(self, name: _Optional[str] = ..., parent: _Optional[str] = ..., children: _Optional[_Iterable[str]] = ..., priority: _Optional[int] = ..., resources: _Optional[_Mapping[str, QueueResource]] = ..., workloads_pending: _Optional[int] = ..., workloads_running: _Optional[int] = ...) -> None: ...

class ListQueuesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListQueuesResponse(_message.Message):
    __slots__ = ("queues",)
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    queues: _containers.RepeatedCompositeFieldContainer[Queue]
    def __init__(self, queues: _Optional[_Iterable[_Union[Queue, _Mapping]]] = ...) -> None: ...

class NodeTemplate(_message.Message):
    __slots__ = ("name", "allocatable", "labels", "count")
    class AllocatableEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    ALLOCATABLE_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    name: str
    allocatable: _containers.ScalarMap[str, str]
    labels: _containers.ScalarMap[str, str]
    count: int
    def __init__(self, name: _Optional[str] = ..., allocatable: _Optional[_Mapping[str, str]] = ..., labels: _Optional[_Mapping[str, str]] = ..., count: _Optional[int] = ...) -> None: ...

class WhatIfRequest(_message.Message):
    __slots__ = ("workloads", "add_nodes", "remove_nodes")
    WORKLOADS_FIELD_NUMBER: _ClassVar[int]
    ADD_NODES_FIELD_NUMBER: _ClassVar[int]
    REMOVE_NODES_FIELD_NUMBER: _ClassVar[int]
    workloads: _containers.RepeatedCompositeFieldContainer[SubmitWorkloadRequest]
    add_nodes: _containers.RepeatedCompositeFieldContainer[NodeTemplate]
    remove_nodes: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, workloads: _Optional[_Iterable[_Union[SubmitWorkloadRequest, _Mapping]]] = ..., add_nodes: _Optional[_Iterable[_Union[NodeTemplate, _Mapping]]] = ..., remove_nodes: _Optional[_Iterable[str]] = ...) -> None: ...

class Bind(_message.Message):
    __slots__ = ("workload", "pod", "node")
    WORKLOAD_FIELD_NUMBER: _ClassVar[int]
    POD_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    workload: str
    pod: str
    node: str
    def __init__(self, workload: _Optional[str] = ..., pod: _Optional[str] = ..., node: _Optional[str] = ...) -> None: ...

class Eviction(_message.Message):
    __slots__ = ("workload", "pod", "node", "cause", "for_workload")
    WORKLOAD_FIELD_NUMBER: _ClassVar[int]
    POD_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    CAUSE_FIELD_NUMBER: _ClassVar[int]
    FOR_WORKLOAD_FIELD_NUMBER: _ClassVar[int]
    workload: str
    pod: str
    node: str
    cause: str
    for_workload: str
    def __init__(self, workload: _Optional[str] = ..., pod: _Optional[str] = ..., node: _Optional[str] = ..., cause: _Optional[str] = ..., for_workload: _Optional[str] = ...) -> None: ...

class WhatIfResponse(_message.Message):
    __slots__ = ("binds", "evictions", "workloads", "pipelined")
    BINDS_FIELD_NUMBER: _ClassVar[int]
    EVICTIONS_FIELD_NUMBER: _ClassVar[int]
    WORKLOADS_FIELD_NUMBER: _ClassVar[int]
    PIPELINED_FIELD_NUMBER: _ClassVar[int]
    binds: _containers.RepeatedCompositeFieldContainer[Bind]
    evictions: _containers.RepeatedCompositeFieldContainer[Eviction]
    workloads: _containers.RepeatedCompositeFieldContainer[Workload]
    pipelined: _containers.RepeatedCompositeFieldContainer[Bind]
    def __init__(self, binds: _Optional[_Iterable[_Union[Bind, _Mapping]]] = ..., evictions: _Optional[_Iterable[_Union[Eviction, _Mapping]]] = ..., workloads: _Optional[_Iterable[_Union[Workload, _Mapping]]] = ..., pipelined: _Optional[_Iterable[_Union[Bind, _Mapping]]] = ...) -> None: ...

class Node(_message.Message):
    __slots__ = ("name", "node_pool", "ready", "allocatable", "allocated", "pods")
    class AllocatableEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    class AllocatedEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    NODE_POOL_FIELD_NUMBER: _ClassVar[int]
    READY_FIELD_NUMBER: _ClassVar[int]
    ALLOCATABLE_FIELD_NUMBER: _ClassVar[int]
    ALLOCATED_FIELD_NUMBER: _ClassVar[int]
    PODS_FIELD_NUMBER: _ClassVar[int]
    name: str
    node_pool: str
    ready: bool
    allocatable: _containers.ScalarMap[str, float]
    allocated: _containers.ScalarMap[str, float]
    pods: int
    def __init__(self, name: _Optional[str] = ..., node_pool: _Optional[str] = ..., ready: _Optional[bool] = ..., allocatable: _Optional[_Mapping[str, float]] = ..., allocated: _Optional[_Mapping[str, float]] = ..., pods: _Optional[int] = ...) -> None: ...

class NodePool(_message.Message):
    __slots__ = ("name", "nodes", "gpus", "gpus_allocated", "gpus_free")
    NAME_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    GPUS_FIELD_NUMBER: _ClassVar[int]
    GPUS_ALLOCATED_FIELD_NUMBER: _ClassVar[int]
    GPUS_FREE_FIELD_NUMBER: _ClassVar[int]
    name: str
    nodes: int
    gpus: float
    gpus_allocated: float
    gpus_free: float
    def __init__(self, name: _Optional[str] = ..., nodes: _Optional[int] = ..., gpus: _Optional[float] = ..., gpus_allocated: _Optional[float] = ..., gpus_free: _Optional[float] = ...) -> None: ...

class GetClusterRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Cluster(_message.Message):
    __slots__ = ("node_pools", "nodes")
    NODE_POOLS_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    node_pools: _containers.RepeatedCompositeFieldContainer[NodePool]
    nodes: _containers.RepeatedCompositeFieldContainer[Node]
    def __init__(self, node_pools: _Optional[_Iterable[_Union[NodePool, _Mapping]]] = ..., nodes: _Optional[_Iterable[_Union[Node, _Mapping]]] = ...) -> None: ...
