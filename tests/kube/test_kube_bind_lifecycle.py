"""A refused binding is retried, given up, scheduled again, and finally bound (issue 8, items 3 and 4).

An admission policy on `pods/binding` refuses the binding: the binder posts to that
subresource (so the policy applies, as it would to any scheduler), retries with
back-off, records `PodBound=False` and a `BindingError` Event, and when the
BindRequest has failed for good the scheduler deletes it, so the pod is scheduled
again.  Once the policy goes, the pod is bound.  Metrics count binds that
happened, never attempts.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kai_ray_operators.controller import PodGroupController
from kube_support import eventually, wait_for
from kube_zone import Zone
from kubernetes import client
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from kai_ray.cluster.kube.bind_request_cleanup import delete_stale_bind_requests
from kai_ray.cluster.kube.cache import ClusterCache
from kai_ray.server.metrics import SchedulerMetrics
from kai_ray.server.scheduler import KubeScheduler

pytestmark = pytest.mark.kube

POLICY_MESSAGE = "bindings of refused-* pods are not allowed here"


@pytest.fixture
def refusal(kube_api: Any, namespace: str) -> Iterator[str]:
    """A ValidatingAdmissionPolicy refusing `pods/binding` for pods named refused-*, in this namespace."""
    admission = client.AdmissionregistrationV1Api(kube_api)
    name = f"refuse-bindings-{namespace}"
    admission.create_validating_admission_policy(
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": name},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {
                    "resourceRules": [
                        {
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            "operations": ["CREATE"],
                            "resources": ["pods/binding"],
                        }
                    ]
                },
                "validations": [
                    {"expression": "!object.metadata.name.startsWith('refused')", "message": POLICY_MESSAGE}
                ],
            },
        }
    )
    admission.create_validating_admission_policy_binding(
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": name},
            "spec": {
                "policyName": name,
                "validationActions": ["Deny"],
                "matchResources": {
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
                },
            },
        }
    )
    try:
        yield name
    finally:
        for delete in (
            admission.delete_validating_admission_policy_binding,
            admission.delete_validating_admission_policy,
        ):
            try:
                delete(name)
            except client.ApiException as error:
                if error.status != 404:
                    raise


def pods_bound_total(metrics: SchedulerMetrics) -> float:
    text = generate_latest(metrics.registry).decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "kai_ray_pods_bound_total":
                return float(sample.value)
    return 0.0


def pod_bound_condition(kube_api: Any, namespace: str, pod: str) -> client.V1PodCondition | None:
    found = client.CoreV1Api(kube_api).read_namespaced_pod(pod, namespace)
    return next((c for c in found.status.conditions or [] if c.type == "PodBound"), None)


def test_a_refused_binding_is_retried_and_bound_once_allowed(kube_api: Any, zone: Zone, refusal: str) -> None:
    zone.node("n")
    queue = zone.queue("q")
    # The policy takes effect a moment after it is created: wait until it refuses a dry-run probe.
    zone.pod("refused-probe", queue=queue, scheduler="nobody")
    body = client.V1Binding(
        metadata=client.V1ObjectMeta(name="refused-probe"),
        target=client.V1ObjectReference(kind="Node", name=zone.nodes[0]),
    )

    def refused() -> bool | None:
        try:
            client.CoreV1Api(kube_api).create_namespaced_pod_binding(
                "refused-probe", zone.name, body, dry_run="All", _preload_content=False
            )
        except client.ApiException as error:
            return True if POLICY_MESSAGE in str(error.body) else None
        return None

    wait_for("the admission policy to refuse bindings", refused)
    client.CoreV1Api(kube_api).delete_namespaced_pod("refused-probe", zone.name, grace_period_seconds=0)

    metrics = SchedulerMetrics()
    scheduler = KubeScheduler(
        kube_api, namespace=zone.name, metrics=metrics, grouper=PodGroupController(kube_api)
    )
    scheduler.start()
    try:
        zone.pod("refused-0", queue=queue)
        requests_deleted: list[str] = []

        def given_up() -> bool:
            return any(key.endswith("/refused-0") for key, _ in requests_deleted)

        def cycle() -> None:
            outcome = scheduler.run_cycle()
            requests_deleted.extend(outcome.cleaned.deleted)

        assert eventually(given_up, 60, cycle), "the failed BindRequest was never deleted"
        condition = pod_bound_condition(kube_api, zone.name, "refused-0")
        assert condition is not None and condition.status == "False" and condition.reason == "BindingError"
        assert POLICY_MESSAGE in condition.message
        events = (
            client.CoreV1Api(kube_api)
            .list_namespaced_event(
                zone.name, field_selector="involvedObject.name=refused-0,reason=BindingError"
            )
            .items
        )
        assert events and all(e.type == "Warning" for e in events)
        pod = client.CoreV1Api(kube_api).read_namespaced_pod("refused-0", zone.name)
        assert pod.spec.node_name is None and pod.status.phase == "Pending"
        assert pods_bound_total(metrics) == 0  # attempts are not binds

        client.AdmissionregistrationV1Api(kube_api).delete_validating_admission_policy_binding(refusal)
        assert eventually(
            lambda: (
                client.CoreV1Api(kube_api).read_namespaced_pod("refused-0", zone.name).spec.node_name
                is not None
            ),
            60,
            cycle,
        ), "the pod was never bound after the policy went away"
        assert pods_bound_total(metrics) == 1
        condition = pod_bound_condition(kube_api, zone.name, "refused-0")
        assert condition is not None and condition.status == "True"
    finally:
        scheduler.stop()


def test_nothing_is_deleted_before_the_nodes_are_known(kube_api: Any, namespace: str) -> None:
    """A cache that has not listed Nodes would make every BindRequest look like one for a lost node."""
    client.CustomObjectsApi(kube_api).create_namespaced_custom_object(
        "scheduling.run.ai",
        "v1alpha2",
        namespace,
        "bindrequests",
        {
            "apiVersion": "scheduling.run.ai/v1alpha2",
            "kind": "BindRequest",
            "metadata": {"name": "p"},
            "spec": {"podName": "p", "selectedNode": "no-such-node"},
        },
    )
    blind = ClusterCache(kube_api, namespace=namespace, kinds=["BindRequest"])
    with blind:
        assert blind.wait_synced(30)
        assert delete_stale_bind_requests(kube_api, blind).deleted == []
    seeing = ClusterCache(kube_api, namespace=namespace, kinds=["BindRequest", "Node"])
    with seeing:
        assert seeing.wait_synced(30)
        deleted = delete_stale_bind_requests(kube_api, seeing).deleted
    assert [key for key, _ in deleted] == [f"{namespace}/p"]
