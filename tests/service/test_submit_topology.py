"""Topology constraints through the API (`WorkloadSpec.topology`, `SubGroup.topology`): what a
client asks is what the PodGroup says and where the pods land, and a constraint the scheduler
could never meet is refused at submit, naming its field, with nothing created."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from service_builders import NOW

from kai_ray.api import Node, Pod, PodGroup
from kai_ray.rpc.api import SchedulerService
from kai_ray.rpc.caller import ANYONE
from kai_ray.rpc.errors import ErrorCode, ServiceError
from kai_ray.rpc.sim_backend import SimBackend
from kai_ray.v1 import scheduler_pb2 as pb

pytestmark = pytest.mark.unit

CLUSTER = Path(__file__).resolve().parents[2] / "examples" / "topology" / "cluster.yaml"
"""Five 4-GPU nodes: rack-1 (6 GPUs free) and rack-2 (8 free) in zone-a, rack-3 (2 free) in
zone-b; Topology `cluster-topology` with levels example.com/zone and example.com/rack (alias rack)."""
RACK_LABEL = "example.com/rack"


@pytest.fixture
def backend() -> Iterator[SimBackend]:
    """The racks above in place of the conftest's cluster (its `service` fixture serves this)."""
    sim = SimBackend.from_directory(CLUSTER, clock=lambda: NOW)
    sim.run_cycle()
    yield sim
    sim.close()


def two_gpu_pods(name: str, replicas: int, sub_group: str = "") -> pb.PodSet:
    template = pb.PodTemplate(requests={"nvidia.com/gpu": "2", "cpu": "1"})
    return pb.PodSet(name=name, replicas=replicas, template=template, sub_group=sub_group)


def racks(backend: SimBackend, namespace: str) -> dict[str, str]:
    """Each bound pod of the namespace → the rack of its node."""
    view = backend.view()
    rack_of = {
        name: node.metadata.labels.get(RACK_LABEL, "")
        for (_, name), node in view.all("Node").items()
        if isinstance(node, Node)
    }
    return {
        name: rack_of[pod.spec.node_name]
        for (found, name), pod in view.all("Pod").items()
        if isinstance(pod, Pod) and found == namespace and pod.spec.node_name
    }


def test_a_workload_required_in_one_rack_lands_in_the_rack_with_room(
    service: SchedulerService, backend: SimBackend
) -> None:
    """Eight GPUs in 2-GPU pods: only rack-2 holds them all. Unconstrained, the first pods would
    fill the part-used nodes of rack-1 and rack-3."""
    topology = pb.TopologyConstraint(topology="cluster-topology", required_level="rack")
    workload = pb.WorkloadSpec(queue="team", pod_sets=[two_gpu_pods("w", 4)], topology=topology)
    service.submit_workload(pb.SubmitWorkloadRequest(namespace="ml", name="train", workload=workload), ANYONE)
    backend.run_cycle()
    group = backend.view().all("PodGroup")[("ml", "train")]
    assert isinstance(group, PodGroup)
    constraint = group.spec.topology_constraint
    assert (constraint.topology, constraint.required_topology_level) == ("cluster-topology", "rack")
    assert constraint.preferred_topology_level == ""
    placed = racks(backend, "ml")
    assert sorted(name for name in placed if name.startswith("train-")) == [f"train-w-{i}" for i in range(4)]
    assert {placed[f"train-w-{i}"] for i in range(4)} == {"rack-2"}
    answered = service.get_workload(pb.GetWorkloadRequest(id="ml/train"), ANYONE)
    assert answered.HasField("topology") and answered.topology == topology


def test_a_workload_without_a_constraint_answers_with_none(service: SchedulerService) -> None:
    workload = pb.WorkloadSpec(queue="team", pod_sets=[two_gpu_pods("w", 1)])
    service.submit_workload(pb.SubmitWorkloadRequest(namespace="ml", name="free", workload=workload), ANYONE)
    answered = service.get_workload(pb.GetWorkloadRequest(id="ml/free"), ANYONE)
    assert answered.name == "free" and not answered.HasField("topology")


