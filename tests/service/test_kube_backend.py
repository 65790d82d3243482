"""`KubeBackend`'s writes against a scripted API server: status mapping, all-or-nothing creates,
timeouts on every call, and the body sent.  The real API server is in tests/kube/test_kube_grpc.py.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import pytest
import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from service_builders import NOW, cluster, gpu_job

from kai_ray.api.config import SchedulerConfig
from kai_ray.cluster.kube.cache import ClusterCache
from kai_ray.cluster.kube.planner import CycleListener
from kai_ray.rpc.api import SchedulerService
from kai_ray.rpc.caller import ANYONE
from kai_ray.rpc.errors import ErrorCode, ServiceError
from kai_ray.rpc.kube_backend import CONNECT_TIMEOUT, SUBMISSION_ANNOTATION, KubeBackend
from kai_ray.rpc.sim_backend import SimBackend
from kai_ray.rpc.submit import build_submission

pytestmark = pytest.mark.unit

Answer = Callable[[str, str, dict[str, Any] | None], Any]


@dataclass
class _Raw:
    data: bytes


@dataclass
class _Response:
    status: int
    response: _Raw


@dataclass
class Call:
    method: str
    url: str
    body: Any
    timeout: Any


class ScriptedApi(client.ApiClient):
    """Answers every request with `answer(method, url, body)`: an object to return (201), or an
    exception to raise; records each call with its timeout."""

    def __init__(self, answer: Answer) -> None:
        super().__init__(client.Configuration())
        self.answer = answer
        self.calls: list[Call] = []
        self._lock = threading.Lock()

    def call_api(
        self,
        method: str,
        url: str,
        header_params: Any = None,
        body: Any = None,
        post_params: Any = None,
        _request_timeout: Any = None,
    ) -> Any:
        with self._lock:
            self.calls.append(Call(method, url.split("?", 1)[0], body, _request_timeout))
        result = self.answer(method, url, body)
        if isinstance(result, BaseException):
            raise result
        return _Response(201 if method == "POST" else 200, _Raw(json.dumps(result).encode()))

    def deletes(self) -> list[Call]:
        return [c for c in self.calls if c.method == "DELETE"]


@dataclass
class FakeScheduler:
    api: Any
    config: SchedulerConfig = field(default_factory=SchedulerConfig)
    cache: ClusterCache = field(init=False)
    listeners: list[CycleListener] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.cache = ClusterCache(self.api)

    def add_cycle_listener(self, listener: CycleListener) -> None:
        self.listeners.append(listener)


def created(body: dict[str, Any] | None) -> dict[str, Any]:
    """What the API server answers a create with: the object, with a uid and resourceVersion."""
    assert body is not None
    meta = body["metadata"]
    return {**body, "metadata": {**meta, "uid": f"uid-{meta['name']}", "resourceVersion": "7"}}


def refuse(status: int, **details: Any) -> ApiException:
    error = ApiException(status=status, reason="refused")
    error.body = json.dumps({"kind": "Status", "message": f"refused with {status}", "details": details})
    return error


def objects(replicas: int = 3) -> list[Any]:
    view = SimBackend(cluster(), clock=lambda: NOW).view()
    return build_submission(gpu_job("ml", "w", "team-a", replicas, 1), ANYONE, view).objects


@pytest.fixture
def backend_for() -> Iterator[Callable[[Answer], tuple[KubeBackend, ScriptedApi]]]:
    made: list[KubeBackend] = []

    def make(answer: Answer) -> tuple[KubeBackend, ScriptedApi]:
        api = ScriptedApi(answer)
        backend = KubeBackend(FakeScheduler(api), api=api, timeout=3.0)
        made.append(backend)
        return backend, api

    yield make
    for backend in made:
        backend.close()


class Server:
    """A tiny API server for pods and PodGroups: creates store, reads and deletes find what is
    stored (404 otherwise).  `fail` names the object whose create fails, with `error`; when
    `happens_anyway`, the create is stored first (a timeout after the server did the work)."""

    def __init__(self, fail: str, error: BaseException, happens_anyway: bool = False) -> None:
        self.fail, self.error, self.happens_anyway = fail, error, happens_anyway
        self.objects: dict[str, dict[str, Any]] = {}

    def __call__(self, method: str, url: str, body: dict[str, Any] | None) -> Any:
        path = urlsplit(url).path
        if method == "POST":
            assert body is not None
            name = body["metadata"]["name"]
            obj = created(body)
            if name == self.fail:
                if self.happens_anyway:
                    self.objects[f"{path}/{name}"] = obj
                return self.error
            self.objects[f"{path}/{name}"] = obj
            return obj
        if path not in self.objects:
            return refuse(404)
        return self.objects.pop(path) if method == "DELETE" else self.objects[path]


def fail_on(name: str, error: BaseException) -> Answer:
    return Server(name, error)


@pytest.mark.parametrize(
    ("error", "code", "field_name"),
    [
        (refuse(403), ErrorCode.PERMISSION_DENIED, None),
        (refuse(409), ErrorCode.ALREADY_EXISTS, "name"),
        (
            refuse(422, causes=[{"field": "spec.containers[0].image"}]),
            ErrorCode.INVALID_ARGUMENT,
            "spec.containers[0].image",
        ),
        (refuse(500), ErrorCode.UNAVAILABLE, None),
        (urllib3.exceptions.ReadTimeoutError(None, "/api", "read timed out"), ErrorCode.UNAVAILABLE, None),
    ],
)
def test_a_failed_create_is_rolled_back_and_mapped(
    backend_for: Callable[[Answer], tuple[KubeBackend, ScriptedApi]],
    error: BaseException,
    code: ErrorCode,
    field_name: str | None,
) -> None:
    backend, api = backend_for(fail_on("w-1", error))
    with pytest.raises(ServiceError) as raised:
        backend.create(objects())
    assert raised.value.code == code and raised.value.field == field_name
    assert "w-1" in raised.value.message
    posted = {c.body["metadata"]["name"] for c in api.calls if c.method == "POST"}
    assert "w" in posted and "w-1" in posted
    # Exactly what was created is deleted again, at once, and only that very object (its uid).
    made = posted - {"w-1"}
    assert not [c for c in api.calls if c.method == "GET" and not c.url.endswith("/w-1")]
    deleted = {c.url.rsplit("/", 1)[1]: c.body for c in api.deletes()}
    assert set(deleted) == made
    assert all(body == {"preconditions": {"uid": f"uid-{name}"}} for name, body in deleted.items())
    # Pods before their PodGroup.
    assert api.deletes()[-1].url.endswith("/podgroups/w")
    assert all(c.timeout == (CONNECT_TIMEOUT, 3.0) for c in api.calls)


def test_a_create_that_timed_out_but_happened_is_rolled_back_too(
    backend_for: Callable[[Answer], tuple[KubeBackend, ScriptedApi]],
) -> None:
    timeout = urllib3.exceptions.ReadTimeoutError(None, "/api", "read timed out")
    server = Server("w-1", timeout, happens_anyway=True)
    backend, api = backend_for(server)
    with pytest.raises(ServiceError) as raised:
        backend.create(objects())
    assert raised.value.code == ErrorCode.UNAVAILABLE
    assert server.objects == {}, "the pod whose create timed out is still there"
    deleted = {c.url.rsplit("/", 1)[1]: c.body for c in api.deletes()}
    assert deleted["w-1"] == {"preconditions": {"uid": "uid-w-1"}}


def test_an_object_of_someone_else_under_a_timed_out_name_is_left_alone(
    backend_for: Callable[[Answer], tuple[KubeBackend, ScriptedApi]],
) -> None:
    timeout = urllib3.exceptions.ReadTimeoutError(None, "/api", "read timed out")
    server = Server("w-1", timeout)
    backend, _ = backend_for(server)
    squatter = {"metadata": {"name": "w-1", "namespace": "ml", "uid": "theirs", "annotations": {}}}
    server.objects["/api/v1/namespaces/ml/pods/w-1"] = squatter
    with pytest.raises(ServiceError):
        backend.create(objects())
    assert list(server.objects.values()) == [squatter]


def test_a_rollback_that_fails_says_what_is_left(
    backend_for: Callable[[Answer], tuple[KubeBackend, ScriptedApi]],
) -> None:
    def answer(method: str, url: str, body: dict[str, Any] | None) -> Any:
        if method == "DELETE":
            return refuse(503)
        return fail_on("w-2", refuse(409))(method, url, body)

    backend, _ = backend_for(answer)
    with pytest.raises(ServiceError) as raised:
        backend.create(objects())
    assert raised.value.code == ErrorCode.ALREADY_EXISTS
    assert "could not be removed" in raised.value.message and "PodGroup ml/w" in raised.value.message


def test_the_body_is_what_kubernetes_accepts(
    backend_for: Callable[[Answer], tuple[KubeBackend, ScriptedApi]],
) -> None:
    backend, api = backend_for(fail_on("none", refuse(500)))
    backend.create(objects(1))
    group, pod = (c.body for c in api.calls)
    assert group["spec"] == {"minMember": 1, "queue": "team-a"}
    token = group["metadata"]["annotations"][SUBMISSION_ANNOTATION]
    assert pod["metadata"]["annotations"] == {"pod-group-name": "w", SUBMISSION_ANNOTATION: token}
    assert "creationTimestamp" not in group["metadata"] and "status" not in pod
    container = pod["spec"]["containers"][0]
    # Extended resources are not overcommitted: their limit is the request; cpu has none.
    assert container["resources"]["limits"] == {"nvidia.com/gpu": "1"}
    assert "overhead" not in pod["spec"] and "nodeName" not in pod["spec"]


def test_deleting_tolerates_what_is_gone_and_reports_the_rest(
    backend_for: Callable[[Answer], tuple[KubeBackend, ScriptedApi]],
) -> None:
    def answer(method: str, url: str, body: dict[str, Any] | None) -> Any:
        return refuse(404) if url.endswith("/w-0") else refuse(403) if url.endswith("/w-1") else {}

    backend, api = backend_for(answer)
    with pytest.raises(ServiceError) as raised:
        backend.delete([("Pod", "ml", "w-0"), ("Pod", "ml", "w-1"), ("PodGroup", "ml", "w")])
    assert raised.value.code == ErrorCode.PERMISSION_DENIED
    assert len(api.deletes()) == 3  # every key was tried


def test_the_api_is_unavailable_until_the_cache_has_listed_the_cluster(
    backend_for: Callable[[Answer], tuple[KubeBackend, ScriptedApi]],
) -> None:
    backend, _ = backend_for(fail_on("none", refuse(500)))
    with pytest.raises(ServiceError) as raised:
        backend.view()
    assert raised.value.code == ErrorCode.UNAVAILABLE
    service = SchedulerService(backend)  # starts empty rather than failing
    with pytest.raises(ServiceError) as refused:
        service.submit_workload(gpu_job("ml", "w", "team-a", 1, 1), ANYONE)
    assert refused.value.code == ErrorCode.UNAVAILABLE
