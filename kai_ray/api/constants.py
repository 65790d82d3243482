"""Well-known names of KAI's Kubernetes API surface (spec/kubernetes-api.md §1, §9-§11).

Every label, annotation, API group and default that KAI users already write
lives here once, so the podgrouper, the simulator and the kube backend cannot
drift apart on a spelling. Values are copied verbatim from KAI; changing one
breaks wire compatibility.
"""

from __future__ import annotations

from typing import Final

# --- API groups and versions (§1) -------------------------------------------------------------
SCHEDULING_GROUP: Final = "scheduling.run.ai"
KAI_GROUP: Final = "kai.scheduler"
QUEUE_API_VERSION: Final = "scheduling.run.ai/v2"
PODGROUP_API_VERSION: Final = "scheduling.run.ai/v2alpha2"
BINDREQUEST_API_VERSION: Final = "scheduling.run.ai/v1alpha2"
TOPOLOGY_API_VERSION: Final = "kai.scheduler/v1alpha1"
SCHEDULINGSHARD_API_VERSION: Final = "kai.scheduler/v1"
CONFIG_API_VERSION: Final = "kai.scheduler/v1"
CORE_API_VERSION: Final = "v1"
PRIORITYCLASS_API_VERSION: Final = "scheduling.k8s.io/v1"

# --- Scheduler name and default objects (§2.4, §9) --------------------------------------------
SCHEDULER_NAME: Final = "kai-scheduler"
DEFAULT_QUEUE: Final = "default-queue"
DEFAULT_PARENT_QUEUE: Final = "default-parent-queue"
DEFAULT_QUEUE_PRIORITY: Final = 100
DEFAULT_NAMESPACE: Final = "default"
RESOURCE_RESERVATION_NAMESPACE: Final = "kai-resource-reservation"
DEFAULT_NODE_POOL: Final = "default"

# --- Priority classes (§11) -------------------------------------------------------------------
PRIORITY_TRAIN: Final = "train"
PRIORITY_BUILD_PREEMPTIBLE: Final = "build-preemptible"
PRIORITY_BUILD: Final = "build"
PRIORITY_INFERENCE: Final = "inference"
BUILTIN_PRIORITY_CLASSES: Final[dict[str, int]] = {
    PRIORITY_TRAIN: 50,
    PRIORITY_BUILD_PREEMPTIBLE: 75,
    PRIORITY_BUILD: 100,
    PRIORITY_INFERENCE: 125,
}
DEFAULT_PODGROUP_PRIORITY: Final = 50
"""Priority of a PodGroup whose class is unknown and no class is globalDefault."""
NON_PREEMPTIBLE_PRIORITY: Final = 100
"""Priorities at or above this are non-preemptible unless `spec.preemptibility` says otherwise."""
PREEMPTIBLE: Final = "preemptible"
NON_PREEMPTIBLE: Final = "non-preemptible"

# --- Labels and annotations read from pods and workloads (§10.1) ------------------------------
QUEUE_LABEL: Final = "kai.scheduler/queue"
PROJECT_LABEL: Final = "project"
PRIORITY_CLASS_LABEL: Final = "priorityClassName"
PREEMPTIBILITY_LABEL: Final = "kai.scheduler/preemptibility"
PREEMPTION_DELAY_ANNOTATION: Final = "kai.scheduler/preemption-delay"
STALENESS_GRACE_PERIOD_ANNOTATION: Final = "kai.scheduler/staleness-grace-period"
TOPOLOGY_ANNOTATION: Final = "kai.scheduler/topology"
TOPOLOGY_REQUIRED_PLACEMENT_ANNOTATION: Final = "kai.scheduler/topology-required-placement"
TOPOLOGY_PREFERRED_PLACEMENT_ANNOTATION: Final = "kai.scheduler/topology-preferred-placement"
SEGMENT_SIZE_ANNOTATION: Final = "kai.scheduler/segment-size"
SEGMENT_REQUIRED_PLACEMENT_ANNOTATION: Final = "kai.scheduler/segment-topology-required-placement"
SEGMENT_PREFERRED_PLACEMENT_ANNOTATION: Final = "kai.scheduler/segment-topology-preferred-placement"
BATCH_MIN_MEMBER_ANNOTATION: Final = "kai.scheduler/batch-min-member"
SKIP_PODGROUPER_ANNOTATION: Final = "kai.scheduler/skip-podgrouper"
POD_GROUP_NAME_ANNOTATION: Final = "pod-group-name"
SUBGROUP_LABEL: Final = "kai.scheduler/subgroup-name"
TASK_PRIORITY_LABEL: Final = "kai.scheduler/task-priority"
NODE_POOL_LABEL: Final = "kai.scheduler/node-pool"
USER_LABEL: Final = "user"
RAY_PRIORITY_CLASS_LABEL: Final = "ray.io/priority-class-name"
DEFAULT_SUBGROUP: Final = "default"
"""Leaf a pod joins when it has no subgroup label (the implicit leaf of a flat PodGroup)."""

