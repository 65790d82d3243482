"""What the service remembers to stay fast gives the answers it would compute afresh: per-object
amounts, the smallest node GPU memory, Explain's per-cycle memo."""

from __future__ import annotations

import gc

import pytest
from service_builders import cluster, gpu_job, queue

from kai_ray.api import Node, Pod
from kai_ray.convert.pods import pod_requests
from kai_ray.identity_cache import IdentityCache
from kai_ray.rpc import explain as explain_module
from kai_ray.rpc.api import SchedulerService
from kai_ray.rpc.caller import ANYONE
from kai_ray.rpc.errors import ErrorCode, ServiceError
from kai_ray.rpc.objects import min_node_gpu_memory, node_gpu_memory, pod_amounts
from kai_ray.rpc.sim_backend import SimBackend
from kai_ray.v1 import scheduler_pb2 as pb

pytestmark = pytest.mark.unit


class Thing:
    def __init__(self, value: int) -> None:
        self.value = value


def doubling_cache() -> tuple[IdentityCache[Thing, int], list[int]]:
    """A cache of `value * 2`, and the values it computed, in order."""
    calls: list[int] = []

    def compute(thing: Thing) -> int:
        calls.append(thing.value)
        return thing.value * 2

    return IdentityCache(compute), calls


def test_identity_cache_computes_once_per_object_and_forgets_dead_ones() -> None:
    cache, calls = doubling_cache()
    first, second = Thing(1), Thing(2)
    assert [cache(first), cache(first), cache(second), cache(first)] == [2, 2, 4, 2]
    assert calls == [1, 2]
    del first
    gc.collect()
    assert len(cache) == 1
    # An object equal in value but not the same object is computed for itself.
    assert cache(Thing(2)) == 4 and calls == [1, 2, 2]


def test_asking_by_method_shares_the_entries_of_asking_by_call() -> None:
    cache, calls = doubling_cache()
    first, second = Thing(1), Thing(2)
    assert [cache.of(first), cache(first), cache(second), cache.of(second)] == [2, 2, 4, 4]
    assert calls == [1, 2]


def test_a_shared_entry_serves_the_copy_and_only_when_the_source_is_known() -> None:
    cache, calls = doubling_cache()
    source, copy, unknown, other = Thing(1), Thing(1), Thing(5), Thing(5)
    cache.share(unknown, other)  # nothing known for the source: nothing shared
    assert cache(source) == 2
    cache.share(source, copy)
    assert cache(copy) == 2 and calls == [1]
    assert cache(other) == 10 and calls == [1, 5]


def test_binding_a_pod_keeps_its_parsed_requests(service: SchedulerService, backend: SimBackend) -> None:
    service.submit_workload(gpu_job("ml", "train", "team-a", 1, 2), ANYONE)
    pending = backend.view().get("Pod", "ml", "train-0")
    assert isinstance(pending, Pod)
    amounts = pod_amounts(pending)
    requests = pod_requests(pending.spec)
    backend.run_cycle()
    bound = backend.view().get("Pod", "ml", "train-0")
    assert isinstance(bound, Pod) and bound.spec.node_name and bound is not pending
    assert pod_amounts(bound) is amounts  # the very entry: not parsed again
    assert pod_requests(bound.spec) == requests and pod_requests(bound.spec) is not requests


def test_the_submit_check_converts_against_the_queues_as_they_are_now(
    service: SchedulerService, backend: SimBackend
) -> None:
    """The queue tree the check converts against is remembered per Queue table; a queue added
    after the last submit must be seen as it is, here one the tree skips (its parent is
    missing): a stale tree would say it does not exist."""
    service.submit_workload(gpu_job("ml", "first", "team-a", 1, 1), ANYONE)
    backend.create([queue("orphan", 4, parent="no-such-dept")])
    with pytest.raises(ServiceError, match="queue 'orphan' was skipped") as refused:
        service.submit_workload(gpu_job("ml", "second", "orphan", 1, 1), ANYONE)
    assert refused.value.code == ErrorCode.INVALID_ARGUMENT
    assert backend.view().get("PodGroup", "ml", "second") is None


def test_min_node_gpu_memory_follows_the_node_table_it_is_given() -> None:
    backend = SimBackend(cluster(nodes=3))
    nodes = backend.view().all("Node")
    assert min_node_gpu_memory(nodes) == 81900.0
    small = next(iter(nodes.values()))
    assert isinstance(small, Node)
    labels = {**small.metadata.labels, "nvidia.com/gpu.memory": "40960"}
    changed = small.model_copy(update={"metadata": small.metadata.model_copy(update={"labels": labels})})
    backend.create([])  # nothing; the table stays the same object
    assert backend.view().all("Node") is nodes
    other = {**nodes, ("", small.metadata.name): changed}
    assert node_gpu_memory(changed) == 40900.0
    assert min_node_gpu_memory(other) == 40900.0
    assert min_node_gpu_memory(nodes) == 81900.0


def test_explain_answers_the_same_from_the_memo_as_afresh() -> None:
    backend = SimBackend(cluster(nodes=2))
    service = SchedulerService(backend)
    for index in range(6):  # 2 nodes × 8 GPUs: four gangs of 2 × 4 GPUs wait
        service.submit_workload(gpu_job("ml", f"gang-{index}", "team-a", 2, 4), ANYONE)
    backend.run_cycle()
    ids = [w.id for w in service.workloads.all()]
    remembered = [service.explain(pb.ExplainRequest(id=i), ANYONE) for i in ids]
    afresh = []
    for workload_id in ids:
        explain_module._MEMOS.clear()
        afresh.append(service.explain(pb.ExplainRequest(id=workload_id), ANYONE))
    assert remembered == afresh
    waiting = [e for e in remembered if e.state == pb.PENDING]
    assert waiting and all(e.predicates for e in waiting)
    assert [len(e.ahead) for e in waiting] == [0, 1, 2, 3]


def test_explain_of_a_workload_submitted_after_the_last_cycle() -> None:
    backend = SimBackend(cluster(nodes=1))
    service = SchedulerService(backend)
    backend.run_cycle()
    first = service.submit_workload(gpu_job("ml", "a", "team-a", 1, 1), ANYONE)
    service.explain(pb.ExplainRequest(id=first.id), ANYONE)  # the memo of this cycle exists
    late = service.submit_workload(gpu_job("ml", "late", "team-a", 1, 1), ANYONE)
    explanation = service.explain(pb.ExplainRequest(id=late.id), ANYONE)
    assert explanation.state == pb.PENDING and explanation.cause == "NotScheduledYet"
    assert not explanation.predicates  # nothing to say before a cycle has seen it
