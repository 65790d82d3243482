"""What a fresh KAI install has, created on the dev cluster: CRDs, priority classes, queues, GPU nodes."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from kai_ray.devcluster.binaries import DevClusterError
from kai_ray.devcluster.processes import wait_until

#: Annotation that hands a Node to the pod runner (kwok's ``--manage-nodes-with-annotation-selector``).
FAKE_NODE_ANNOTATION = ("kwok.x-k8s.io/node", "fake")

#: PriorityClasses a fresh KAI install creates (helm ``defaultPriorityClasses``); <100 is preemptible.
DEFAULT_PRIORITY_CLASSES: Mapping[str, int] = {
    "train": 50,
    "build-preemptible": 75,
    "build": 100,
    "inference": 125,
}

QUEUE_GROUP = "scheduling.run.ai"
QUEUE_VERSION = "v2"
QUEUE_PLURAL = "queues"
DEFAULT_PARENT_QUEUE = "default-parent-queue"
DEFAULT_QUEUE = "default-queue"


# --------------------------------------------------------------------------------------------
# Seeding objects


def is_status(exc: BaseException, *codes: int) -> bool:
    return getattr(exc, "status", None) in codes


def create_ignoring_conflict(create: Callable[[], object]) -> None:
    """Create an object, treating 409 AlreadyExists as success so seeding is idempotent."""
    from kubernetes.client.exceptions import ApiException

    try:
        create()
    except ApiException as exc:
        if not is_status(exc, 409):
            raise


def generated_crds() -> list[dict[str, Any]]:
    """kai-ray's own CRDs (Queue, PodGroup, BindRequest, Topology), generated from its models.

    The same objects as the files in ``charts/kai-ray/crds`` (a unit test keeps those equal to
    the models), made in process so an installed kai-ray needs no checkout to seed a cluster.
    """
    from kai_ray.api.crds import CRDS, crd_manifest

    return [crd_manifest(spec) for spec in CRDS]


def crd_documents(crd_dir: Path) -> list[dict[str, Any]]:
    """Every CustomResourceDefinition in the ``*.yaml``/``*.yml`` files of ``crd_dir``.

    Raises ``DevClusterError`` (one line) when the directory is missing, a file is not YAML, or
    no CRD is found, so a wrong directory fails before anything is started.
    """
    crd_dir = Path(crd_dir)
    if not crd_dir.is_dir():
        raise DevClusterError(f"CRD directory {crd_dir} not found")
    docs: list[dict[str, Any]] = []
    for path in sorted(crd_dir.glob("*.yaml")) + sorted(crd_dir.glob("*.yml")):
        try:
            loaded = list(yaml.safe_load_all(path.read_text()))
        except yaml.YAMLError as exc:
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise DevClusterError(f"{path} is not valid YAML: {first}") from exc
        docs.extend(
            doc for doc in loaded if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition"
        )
    if not docs:
        raise DevClusterError(f"no CustomResourceDefinitions found in {crd_dir}")
    return docs


def install_crds(api: Any, crd_dir: Path, timeout: float = 60.0) -> list[str]:
    """Create every CRD in ``crd_dir`` and wait until each reports ``Established``; returns their names."""
    return install_crd_manifests(api, crd_documents(crd_dir), timeout)


def install_crd_manifests(
    api: Any, manifests: Sequence[Mapping[str, Any]], timeout: float = 60.0
) -> list[str]:
    """Create these CRD objects (existing ones are kept) and wait until each reports ``Established``.

    Waiting matters: creating a custom object before the CRD is established fails with 404.
    Returns the CRD names.
    """
    from kubernetes import client

    if not manifests:
        raise DevClusterError("no CustomResourceDefinitions to install")
    ext: Any = client.ApiextensionsV1Api(api)  # typed for model objects; a plain dict body is fine
    names: list[str] = []
    for doc in manifests:
        create_ignoring_conflict(functools.partial(ext.create_custom_resource_definition, body=dict(doc)))
        names.append(str(doc["metadata"]["name"]))

    def established(name: str) -> bool | None:
        crd = ext.read_custom_resource_definition(name)
        conditions = (crd.status.conditions if crd.status else None) or []
        return True if any(c.type == "Established" and c.status == "True" for c in conditions) else None

    for name in names:
        wait_until(f"CRD {name} Established", functools.partial(established, name), timeout)
    return names


def create_default_objects(api: Any, queue_quota: float = -1, timeout: float = 60.0) -> None:
    """The objects a fresh KAI install has: its four PriorityClasses and the two default queues."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    sched = client.SchedulingV1Api(api)
    for name, value in DEFAULT_PRIORITY_CLASSES.items():
        priority_class = client.V1PriorityClass(
            metadata=client.V1ObjectMeta(name=name),
            value=value,
            global_default=False,
            description=f"KAI default priority class ({'preemptible' if value < 100 else 'non-preemptible'})",
        )
        create_ignoring_conflict(functools.partial(sched.create_priority_class, priority_class))

    custom = client.CustomObjectsApi(api)
    quota = {"quota": queue_quota, "limit": -1, "overQuotaWeight": 1}
    resources = {"cpu": dict(quota), "gpu": dict(quota), "memory": dict(quota)}
    queues: list[dict[str, Any]] = [
        {"metadata": {"name": DEFAULT_PARENT_QUEUE}, "spec": {"resources": resources}},
        {
            "metadata": {"name": DEFAULT_QUEUE},
            "spec": {"parentQueue": DEFAULT_PARENT_QUEUE, "resources": resources},
        },
    ]

    def create(body: dict[str, Any]) -> bool | None:
        # A just-Established CRD can still 404 for a moment while its handler is wired up.
        try:
            create_ignoring_conflict(
                functools.partial(
                    custom.create_cluster_custom_object, QUEUE_GROUP, QUEUE_VERSION, QUEUE_PLURAL, body
                )
            )
        except ApiException as exc:
            if is_status(exc, 404):
                return None
            raise
        return True

    for queue in queues:
        body = {"apiVersion": f"{QUEUE_GROUP}/{QUEUE_VERSION}", "kind": "Queue", **queue}
        wait_until(f"queue {queue['metadata']['name']} created", functools.partial(create, body), timeout)


