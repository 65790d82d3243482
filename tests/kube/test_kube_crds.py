"""kai-ray's generated CRDs on a real kube-apiserver: KAI-style manifests apply unchanged.

The unit tests compare schemas on paper; only the API server can say whether it accepts the
CRDs at all (structural-schema rules, CEL cost limits, defaults that must validate) and what
it really does with an object: prune, default, validate. So every create here uses
`fieldValidation=Strict`, which turns a silently pruned field into an error, and every object
is read back and compared with what was sent.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kai_ray import devcluster
from kai_ray.api import BindRequest, PodGroup, Queue, Topology
from kai_ray.api.crds import CRDS, CrdSpec, crd_manifest

pytestmark = pytest.mark.kube

SPECS = {spec.kind: spec for spec in CRDS}


def suffix() -> str:
    """Cluster-scoped objects outlive a test's namespace, so their names must be unique per run."""
    return uuid.uuid4().hex[:8]


def assert_intact(sent: Any, got: Any, path: str = "") -> None:
    """Everything sent came back unchanged (the server may add defaults and metadata)."""
    if isinstance(sent, dict):
        assert isinstance(got, dict), f"{path}: expected an object, got {got!r}"
        for key, value in sent.items():
            assert key in got, f"{path}.{key} was dropped by the API server"
            assert_intact(value, got[key], f"{path}.{key}")
    elif isinstance(sent, list):
        assert isinstance(got, list) and len(got) == len(sent), f"{path}: {got!r} != {sent!r}"
        for index, (item_sent, item_got) in enumerate(zip(sent, got, strict=True)):
            assert_intact(item_sent, item_got, f"{path}[{index}]")
    else:
        assert got == sent and type(got) is type(sent), f"{path}: sent {sent!r}, read back {got!r}"


class Objects:
    """Create/read/patch custom objects of our kinds; deletes what it created at the end."""

    def __init__(self, api: Any, namespace: str) -> None:
        self.custom: Any = client.CustomObjectsApi(api)  # returns plain dicts for custom objects
        self.namespace = namespace
        self.created: list[tuple[CrdSpec, str]] = []

    def _scope(self, spec: CrdSpec) -> tuple[str, ...]:
        return () if spec.scope == "Cluster" else (self.namespace,)

    def create(self, body: dict[str, Any]) -> dict[str, Any]:
        spec = SPECS[body["kind"]]
        if spec.scope == "Cluster":
            result = self.custom.create_cluster_custom_object(
                spec.group, spec.version, spec.plural, body, field_validation="Strict"
            )
        else:
            result = self.custom.create_namespaced_custom_object(
                spec.group, spec.version, self.namespace, spec.plural, body, field_validation="Strict"
            )
        self.created.append((spec, body["metadata"]["name"]))
        return dict(result)

    def get(self, kind: str, name: str) -> dict[str, Any]:
        spec = SPECS[kind]
        if spec.scope == "Cluster":
            return dict(self.custom.get_cluster_custom_object(spec.group, spec.version, spec.plural, name))
        return dict(
            self.custom.get_namespaced_custom_object(
                spec.group, spec.version, self.namespace, spec.plural, name
            )
        )

    def patch_status(self, kind: str, name: str, status: dict[str, Any]) -> dict[str, Any]:
        spec = SPECS[kind]
        body = {"status": status}
        if spec.scope == "Cluster":
            result = self.custom.patch_cluster_custom_object_status(
                spec.group, spec.version, spec.plural, name, body
            )
        else:
            result = self.custom.patch_namespaced_custom_object_status(
                spec.group, spec.version, self.namespace, spec.plural, name, body
            )
        return dict(result)

    def replace(self, body: dict[str, Any]) -> dict[str, Any]:
        spec = SPECS[body["kind"]]
        name = body["metadata"]["name"]
        if spec.scope == "Cluster":
            result = self.custom.replace_cluster_custom_object(
                spec.group, spec.version, spec.plural, name, body
            )
        else:
            result = self.custom.replace_namespaced_custom_object(
                spec.group, spec.version, self.namespace, spec.plural, name, body
            )
        return dict(result)

    def cleanup(self) -> None:
        for spec, name in reversed(self.created):
            try:
                if spec.scope == "Cluster":
                    self.custom.delete_cluster_custom_object(spec.group, spec.version, spec.plural, name)
                else:
                    self.custom.delete_namespaced_custom_object(
                        spec.group, spec.version, self.namespace, spec.plural, name
                    )
            except ApiException as error:
                if error.status != 404:
                    raise


