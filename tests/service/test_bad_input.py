"""Every bad submit names its field, gets the right code, and creates nothing."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from service_builders import gpu_job

from kai_ray.rpc.api import SchedulerService
from kai_ray.rpc.caller import ANYONE
from kai_ray.rpc.errors import ErrorCode, ServiceError
from kai_ray.rpc.sim_backend import SimBackend
from kai_ray.v1 import scheduler_pb2 as pb

pytestmark = pytest.mark.unit

Edit = Callable[[pb.SubmitWorkloadRequest], None]


def _set(path: str, value: object) -> Edit:
    def edit(request: pb.SubmitWorkloadRequest) -> None:
        target: object = request
        *parents, last = path.split(".")
        for part in parents:
            target = getattr(target, part)
        setattr(target, last, value)

    return edit


def _template(edit: Callable[[pb.PodTemplate], None]) -> Edit:
    return lambda request: edit(request.workload.pod_sets[0].template)


def _no_pod_sets(request: pb.SubmitWorkloadRequest) -> None:
    del request.workload.pod_sets[:]


def _sub_groups(request: pb.SubmitWorkloadRequest) -> None:
    request.workload.sub_groups.add(name="workers", min_available=5)
    request.workload.pod_sets[0].sub_group = "workers"


CASES: list[tuple[str, Edit, ErrorCode, str, str]] = [
    ("zero pods", _no_pod_sets, ErrorCode.INVALID_ARGUMENT, "workload.pod_sets", "at least one"),
    (
        "replicas 0",
        lambda r: setattr(r.workload.pod_sets[0], "replicas", 0),
        ErrorCode.INVALID_ARGUMENT,
        "workload.pod_sets[0].replicas",
        ">= 1",
    ),
    (
        "negative gpu",
        _template(lambda t: t.requests.__setitem__("nvidia.com/gpu", "-1")),
        ErrorCode.INVALID_ARGUMENT,
        'workload.pod_sets[0].template.requests["nvidia.com/gpu"]',
        "negative",
    ),
    (
        "non-numeric cpu",
        _template(lambda t: t.requests.__setitem__("cpu", "lots")),
        ErrorCode.INVALID_ARGUMENT,
        'workload.pod_sets[0].template.requests["cpu"]',
        "not a quantity",
    ),
    (
        "min above pods",
        _set("workload.min_available", 5),
        ErrorCode.INVALID_ARGUMENT,
        "workload.min_available",
        "5 required, 2 exist",
    ),
    (
        "subgroup min above pods",
        _sub_groups,
        ErrorCode.INVALID_ARGUMENT,
        "workload.sub_groups[0].min_available",
        "5 required, 2 exist",
    ),
    (
        "unknown queue",
        _set("workload.queue", "nope"),
        ErrorCode.FAILED_PRECONDITION,
        "workload.queue",
        "does not exist",
    ),
    ("no queue", _set("workload.queue", ""), ErrorCode.INVALID_ARGUMENT, "workload.queue", "required"),
    (
        "parent queue",
        _set("workload.queue", "dept"),
        ErrorCode.FAILED_PRECONDITION,
        "workload.queue",
        "parent queue",
    ),
    (
        "unknown priority class",
        _set("workload.priority_class", "vip"),
        ErrorCode.FAILED_PRECONDITION,
        "workload.priority_class",
        "does not exist",
    ),
    (
        "fraction 1.5",
        _template(lambda t: (t.requests.pop("nvidia.com/gpu"), setattr(t, "gpu_fraction", 1.5))),
        ErrorCode.INVALID_ARGUMENT,
        "workload.pod_sets[0].template.gpu_fraction",
        "(0, 1)",
    ),
    (
        "fraction with whole gpus",
        _template(lambda t: setattr(t, "gpu_fraction", 0.5)),
        ErrorCode.INVALID_ARGUMENT,
        "workload.pod_sets[0].template.gpu_fraction",
        "excludes",
    ),
    ("bad name", _set("name", "Not_A_Name"), ErrorCode.INVALID_ARGUMENT, "name", "DNS label"),
    ("no namespace", _set("namespace", ""), ErrorCode.INVALID_ARGUMENT, "namespace", "required"),
    (
        "bad toleration",
        _template(lambda t: t.tolerations.add(key="k", operator="Maybe")),
        ErrorCode.INVALID_ARGUMENT,
        "workload.pod_sets[0].template.tolerations[0].operator",
        "Equal or Exists",
    ),
]


@pytest.mark.parametrize(
    ("edit", "code", "field", "words"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_bad_submit_names_its_field_and_creates_nothing(
    service: SchedulerService, backend: SimBackend, edit: Edit, code: ErrorCode, field: str, words: str
) -> None:
    request = gpu_job("ml", "job", "team-a", 2, 1)
    edit(request)
    generation = backend.view().generation
    events = service.events.last_seq
    with pytest.raises(ServiceError) as refused:
        service.submit_workload(request, ANYONE)
    assert (refused.value.code, refused.value.field) == (code, field)
    assert words in refused.value.message
    assert backend.view().generation == generation
    assert not backend.view().all("Pod") and not backend.view().all("PodGroup")
    assert service.events.last_seq == events


def test_duplicate_name_is_already_exists_and_keeps_the_first(
    service: SchedulerService, backend: SimBackend
) -> None:
    service.submit_workload(gpu_job("ml", "job", "team-a", 1, 1), ANYONE)
    with pytest.raises(ServiceError) as duplicate:
        service.submit_workload(gpu_job("ml", "job", "team-a", 3, 2), ANYONE)
    assert (duplicate.value.code, duplicate.value.field) == (ErrorCode.ALREADY_EXISTS, "name")
    assert sorted(backend.view().all("Pod")) == [("ml", "job-0")]


def test_a_partial_create_leaves_nothing(service: SchedulerService, backend: SimBackend) -> None:
    """A pod name clash found only by the backend: the PodGroup before it is not created either."""
    service.submit_workload(gpu_job("ml", "a-b", "team-a", 1, 1), ANYONE)  # pod a-b-0
    request = gpu_job("ml", "a", "team-a", 1, 1)
    request.workload.pod_sets[0].name = "b"  # pod a-b-0 again
    with pytest.raises(ServiceError) as clash:
        service.submit_workload(request, ANYONE)
    assert clash.value.code == ErrorCode.ALREADY_EXISTS
    assert backend.view().get("PodGroup", "ml", "a") is None
    with pytest.raises(ServiceError):
        service.get_workload(pb.GetWorkloadRequest(id="ml/a"), ANYONE)


def test_generated_names_are_deterministic(service: SchedulerService) -> None:
    request = gpu_job("ml", "", "team-a", 1, 1)
    request.workload.pod_sets[0].name = "worker"
    ids = [service.submit_workload(request, ANYONE).id for _ in range(2)]
    assert ids == ["ml/worker-1", "ml/worker-2"]


def test_bad_ids_and_what_if_fields(service: SchedulerService) -> None:
    with pytest.raises(ServiceError) as bad_id:
        service.get_workload(pb.GetWorkloadRequest(id="no-slash"), ANYONE)
    assert (bad_id.value.code, bad_id.value.field) == (ErrorCode.INVALID_ARGUMENT, "id")
    bad_workload = gpu_job("ml", "x", "team-a", 0, 1)
    with pytest.raises(ServiceError) as nested:
        service.what_if(
            pb.WhatIfRequest(workloads=[gpu_job("ml", "ok", "team-a", 1, 1), bad_workload]), ANYONE
        )
    assert nested.value.field == "workloads[1].workload.pod_sets[0].replicas"
    with pytest.raises(ServiceError) as node:
        service.what_if(pb.WhatIfRequest(remove_nodes=["ghost"]), ANYONE)
    assert (node.value.code, node.value.field) == (ErrorCode.NOT_FOUND, "remove_nodes[0]")
    with pytest.raises(ServiceError) as quantity:
        service.what_if(
            pb.WhatIfRequest(add_nodes=[pb.NodeTemplate(name="n", allocatable={"cpu": "-4"})]), ANYONE
        )
    assert quantity.value.field == 'add_nodes[0].allocatable["cpu"]'


def test_bad_manifests_name_the_document(backend: SimBackend) -> None:
    from kai_ray_operators.manifests import prepare_manifests

    service = SchedulerService(backend, grouper=prepare_manifests)
    cases = {
        "kind: [": ("manifests.documents[0]", ErrorCode.INVALID_ARGUMENT),
        "apiVersion: v1\nkind: Node\nmetadata: {name: n}\n": (
            "manifests.documents[0].kind",
            ErrorCode.INVALID_ARGUMENT,
        ),
    }
    for document, (field, code) in cases.items():
        with pytest.raises(ServiceError) as refused:
            service.submit_workload(
                pb.SubmitWorkloadRequest(namespace="ml", manifests=pb.Manifests(documents=[document])), ANYONE
            )
        assert (refused.value.field, refused.value.code) == (field, code)
    assert not backend.view().all("Pod")