# --- GPU sharing (§10.1, scheduling.md §17) ---------------------------------------------------
GPU_FRACTION: Final = "gpu-fraction"
GPU_MEMORY: Final = "gpu-memory"
GPU_FRACTION_NUM_DEVICES: Final = "gpu-fraction-num-devices"
GPU_FRACTION_CONTAINER_NAME: Final = "gpu-fraction-container-name"
MPS_ANNOTATION: Final = "mps"

# --- Written by KAI components (§3.7, §10.2) --------------------------------------------------
TOP_OWNER_METADATA_ANNOTATION: Final = "kai.scheduler/top-owner-metadata"
LAST_START_TIMESTAMP_ANNOTATION: Final = "kai.scheduler/last-start-timestamp"
LAST_EVICTION_TIMESTAMP_ANNOTATION: Final = "kai.scheduler/last-eviction-timestamp"
STALE_PODGROUP_TIMESTAMP_ANNOTATION: Final = "kai.scheduler/stale-podgroup-timestamp"
RECEIVED_RESOURCE_TYPE_ANNOTATION: Final = "received-resource-type"
NUMA_PLACEMENT_PREDICTED_ANNOTATION: Final = "kai.scheduler/numa-placement-predicted"
SHARED_GPU_CONFIGMAP_ANNOTATION: Final = "runai/shared-gpu-configmap"
GPU_GROUP_LABEL: Final = "runai-gpu-group"
RESERVE_FOR_GPU_INDEX_ANNOTATION: Final = "run.ai/reserve_for_gpu_index"
SELECTED_NODE_LABEL: Final = "selected-node"

# --- Resource names and node labels (§8) ------------------------------------------------------
RESOURCE_CPU: Final = "cpu"
RESOURCE_MEMORY: Final = "memory"
RESOURCE_PODS: Final = "pods"
RESOURCE_GPU: Final = "nvidia.com/gpu"
NODE_GPU_MEMORY_LABEL: Final = "nvidia.com/gpu.memory"
NODE_GPU_COUNT_LABEL: Final = "nvidia.com/gpu.count"
NODE_MIG_STRATEGY_LABEL: Final = "nvidia.com/mig.strategy"
HOSTNAME_LABEL: Final = "kubernetes.io/hostname"
NAMESPACE_NAME_LABEL: Final = "kubernetes.io/metadata.name"
"""The API server sets it on every Namespace (its name), so a namespaceSelector can name one."""

# --- Kubernetes storage (what kube-scheduler's VolumeBinding reads and writes) ---------------
STORAGE_API_VERSION: Final = "storage.k8s.io/v1"
SELECTED_NODE_ANNOTATION: Final = "volume.kubernetes.io/selected-node"
"""Written on a `WaitForFirstConsumer` claim before its pod is bound: where to provision it."""
DEFAULT_STORAGE_CLASS_ANNOTATIONS: Final = (
    "storageclass.kubernetes.io/is-default-class",
    "storageclass.beta.kubernetes.io/is-default-class",
)
"""A StorageClass with either set to "true" is the class of claims that name none."""
BETA_STORAGE_CLASS_ANNOTATION: Final = "volume.beta.kubernetes.io/storage-class"
"""The claim's class before `spec.storageClassName` existed; it still wins when set."""