@pytest.fixture
def objects(kube_api: Any, namespace: str) -> Iterator[Objects]:
    store = Objects(kube_api, namespace)
    try:
        yield store
    finally:
        store.cleanup()


def rejected(create: Callable[[], Any]) -> ApiException:
    with pytest.raises(ApiException) as caught:
        create()
    return caught.value


# --------------------------------------------------------------------------------------------
# The CRDs installed are ours


def test_devcluster_installs_the_generated_crds_the_chart_ships() -> None:
    """What `devcluster.start` installs by default is, object for object, what the chart ships."""
    chart_crds = Path(__file__).resolve().parents[2] / "charts" / "kai-ray" / "crds"
    installed = {doc["metadata"]["name"]: doc for doc in devcluster.generated_crds()}
    shipped = {doc["metadata"]["name"]: doc for doc in devcluster.crd_documents(chart_crds)}
    assert installed == shipped
    assert sorted(installed) == sorted(spec.name for spec in CRDS)


def test_session_cluster_serves_our_generated_crds(kube_api: Any) -> None:
    """The fixture installs our generated CRDs, not KAI's copies, and the server took them as written."""
    ext: Any = client.ApiextensionsV1Api(kube_api)
    for spec in CRDS:
        served = ext.read_custom_resource_definition(spec.name, _preload_content=False)
        installed = yaml.safe_load(served.data)
        conditions = {c["type"]: c["status"] for c in installed["status"]["conditions"]}
        assert conditions.get("Established") == "True", spec.name
        assert conditions.get("NonStructuralSchema") is None, spec.name
        expected = crd_manifest(spec)["spec"]
        assert (installed["spec"]["group"], installed["spec"]["scope"]) == (
            expected["group"],
            expected["scope"],
        )
        names = installed["spec"]["names"]
        assert {key: names.get(key) for key in expected["names"]} == expected["names"], spec.name
        (version,) = installed["spec"]["versions"]
        assert version["schema"] == expected["versions"][0]["schema"], (
            f"{spec.name}: not our generated schema"
        )


# --------------------------------------------------------------------------------------------
# KAI-style manifests apply unchanged

QUEUE_YAML = """
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata:
  name: {name}
spec:
  displayName: Team A research
  parentQueue: {parent}
  priority: 150
  preemptMinRuntime: 20s
  reclaimMinRuntime: 1m30s
  resources:
    cpu:
      quota: 8000
      limit: -1
      overQuotaWeight: 1
    gpu:
      quota: 2.5
      limit: 16
      overQuotaWeight: 2
    memory:
      quota: -1
      limit: -1
      overQuotaWeight: 1
"""

PARENT_QUEUE_YAML = """
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata:
  name: {name}
spec:
  resources:
    cpu: {{quota: 0, limit: -1, overQuotaWeight: 1}}
    gpu: {{quota: 0, limit: -1, overQuotaWeight: 1}}
    memory: {{quota: 0, limit: -1, overQuotaWeight: 1}}
"""

PODGROUP_YAML = """
apiVersion: scheduling.run.ai/v2alpha2
kind: PodGroup
metadata:
  name: trio
  annotations:
    kai.scheduler/top-owner-metadata: |
      name: trio
      uid: 0c5e6f4e-3a57-4bb5-9d6c-6b1b4d0f2a11
      group: ray.io
      version: v1
      kind: RayCluster
  labels:
    kai.scheduler/queue: default-queue
spec:
  minMember: 3
  queue: default-queue
  priorityClassName: train
  preemptibility: preemptible
  markUnschedulable: true
  schedulingBackoff: 1
  preemptionDelay: 5m
  stalenessGracePeriod: -1s
  topologyConstraint:
    topology: cluster-topology
    preferredTopologyLevel: cloud.provider.com/topology-block
  subGroups:
  - name: head
    minMember: 1
  - name: workers
    minSubGroup: 1
  - name: workers-a
    parent: workers
    minMember: 2
    topologyConstraint:
      topology: cluster-topology
      requiredTopologyLevel: rack
      preferredTopologyLevel: kubernetes.io/hostname
"""

