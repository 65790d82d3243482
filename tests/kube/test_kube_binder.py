"""The binder on a real kube-apiserver: BindRequest → pods/binding → kwok runs the pod.

Each test uses its own namespace and a binder restricted to it, so BindRequests left by
other tests (there is no garbage collector in the dev cluster) are never touched.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

import pytest
from kube_support import gone, node_of, running_on, wait_for
from kubernetes import client

from kai_ray.cluster.kube.apply import apply_plan
from kai_ray.cluster.kube.bind_requests import bind_request_body
from kai_ray.cluster.kube.binder import Binder, bind_request_failed, gpu_group_labels
from kai_ray.engine.plan import Bind, Plan

pytestmark = pytest.mark.kube

TIMEOUT = 60.0
GROUP, VERSION, PLURAL = "scheduling.run.ai", "v1alpha2", "bindrequests"
NODE_A, NODE_B = "gpu-node-0", "gpu-node-1"


def make_pod(
    name: str, *, gpus: int = 0, annotations: dict[str, str] | None = None, node: str | None = None
) -> client.V1Pod:
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, annotations=annotations),
        spec=client.V1PodSpec(
            scheduler_name="kai-scheduler",
            node_name=node,
            containers=[
                client.V1Container(
                    name="main",
                    image="busybox",
                    resources=client.V1ResourceRequirements(
                        requests={"cpu": "100m"}, limits={"nvidia.com/gpu": str(gpus)} if gpus else None
                    ),
                )
            ],
        ),
    )


@pytest.fixture
def core(kube_api: Any) -> client.CoreV1Api:
    return client.CoreV1Api(kube_api)


@pytest.fixture
def custom(kube_api: Any) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(kube_api)


@pytest.fixture
def binder(kube_api: Any, namespace: str, custom: client.CustomObjectsApi) -> Iterator[Binder]:
    yield Binder(kube_api, namespace=namespace)
    custom.delete_collection_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)


def request(custom: client.CustomObjectsApi, namespace: str, name: str) -> dict[str, Any]:
    return custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)  # type: ignore[return-value]


def create_request(custom: client.CustomObjectsApi, body: dict[str, Any]) -> None:
    namespace = body["metadata"]["namespace"]
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)


def pod_uid(core: client.CoreV1Api, namespace: str, name: str) -> str:
    meta = core.read_namespaced_pod(name, namespace).metadata
    assert meta is not None and meta.uid
    return meta.uid


def events_for(core: client.CoreV1Api, namespace: str, pod: str) -> list[client.CoreV1Event]:
    selector = f"involvedObject.kind=Pod,involvedObject.name={pod}"
    return list(core.list_namespaced_event(namespace, field_selector=selector).items)


# --------------------------------------------------------------------------------------------


def test_binder_binds_and_the_pod_runs(
    core: client.CoreV1Api, custom: client.CustomObjectsApi, namespace: str, binder: Binder
) -> None:
    core.create_namespaced_pod(namespace, make_pod("p", gpus=1))
    apply_plan(core.api_client, Plan(binds=[Bind(f"{namespace}/pg", "p", NODE_B, (), 1.0)]))

    result = binder.bind_pending(timeout=TIMEOUT)

    assert result.succeeded == [f"{namespace}/p"] and result.failed == [] and not result.timed_out
    wait_for("pod Running on gpu-node-1", functools.partial(running_on, core, namespace, "p", NODE_B))
    assert request(custom, namespace, "p")["status"] == {"phase": "Succeeded"}
    pod = core.read_namespaced_pod("p", namespace)
    assert pod.status is not None and pod.metadata is not None
    bound = [c for c in pod.status.conditions or [] if c.type == "PodBound"]
    assert [(c.status, c.reason) for c in bound] == [("True", "Bound")]
    # Regular binds carry no GPU-sharing labels or annotations (only Fraction is read back).
    assert "runai-gpu-group" not in (pod.metadata.labels or {})
    assert "received-resource-type" not in (pod.metadata.annotations or {})
    assert "Bound" in [e.reason for e in events_for(core, namespace, "p")]
    # Nothing left to do: a second pass (or a restarted binder) touches nothing.
    assert binder.bind_pending(timeout=TIMEOUT).outcomes == []
    assert Binder(core.api_client, namespace=namespace).bind_pending(timeout=TIMEOUT).outcomes == []


def test_fraction_bind_labels_the_gpu_group_before_binding(
    core: client.CoreV1Api, namespace: str, binder: Binder
) -> None:
    core.create_namespaced_pod(namespace, make_pod("half", annotations={"gpu-fraction": "0.5"}))
    multi = {"gpu-fraction": "0.5", "gpu-fraction-num-devices": "2"}
    core.create_namespaced_pod(namespace, make_pod("two-halves", annotations=multi))
    plan = Plan(
        binds=[
            Bind(f"{namespace}/a", "half", NODE_A, ("gpu-node-0-gpu-7",), 0.5),
            Bind(f"{namespace}/b", "two-halves", NODE_A, ("gpu-node-0-gpu-5", "gpu-node-0-gpu-6"), 1.0),
        ]
    )
    assert apply_plan(core.api_client, plan).ok

    result = binder.bind_pending(timeout=TIMEOUT)

    assert sorted(result.succeeded) == [f"{namespace}/half", f"{namespace}/two-halves"], result.failed
    half = core.read_namespaced_pod("half", namespace).metadata
    two = core.read_namespaced_pod("two-halves", namespace).metadata
    assert half is not None and two is not None
    assert (half.labels or {}).get("runai-gpu-group") == "gpu-node-0-gpu-7"
    assert (half.annotations or {}).get("received-resource-type") == "Fraction"
    assert {k: v for k, v in (two.labels or {}).items() if k.startswith("runai-gpu-group")} == {
        "runai-gpu-group/gpu-node-0-gpu-5": "gpu-node-0-gpu-5",
        "runai-gpu-group/gpu-node-0-gpu-6": "gpu-node-0-gpu-6",
    }
    wait_for("fraction pod Running", functools.partial(running_on, core, namespace, "half", NODE_A))


def test_pod_already_on_the_selected_node_succeeds_elsewhere_fails(
    core: client.CoreV1Api, custom: client.CustomObjectsApi, namespace: str, binder: Binder
) -> None:
    """Idempotent after a binder crash between binding and status; never moves a bound pod."""
    core.create_namespaced_pod(namespace, make_pod("here", node=NODE_A))
    core.create_namespaced_pod(namespace, make_pod("there", node=NODE_A))
    create_request(
        custom,
        bind_request_body(Bind(f"{namespace}/pg", "here", NODE_A, (), 0.0), pod_uid(core, namespace, "here")),
    )
    create_request(
        custom,
        bind_request_body(
            Bind(f"{namespace}/pg", "there", NODE_B, (), 0.0), pod_uid(core, namespace, "there")
        ),
    )

    result = binder.bind_pending(timeout=TIMEOUT)

    assert result.succeeded == [f"{namespace}/here"]
    assert result.failed == [
        (f"{namespace}/there", f"pod {namespace}/there is already bound to node {NODE_A}, not {NODE_B}")
    ]
    status = request(custom, namespace, "there")["status"]
    assert status["phase"] == "Failed" and "already bound" in status["reason"]
    assert bind_request_failed(request(custom, namespace, "there"))
    assert node_of(core, namespace, "there") == NODE_A
    assert "BindingError" in [e.reason for e in events_for(core, namespace, "there")]


def test_missing_node_fails_and_retries_follow_the_backoff_limit(
    core: client.CoreV1Api, custom: client.CustomObjectsApi, namespace: str, binder: Binder
) -> None:
    core.create_namespaced_pod(namespace, make_pod("lost"))
    body = bind_request_body(
        Bind(f"{namespace}/pg", "lost", "no-such-node", (), 0.0), pod_uid(core, namespace, "lost")
    )
    body["spec"]["backoffLimit"] = 2
    create_request(custom, body)

    first = binder.bind_pending(timeout=TIMEOUT)
    immediately = binder.bind_pending(timeout=TIMEOUT)

    assert first.failed == [(f"{namespace}/lost", "node no-such-node does not exist")]
    stored = request(custom, namespace, "lost")
    assert stored["status"]["failedAttempts"] == 1 and not bind_request_failed(stored)
    assert immediately.outcomes == []  # KAI's back-off: 2^attempts seconds before the next try
    assert node_of(core, namespace, "lost") is None


def test_recreated_pod_is_not_bound_by_the_old_request(
    core: client.CoreV1Api, custom: client.CustomObjectsApi, namespace: str, binder: Binder
) -> None:
    core.create_namespaced_pod(namespace, make_pod("phoenix"))
    assert apply_plan(core.api_client, Plan(binds=[Bind(f"{namespace}/pg", "phoenix", NODE_A, (), 0.0)])).ok
    core.delete_namespaced_pod("phoenix", namespace, grace_period_seconds=0)
    wait_for("old pod gone", functools.partial(gone, core, namespace, "phoenix"))
    core.create_namespaced_pod(namespace, make_pod("phoenix"))

    result = binder.bind_pending(timeout=TIMEOUT)

    assert result.failed == [
        (f"{namespace}/phoenix", f"pod {namespace}/phoenix was recreated after this BindRequest was made")
    ]
    assert node_of(core, namespace, "phoenix") is None


def test_lost_status_after_binding_is_recovered_without_a_second_binding(
    core: client.CoreV1Api, custom: client.CustomObjectsApi, namespace: str, binder: Binder
) -> None:
    """A binder killed after POST binding but before writing status: its successor must not fail the pod."""
    core.create_namespaced_pod(namespace, make_pod("crash"))
    assert apply_plan(core.api_client, Plan(binds=[Bind(f"{namespace}/pg", "crash", NODE_B, (), 0.0)])).ok
    assert binder.bind_pending(timeout=TIMEOUT).succeeded == [f"{namespace}/crash"]
    custom.patch_namespaced_custom_object_status(
        GROUP,
        VERSION,
        namespace,
        PLURAL,
        "crash",
        {"status": {"phase": None}},
        _content_type="application/merge-patch+json",
    )

    successor = Binder(core.api_client, namespace=namespace).bind_pending(timeout=TIMEOUT)

    assert successor.succeeded == [f"{namespace}/crash"]
    assert request(custom, namespace, "crash")["status"]["phase"] == "Succeeded"
    assert node_of(core, namespace, "crash") == NODE_B


def test_gpu_group_labels_follow_kai() -> None:
    assert gpu_group_labels(["g1"]) == {"runai-gpu-group": "g1"}
    assert gpu_group_labels(["g1", "g2"]) == {
        "runai-gpu-group/g1": "g1",
        "runai-gpu-group/g2": "g2",
    }


def test_stale_snapshot_bind_is_created_but_refused_by_the_binder(
    core: client.CoreV1Api, custom: client.CustomObjectsApi, namespace: str, binder: Binder
) -> None:
    """The fast path (pod uids from the snapshot, no read) trusts the binder to refuse stale binds."""
    core.create_namespaced_pod(namespace, make_pod("moved", node=NODE_A))
    uids = {(namespace, "moved"): pod_uid(core, namespace, "moved")}
    plan = Plan(binds=[Bind(f"{namespace}/pg", "moved", NODE_B, (), 0.0)])

    applied = apply_plan(core.api_client, plan, pod_uids=uids, scheduled_events=False)
    result = binder.bind_pending(timeout=TIMEOUT)

    assert applied.bind_requests == [f"{namespace}/moved"] and applied.events == 0
    assert result.failed == [
        (f"{namespace}/moved", f"pod {namespace}/moved is already bound to node {NODE_A}, not {NODE_B}")
    ]
    assert node_of(core, namespace, "moved") == NODE_A