def create_gpu_node(
    api: Any,
    name: str,
    gpus: int = 8,
    *,
    gpu_memory_mib: int = 81920,
    gpu_product: str = "NVIDIA-H100-80GB-HBM3",
    cpu: str = "128",
    memory: str = "1Ti",
    pods: int = 256,
    labels: Mapping[str, str] | None = None,
    ready: bool = True,
    extended: Mapping[str, str] | None = None,
) -> Any:
    """Create a fake GPU Node (status included) managed by the pod runner; returns the V1Node.

    The Node carries what GPU-Operator/kubelet would publish and KAI reads: allocatable
    ``nvidia.com/gpu`` and the ``nvidia.com/gpu.memory``/``gpu.count``/``gpu.product`` labels.
    It is untainted, because no node-lifecycle controller runs here.  ``ready=False`` leaves
    the Ready condition to the pod runner (kwok's node-initialize stage or the fake kubelet).
    Like a real kubelet's node it publishes local ``ephemeral-storage`` (pods ask for it: the
    training-operator's MPI launcher does), which kai-ray fits as kube-scheduler does.
    ``extended`` adds allocatable resources of other names (``rdma/hca``, ``hugepages-2Mi``).
    """
    from kubernetes import client

    resources = {
        "cpu": cpu,
        "memory": memory,
        "pods": str(pods),
        "nvidia.com/gpu": str(gpus),
        "ephemeral-storage": "1Ti",
        **(extended or {}),
    }
    node_labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "type": "kwok",
        "nvidia.com/gpu.present": "true" if gpus else "false",
        "nvidia.com/gpu.count": str(gpus),
        "nvidia.com/gpu.memory": str(gpu_memory_mib),
        "nvidia.com/gpu.product": gpu_product,
        **(labels or {}),
    }
    key, value = FAKE_NODE_ANNOTATION
    body = client.V1Node(
        metadata=client.V1ObjectMeta(name=name, labels=node_labels, annotations={key: value}),
        spec=client.V1NodeSpec(),
        status=client.V1NodeStatus(
            allocatable=resources,
            capacity=resources,
            phase="Running" if ready else "Pending",
            conditions=[
                client.V1NodeCondition(
                    type="Ready", status="True", reason="KubeletReady", message="fake node"
                ),
            ]
            if ready
            else None,
        ),
    )
    return client.CoreV1Api(api).create_node(body)


def node_ready(api: Any, name: str) -> bool | None:
    from kubernetes import client

    node = client.CoreV1Api(api).read_node(name)
    conditions = (node.status.conditions if node.status else None) or []
    return True if any(c.type == "Ready" and c.status == "True" for c in conditions) else None