BINDREQUEST_YAML = """
apiVersion: scheduling.run.ai/v1alpha2
kind: BindRequest
metadata:
  name: trainer-0
  labels:
    selected-node: gpu-node-1
spec:
  podName: trainer-0
  selectedNode: gpu-node-1
  receivedResourceType: Fraction
  receivedGPU:
    count: 2
    portion: "0.50"
  selectedGPUGroups: [4f1c5a8e-1, 4f1c5a8e-2]
  backoffLimit: 3
  predictedNUMAZones:
  - zone: "0"
    amount: {cpu: 4, memory: 16Gi, nvidia.com/gpu: "1"}
  resourceClaimAllocations:
  - name: gpu-claim
    allocation:
      devices:
        results:
        - request: gpu
          driver: gpu.nvidia.com
          pool: gpu-node-1
          device: gpu-0
        config:
        - source: FromClass
          requests: [gpu]
          opaque:
            driver: gpu.nvidia.com
            parameters:
              apiVersion: gpu.nvidia.com/v1beta1
              kind: GpuConfig
              sharing: {strategy: TimeSlicing}
      nodeSelector:
        nodeSelectorTerms:
        - matchFields:
          - {key: metadata.name, operator: In, values: [gpu-node-1]}
"""

TOPOLOGY_YAML = """
apiVersion: kai.scheduler/v1alpha1
kind: Topology
metadata:
  name: {name}
spec:
  levels:
  - nodeLabel: cloud.provider.com/topology-block
  - nodeLabel: cloud.provider.com/topology-rack
    alias: rack
  - nodeLabel: kubernetes.io/hostname
"""


def test_queue_applies_unchanged_and_reads_back_intact(objects: Objects) -> None:
    parent_name, name = f"research-{suffix()}", f"team-a-{suffix()}"
    parent = yaml.safe_load(PARENT_QUEUE_YAML.format(name=parent_name))
    body = yaml.safe_load(QUEUE_YAML.format(name=name, parent=parent_name))
    objects.create(parent)
    objects.create(body)
    got = objects.get("Queue", name)
    assert_intact(body["spec"], got["spec"])
    queue = Queue.model_validate(got)  # and the scheduler reads what the server stored
    assert (queue.spec.parent_queue, queue.spec.priority, queue.spec.resources.gpu.quota) == (
        parent_name,
        150,
        2.5,
    )

    status = {
        "childQueues": ["team-a-child"],
        "allocated": {"cpu": "1500m", "memory": "2Gi", "nvidia.com/gpu": "1.5"},
        "allocatedNonPreemptible": {"cpu": 2, "nvidia.com/gpu": "0"},
        "requested": {"cpu": "3", "memory": "4G", "nvidia.com/gpu": 2},
        "conditions": [
            {
                "type": "Orphan",
                "status": "False",
                "reason": "ParentExists",
                "message": "",
                "lastProbeTime": "2026-08-01T10:00:00Z",
                "lastTransitionTime": "2026-08-01T09:00:00Z",
            }
        ],
    }
    objects.patch_status("Queue", name, status)
    got = objects.get("Queue", name)
    assert_intact(status, got["status"])
    assert Queue.model_validate(got).status is not None


def test_queue_defaults_are_filled_in_by_the_server(objects: Objects) -> None:
    """Defaults that carry information are written, so a raw read shows the priority the scheduler uses.

    Zero values are not: like KAI's, the server stores an omitted `limit` or `parentQueue` as
    absent, which KAI and our models both read as 0 / "".
    """
    name = f"minimal-{suffix()}"
    objects.create(
        {
            "apiVersion": "scheduling.run.ai/v2",
            "kind": "Queue",
            "metadata": {"name": name},
            "spec": {"resources": {"gpu": {"quota": 1}}},
        }
    )
    got = objects.get("Queue", name)
    assert got["spec"] == {"priority": 100, "resources": {"gpu": {"quota": 1}}}
    queue = Queue.model_validate(got)
    assert (queue.spec.parent_queue, queue.spec.resources.gpu.limit, queue.spec.priority) == ("", 0.0, 100)