def test_each_sub_group_keeps_to_one_rack_of_its_own(service: SchedulerService, backend: SimBackend) -> None:
    """Two SubGroups of two 2-GPU pods, each required in one rack (the workload itself is not):
    each group's pods share a rack. Unconstrained, the first two pods would take the 2 free GPUs
    of rack1-node1 and of rack3-node1, two racks."""
    rack = pb.TopologyConstraint(topology="cluster-topology", required_level="example.com/rack")
    workload = pb.WorkloadSpec(
        queue="team",
        sub_groups=[pb.SubGroup(name="a", topology=rack), pb.SubGroup(name="b", topology=rack)],
        pod_sets=[two_gpu_pods("a", 2, sub_group="a"), two_gpu_pods("b", 2, sub_group="b")],
    )
    service.submit_workload(pb.SubmitWorkloadRequest(namespace="ml", name="split", workload=workload), ANYONE)
    backend.run_cycle()
    group = backend.view().all("PodGroup")[("ml", "split")]
    assert isinstance(group, PodGroup)
    assert [(g.name, g.topology_constraint) for g in group.spec.sub_groups] == [
        (name, group.spec.sub_groups[0].topology_constraint) for name in ("a", "b")
    ]
    assert group.spec.sub_groups[0].topology_constraint is not None
    assert group.spec.sub_groups[0].topology_constraint.required_topology_level == "example.com/rack"
    assert group.spec.topology_constraint.topology == ""
    assert not service.get_workload(pb.GetWorkloadRequest(id="ml/split"), ANYONE).HasField("topology")
    placed = racks(backend, "ml")
    for sub_group in ("a", "b"):
        pods = [f"split-{sub_group}-{i}" for i in range(2)]
        assert all(pod in placed for pod in pods)
        assert len({placed[pod] for pod in pods}) == 1


def _level_without_topology(workload: pb.WorkloadSpec) -> None:
    workload.topology.required_level = "rack"


def _unknown_topology(workload: pb.WorkloadSpec) -> None:
    workload.topology.topology = "datacenter"
    workload.topology.preferred_level = "rack"


def _topology_without_a_level(workload: pb.WorkloadSpec) -> None:
    workload.topology.topology = "cluster-topology"


def _unknown_level_on_a_sub_group(workload: pb.WorkloadSpec) -> None:
    workload.sub_groups.add(
        name="g", topology=pb.TopologyConstraint(topology="cluster-topology", required_level="row")
    )
    workload.pod_sets[0].sub_group = "g"


@pytest.mark.parametrize(
    ("edit", "code", "field", "words"),
    [
        (_level_without_topology, ErrorCode.INVALID_ARGUMENT, "workload.topology.topology", "required with"),
        (_unknown_topology, ErrorCode.FAILED_PRECONDITION, "workload.topology.topology", "does not exist"),
        (
            _topology_without_a_level,
            ErrorCode.INVALID_ARGUMENT,
            "workload.topology.required_level",
            "needs a required_level or a preferred_level",
        ),
        (
            _unknown_level_on_a_sub_group,
            ErrorCode.FAILED_PRECONDITION,
            "workload.sub_groups[0].topology.required_level",
            "has no level 'row' (levels: example.com/zone, example.com/rack, rack)",
        ),
    ],
    ids=["level without topology", "unknown topology", "topology without a level", "unknown level"],
)
def test_a_constraint_that_could_never_be_met_is_refused_and_creates_nothing(
    service: SchedulerService, backend: SimBackend, edit: object, code: ErrorCode, field: str, words: str
) -> None:
    workload = pb.WorkloadSpec(queue="team", pod_sets=[two_gpu_pods("w", 1)])
    assert callable(edit)
    edit(workload)
    generation = backend.view().generation
    with pytest.raises(ServiceError) as refused:
        service.submit_workload(
            pb.SubmitWorkloadRequest(namespace="ml", name="bad", workload=workload), ANYONE
        )
    assert (refused.value.code, refused.value.field) == (code, field)
    assert words in refused.value.message
    assert backend.view().generation == generation
    assert ("ml", "bad") not in backend.view().all("PodGroup")