def test_podgroup_applies_unchanged_and_reads_back_intact(objects: Objects) -> None:
    body = yaml.safe_load(PODGROUP_YAML)
    objects.create(body)
    got = objects.get("PodGroup", "trio")
    assert_intact(body["spec"], got["spec"])
    assert_intact(body["metadata"]["annotations"], got["metadata"]["annotations"])
    group = PodGroup.model_validate(got)
    assert [sub.name for sub in group.spec.sub_groups] == ["head", "workers", "workers-a"]

    status = {
        "resourcesStatus": {
            "requested": {"cpu": "12", "memory": "48Gi", "nvidia.com/gpu": "3"},
            "allocated": {"cpu": "4", "nvidia.com/gpu": 1},
            "allocatedNonPreemptible": {},
        },
        "schedulingConditions": [
            {
                "type": "UnschedulableOnNodePool",
                "nodePool": "default",
                "reason": "Unschedulable",
                "message": "OverLimit: queue team-a is over its gpu limit",
                "status": "True",
                "transitionID": "1",
                "lastTransitionTime": "2026-08-01T10:00:00Z",
                "reasons": [
                    {
                        "reason": "OverLimit",
                        "message": "queue team-a is over its gpu limit",
                        "details": {
                            "queueDetails": {
                                "name": "team-a",
                                "queueRequestedResources": {"nvidia.com/gpu": "20"},
                                "queueDeservedResources": {"nvidia.com/gpu": "2500m"},
                                "queueAllocatedResources": {"nvidia.com/gpu": 16},
                                "queueAllocatedNonPreemptibleResources": {"nvidia.com/gpu": "0"},
                                "queueResourceLimits": {"nvidia.com/gpu": "16"},
                                "podGroupRequestedResources": {"nvidia.com/gpu": "3", "cpu": "12"},
                                "podGroupRequestedNonPreemptibleResources": {},
                            }
                        },
                    }
                ],
            }
        ],
        "conditions": [
            {"type": "Ready", "status": "False", "transitionID": "0", "reason": "", "message": ""}
        ],
    }
    objects.patch_status("PodGroup", "trio", status)
    got = objects.get("PodGroup", "trio")
    assert_intact(status, got["status"])
    parsed = PodGroup.model_validate(got)
    assert parsed.status is not None and parsed.status.scheduling_conditions is not None


def test_podgroup_short_name_and_flat_form(objects: Objects, kube_api: Any) -> None:
    """The minimal form the podgrouper writes for a bare pod; `pg` resolves through discovery."""
    body = {
        "apiVersion": "scheduling.run.ai/v2alpha2",
        "kind": "PodGroup",
        "metadata": {"name": "pg-solo"},
        "spec": {"minMember": 1, "queue": "default-queue", "priorityClassName": "inference"},
    }
    objects.create(body)
    assert_intact(body["spec"], objects.get("PodGroup", "pg-solo")["spec"])
    resources = client.CustomObjectsApi(kube_api).get_api_resources("scheduling.run.ai", "v2alpha2")
    (podgroups,) = [r for r in resources.resources if r.name == "podgroups"]
    assert podgroups.short_names == ["pg"] and podgroups.namespaced


def test_bindrequest_applies_unchanged_and_reads_back_intact(objects: Objects) -> None:
    body = yaml.safe_load(BINDREQUEST_YAML)
    objects.create(body)
    got = objects.get("BindRequest", "trainer-0")
    assert_intact(body["spec"], got["spec"])  # incl. the DRA allocation kept verbatim
    request = BindRequest.model_validate(got)
    assert request.spec.received_gpu is not None and request.spec.received_gpu.portion == "0.50"

    status = {"phase": "Failed", "reason": "node gpu-node-1 not found", "failedAttempts": 1}
    objects.patch_status("BindRequest", "trainer-0", status)
    got = objects.get("BindRequest", "trainer-0")
    assert_intact(status, got["status"])
    assert not BindRequest.model_validate(got).failed  # 1 < backoffLimit 3: the binder retries


def test_topology_applies_unchanged_and_reads_back_intact(objects: Objects) -> None:
    name = f"cluster-topology-{suffix()}"
    body = yaml.safe_load(TOPOLOGY_YAML.format(name=name))
    objects.create(body)
    got = objects.get("Topology", name)
    assert_intact(body["spec"], got["spec"])
    assert Topology.model_validate(got).spec.levels[1].alias == "rack"
    # Aliases may change; the nodeLabel sequence may not (KAI's CEL transition rule).
    got["spec"]["levels"][0]["alias"] = "block"
    assert objects.replace(got)["spec"]["levels"][0]["alias"] == "block"
    got = objects.get("Topology", name)
    got["spec"]["levels"][0]["nodeLabel"] = "cloud.provider.com/topology-zone"
    error = rejected(lambda: objects.replace(got))
    assert error.status == 422 and "immutable" in str(error.body)


# --------------------------------------------------------------------------------------------
# Malformed objects are rejected by the API server


def queue_with(resources: Any, name: str) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.run.ai/v2",
        "kind": "Queue",
        "metadata": {"name": name},
        "spec": {"resources": resources},
    }


MALFORMED: dict[str, tuple[Callable[[str], dict[str, Any]], str]] = {
    "quota as a string": (lambda n: queue_with({"gpu": {"quota": "four"}}, n), "spec.resources.gpu.quota"),
    "numeric quota as a string": (
        lambda n: queue_with({"cpu": {"quota": "4"}}, n),
        "spec.resources.cpu.quota",
    ),
    "queue without resources": (
        lambda n: {
            "apiVersion": "scheduling.run.ai/v2",
            "kind": "Queue",
            "metadata": {"name": n},
            "spec": {},
        },
        "spec.resources",
    ),
    "subgroup name not a DNS label": (
        lambda n: {
            "apiVersion": "scheduling.run.ai/v2alpha2",
            "kind": "PodGroup",
            "metadata": {"name": n},
            "spec": {"subGroups": [{"name": "Worker_Group", "minMember": 1}]},
        },
        "spec.subGroups[0].name",
    ),
    "negative minMember": (
        lambda n: {
            "apiVersion": "scheduling.run.ai/v2alpha2",
            "kind": "PodGroup",
            "metadata": {"name": n},
            "spec": {"minMember": -1},
        },
        "spec.minMember",
    ),
    "unknown preemptibility": (
        lambda n: {
            "apiVersion": "scheduling.run.ai/v2alpha2",
            "kind": "PodGroup",
            "metadata": {"name": n},
            "spec": {"preemptibility": "semi-preemptible"},
        },
        "spec.preemptibility",
    ),
    "quantity that is not a quantity": (
        lambda n: {
            "apiVersion": "scheduling.run.ai/v1alpha2",
            "kind": "BindRequest",
            "metadata": {"name": n},
            "spec": {"predictedNUMAZones": [{"zone": "0", "amount": {"cpu": "lots"}}]},
        },
        "spec.predictedNUMAZones[0].amount.cpu",
    ),
    "hostname above the lowest topology level": (
        lambda n: {
            "apiVersion": "kai.scheduler/v1alpha1",
            "kind": "Topology",
            "metadata": {"name": n},
            "spec": {"levels": [{"nodeLabel": "kubernetes.io/hostname"}, {"nodeLabel": "rack"}]},
        },
        "lowest level of topology",
    ),
    "topology without levels": (
        lambda n: {
            "apiVersion": "kai.scheduler/v1alpha1",
            "kind": "Topology",
            "metadata": {"name": n},
            "spec": {"levels": []},
        },
        "spec.levels",
    ),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_object_is_rejected_with_422(objects: Objects, case: str) -> None:
    make, mentioned = MALFORMED[case]
    body = make(f"bad-{suffix()}")
    error = rejected(lambda: objects.create(body))
    assert error.status == 422, f"{case}: expected 422 Invalid, got {error.status}: {error.body}"
    assert mentioned in str(error.body), f"{case}: the error should name {mentioned}: {error.body}"


def test_unknown_field_is_refused_under_strict_validation(objects: Objects) -> None:
    """A typo is not silently pruned when the client asks for strict validation (kubectl's default)."""
    body = queue_with({"gpu": {"quota": 1, "limits": -1}}, f"typo-{suffix()}")
    error = rejected(lambda: objects.create(body))
    assert error.status in (400, 422) and "limits" in str(error.body)
