"""Talk to kai-ray's API: `KaiRayClient` over gRPC, `LocalClient` to a service in the same process.

Both have the operations of `kai_ray.service.api.SchedulerService` under the same names, minus the
caller (a remote caller is whoever its token says; a local one is given once), so code written
against `SchedulerClient` -- the CLI's commands above all -- runs unchanged against a server or
offline on a manifest directory.  Failures arrive as `ServiceError` either way: a gRPC status is
turned back into the code of the same name and the field the server named, never parsed out of the
message text.

The helpers at the bottom build requests from files: a workload spec in YAML (the
`SubmitWorkloadRequest` message, keys in protobuf's JSON spelling, see `workload_spec_from_yaml`)
or ordinary Kubernetes manifests (`submit_manifests`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol, Self, TypeVar

import grpc
import yaml
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from kai_ray.service.caller import ANYONE, Caller
from kai_ray.service.errors import ErrorCode, ServiceError
from kai_ray.service.protocol import SchedulerServiceLike
from kai_ray.v1 import scheduler_pb2 as pb
from kai_ray.v1 import scheduler_pb2_grpc as pb_grpc

__all__ = [
    "DEFAULT_TIMEOUT",
    "FIELD_METADATA_KEY",
    "KaiRayClient",
    "LocalClient",
    "RemoteError",
    "SchedulerClient",
    "is_manifest_document",
    "load_documents",
    "manifests_request",
    "parse_id",
    "request_from_dict",
    "submit_manifests",
    "workload_spec_from_yaml",
]

DEFAULT_TIMEOUT = 30.0
"""Seconds a unary call may take; a hung server then fails as DEADLINE_EXCEEDED instead of hanging
the CLI forever."""

FIELD_METADATA_KEY = "kai-ray-field"
"""Trailing metadata in which the server names the request field at fault."""

_M = TypeVar("_M", bound=Message)

_WATCH_POLL_SECONDS = 0.2
"""How often a watch checks its `stop` event while the stream is idle (a gRPC stream cannot wait on
an Event, so a helper thread does, in slices this long)."""


class SchedulerClient(Protocol):
    """What the CLI needs of a client: the API's operations, whether remote or in-process."""

    def submit_workload(self, request: pb.SubmitWorkloadRequest) -> pb.SubmitWorkloadResponse: ...
    def get_workload(self, request: pb.GetWorkloadRequest) -> pb.Workload: ...
    def list_workloads(self, request: pb.ListWorkloadsRequest) -> pb.ListWorkloadsResponse: ...
    def watch_workloads(
        self, request: pb.WatchWorkloadsRequest, stop: threading.Event | None = None
    ) -> Iterator[pb.WorkloadEvent]: ...
    def cancel_workload(self, request: pb.CancelWorkloadRequest) -> pb.Workload: ...
    def explain(self, request: pb.ExplainRequest) -> pb.Explanation: ...
    def list_queues(self, request: pb.ListQueuesRequest) -> pb.ListQueuesResponse: ...
    def what_if(self, request: pb.WhatIfRequest) -> pb.WhatIfResponse: ...
    def get_cluster(self, request: pb.GetClusterRequest) -> pb.Cluster: ...
    def close(self) -> None: ...


class RemoteError(ServiceError):
    """A failed call, with the gRPC status name as the server sent it.

    ``code`` is the `ErrorCode` of the same name; statuses the API never sends on purpose
    (INTERNAL, UNKNOWN, UNIMPLEMENTED...) have none, so they are reported as UNAVAILABLE -- "the
    server could not answer" -- and ``status`` keeps the real name for the message."""

    def __init__(self, status: str, message: str, field: str | None = None) -> None:
        code = ErrorCode.__members__.get(status, ErrorCode.UNAVAILABLE)
        super().__init__(code, message if code.value == status else f"{status}: {message}", field)
        self.status = status


def _remote_error(exc: grpc.RpcError) -> RemoteError:
    """The `ServiceError` a failed call stands for: code by status name, field from the trailers."""
    status = exc.code()
    name = status.name if status is not None else "UNKNOWN"
    details = exc.details() or name
    field = None
    trailers = exc.trailing_metadata() or ()
    for key, value in trailers:
        if key == FIELD_METADATA_KEY:
            field = value.decode() if isinstance(value, bytes) else str(value)
    if field:
        # The server leads the message with the field for clients that only read the text.
        details = details.removeprefix(f"{field}: ")
    return RemoteError(name, details, field)


_Request = TypeVar("_Request", bound=Message)
_Response = TypeVar("_Response", bound=Message)

_RPCS = pb.DESCRIPTOR.services_by_name["Scheduler"].methods_by_name


def _rpc_name(operation: str) -> str:
    """The RPC of an operation: `list_queues` -> `ListQueues`."""
    return "".join(word.title() for word in operation.split("_"))


def _unary(
    operation: Callable[[SchedulerClient, _Request], _Response],
) -> Callable[[_Client, _Request], _Response]:
    """A client method for ``operation`` of `SchedulerClient` (its name and types): the client's
    `_Client._call` with the operation's name."""
    name = operation.__name__
    assert _rpc_name(name) in _RPCS, name

    def method(client: _Client, request: _Request) -> _Response:
        response: _Response = client._call(name, request)
        return response

    method.__name__ = method.__qualname__ = name
    return method


class _Client:
    """What both clients share: closing as a context manager, and the unary operations of
    `SchedulerClient`, each one `_call` naming it (``watch_workloads`` is each client's own)."""

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        raise NotImplementedError

    def _call(self, operation: str, request: Message) -> Any:
        """The answer to ``request`` by the operation of that name (`get_workload`)."""
        raise NotImplementedError

    submit_workload = _unary(SchedulerClient.submit_workload)
    get_workload = _unary(SchedulerClient.get_workload)
    list_workloads = _unary(SchedulerClient.list_workloads)
    cancel_workload = _unary(SchedulerClient.cancel_workload)
    explain = _unary(SchedulerClient.explain)
    list_queues = _unary(SchedulerClient.list_queues)
    what_if = _unary(SchedulerClient.what_if)
    get_cluster = _unary(SchedulerClient.get_cluster)


class KaiRayClient(_Client):
    """A typed client of `kai_ray.v1.Scheduler` over one channel; a context manager closing it.

    ``token`` goes in the metadata of every call (`authorization: Bearer TOKEN`), never in a log or
    an error; ``tls_ca`` (a PEM file or its bytes) switches to TLS and verifies the server with it;
    ``timeout`` is each unary call's deadline in seconds (watch streams have none: they run until
    stopped).
    """

    def __init__(
        self,
        address: str,
        token: str | None = None,
        tls_ca: Path | bytes | None = None,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> None:
        if tls_ca is not None:
            root = tls_ca.read_bytes() if isinstance(tls_ca, Path) else tls_ca
            self._channel: grpc.Channel = grpc.secure_channel(
                address, grpc.ssl_channel_credentials(root_certificates=root)
            )
        else:
            self._channel = grpc.insecure_channel(address)
        self._stub = pb_grpc.SchedulerStub(self._channel)  # type: ignore[no-untyped-call]
        self._metadata: tuple[tuple[str, str], ...] = (("authorization", f"Bearer {token}"),) if token else ()
        self._timeout = timeout
        self.address = address

    def __repr__(self) -> str:
        # No token here: a repr ends up in tracebacks and logs.
        return f"KaiRayClient({self.address!r})"

    def close(self) -> None:
        self._channel.close()

    def _call(self, operation: str, request: Message) -> Any:
        try:
            return getattr(self._stub, _rpc_name(operation))(
                request, timeout=self._timeout, metadata=self._metadata
            )
        except grpc.RpcError as exc:
            raise _remote_error(exc) from None

    def watch_workloads(
        self, request: pb.WatchWorkloadsRequest, stop: threading.Event | None = None
    ) -> Iterator[pb.WorkloadEvent]:
        """Events until the server ends the stream or ``stop`` is set (then it ends quietly).

        Leaving the loop early (break, an exception, Ctrl-C) cancels the call as well."""
        try:
            stream = self._stub.WatchWorkloads(request, metadata=self._metadata)
        except grpc.RpcError as exc:
            raise _remote_error(exc) from None
        finished = threading.Event()
        if stop is not None:
            threading.Thread(
                target=_cancel_when, args=(stream, stop, finished), name="kai-ray-watch-stop", daemon=True
            ).start()
        try:
            yield from stream
        except grpc.RpcError as exc:
            if stop is not None and stop.is_set() and exc.code() == grpc.StatusCode.CANCELLED:
                return
            raise _remote_error(exc) from None
        finally:
            finished.set()
            stream.cancel()


def _cancel_when(stream: Any, stop: threading.Event, finished: threading.Event) -> None:
    """Cancel ``stream`` once ``stop`` is set; give up once the watch has finished by itself."""
    while not finished.is_set():
        if stop.wait(_WATCH_POLL_SECONDS):
            stream.cancel()
            return


class LocalClient(_Client):
    """`SchedulerClient` over a service in this process, every call made as ``caller``.

    The CLI's offline mode (`--manifests DIR`) goes through here, so it answers exactly as a
    server over the same cluster would, errors included."""

    def __init__(self, service: SchedulerServiceLike, caller: Caller = ANYONE) -> None:
        self.service = service
        self.caller = caller

    def close(self) -> None:
        """Nothing to release: the service belongs to whoever made it."""

    def _call(self, operation: str, request: Message) -> Any:
        return getattr(self.service, operation)(request, self.caller)

    def watch_workloads(
        self, request: pb.WatchWorkloadsRequest, stop: threading.Event | None = None
    ) -> Iterator[pb.WorkloadEvent]:
        return self.service.watch_workloads(request, self.caller, stop or threading.Event())


# ------------------------------------------------------------------------------------- requests


def parse_id(text: str) -> str:
    """Check a workload id, NAMESPACE/NAME, before a round trip is spent on a typo."""
    namespace, slash, name = text.partition("/")
    if not slash or not namespace or not name or "/" in name:
        raise ServiceError(ErrorCode.INVALID_ARGUMENT, f"expected NAMESPACE/NAME, got {text!r}", "id")
    return text


def _invalid(path: str, message: str) -> ServiceError:
    return ServiceError(ErrorCode.INVALID_ARGUMENT, message, path or None)


def _scalar(field: Any, value: Any, path: str) -> Any:
    """A YAML scalar as ``field`` wants it; numbers become quantity strings (`cpu: 4`), as YAML
    makes numbers of what Kubernetes users write as quantities."""
    kind = field.type
    if kind == FieldDescriptor.TYPE_STRING:
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise _invalid(path, f"expected a string, got {value!r}")
        return str(value)
    if kind == FieldDescriptor.TYPE_BOOL:
        if not isinstance(value, bool):
            raise _invalid(path, f"expected true or false, got {value!r}")
        return value
    if kind == FieldDescriptor.TYPE_ENUM:
        enum = field.enum_type
        assert enum is not None
        names = [v.name for v in enum.values if v.number != 0]
        if not isinstance(value, str):
            raise _invalid(path, f"expected one of {', '.join(names)}, got {value!r}")
        spelled = value.upper().replace("-", "_")
        if spelled not in enum.values_by_name:
            raise _invalid(path, f"expected one of {', '.join(names)}, got {value!r}")
        return enum.values_by_name[spelled].number
    if kind in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise _invalid(path, f"expected a number, got {value!r}")
        return float(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise _invalid(path, f"expected an integer, got {value!r}")
    return value


def _fill(message: Message, data: Any, path: str) -> None:
    """Copy ``data`` (parsed YAML) into ``message``, naming the exact field of any mistake.

    Keys are the proto field names or their JSON (camelCase) spelling; paths in errors use the
    proto names, as the server's do (`workload.pod_sets[0].template.requests["cpu"]`)."""
    if not isinstance(data, Mapping):
        raise _invalid(path, f"expected a mapping, got {data!r}")
    descriptor = message.DESCRIPTOR
    by_json = {f.json_name: f for f in descriptor.fields}
    for key, value in data.items():
        field = descriptor.fields_by_name.get(str(key)) or by_json.get(str(key))
        if field is None:
            known = ", ".join(f.json_name for f in descriptor.fields)
            where = f"{path}.{key}" if path else str(key)
            raise _invalid(where, f"unknown field (known here: {known})")
        where = f"{path}.{field.name}" if path else field.name
        if value is None:
            continue
        target = getattr(message, field.name)
        message_type = field.message_type
        if message_type is not None and message_type.GetOptions().map_entry:
            if not isinstance(value, Mapping):
                raise _invalid(where, f"expected a mapping, got {value!r}")
            value_field = message_type.fields_by_name["value"]
            for entry_key, entry_value in value.items():
                entry_path = f'{where}["{entry_key}"]'
                if value_field.message_type is not None:
                    _fill(target[str(entry_key)], entry_value, entry_path)
                else:
                    target[str(entry_key)] = _scalar(value_field, entry_value, entry_path)
        elif field.is_repeated:
            if not isinstance(value, list):
                raise _invalid(where, f"expected a list, got {value!r}")
            for index, item in enumerate(value):
                item_path = f"{where}[{index}]"
                if message_type is not None:
                    _fill(target.add(), item, item_path)
                else:
                    target.append(_scalar(field, item, item_path))
        elif message_type is not None:
            _fill(target, value, where)
            if not value:
                # An empty mapping still selects a oneof member (`manifests: {}`).
                target.SetInParent()
        else:
            setattr(message, field.name, _scalar(field, value, where))


def request_from_dict(data: Any, message: _M) -> _M:
    """Fill ``message`` from parsed YAML/JSON; a mistake raises INVALID_ARGUMENT naming the field."""
    _fill(message, data, "")
    return message


def load_documents(path: Path) -> list[Any]:
    """Every YAML document of a file (JSON is YAML too), empty ones dropped."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise ServiceError(ErrorCode.INVALID_ARGUMENT, f"{path}: {exc.strerror}", "file") from None
    try:
        return [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        raise ServiceError(ErrorCode.INVALID_ARGUMENT, f"{path}: not YAML: {exc}", "file") from None


def is_manifest_document(document: Any) -> bool:
    """A Kubernetes object (it has `apiVersion` and `kind`), as opposed to a workload spec."""
    return isinstance(document, Mapping) and "apiVersion" in document and "kind" in document


def workload_spec_from_yaml(source: Path | str) -> list[pb.SubmitWorkloadRequest]:
    """The submit requests in a workload spec file (one per YAML document).

    A document is a `SubmitWorkloadRequest` (proto/kai_ray/v1/scheduler.proto), keys spelled as the
    proto fields or in camelCase, enums by name in any case, quantities as strings or numbers::

        namespace: team-a
        name: train                   # optional: from the first pod set
        workload:
          queue: team-a
          priorityClass: train        # optional
          preemptibility: preemptible # or non-preemptible; default: from the priority class
          minAvailable: 2             # the gang; 0 or absent: all pods
          podSets:
            - name: worker
              replicas: 2
              template:
                requests: {cpu: 4, memory: 16Gi, nvidia.com/gpu: 1}
                nodeSelector: {kai.scheduler/node-pool: a100}

    ``source`` is a file, or the YAML text itself."""
    if isinstance(source, Path):
        documents = load_documents(source)
        where = f"{source}: "
    else:
        try:
            documents = [d for d in yaml.safe_load_all(source) if d is not None]
        except yaml.YAMLError as exc:
            raise ServiceError(ErrorCode.INVALID_ARGUMENT, f"not YAML: {exc}", "file") from None
        where = ""
    if not documents:
        raise ServiceError(ErrorCode.INVALID_ARGUMENT, f"{where}no workload in it", "file")
    requests = []
    for index, document in enumerate(documents):
        if is_manifest_document(document):
            raise ServiceError(
                ErrorCode.INVALID_ARGUMENT,
                f"{where}document {index + 1} is a Kubernetes {document['kind']}, not a workload spec",
                "file",
            )
        try:
            requests.append(request_from_dict(document, pb.SubmitWorkloadRequest()))
        except ServiceError as exc:
            raise ServiceError(exc.code, f"{where}{exc.message}", exc.field) from None
    return requests


def manifests_request(
    documents: Sequence[Any], namespace: str | None = None, name: str | None = None
) -> pb.SubmitWorkloadRequest:
    """One submit of Kubernetes manifests; the namespace defaults to the one they all name."""
    if not documents:
        raise ServiceError(ErrorCode.INVALID_ARGUMENT, "no Kubernetes manifests", "manifests.documents")
    if namespace is None:
        named = {
            str(d.get("metadata", {}).get("namespace"))
            for d in documents
            if isinstance(d, Mapping)
            and isinstance(d.get("metadata"), Mapping)
            and d["metadata"].get("namespace")
        }
        if len(named) != 1:
            found = ", ".join(sorted(named)) or "none"
            raise ServiceError(
                ErrorCode.INVALID_ARGUMENT,
                f"the manifests must name exactly one namespace (found: {found}); give it explicitly",
                "namespace",
            )
        namespace = named.pop()
    text = [yaml.safe_dump(d, sort_keys=False) for d in documents]
    return pb.SubmitWorkloadRequest(
        namespace=namespace, name=name or "", manifests=pb.Manifests(documents=text)
    )


def submit_manifests(
    client: SchedulerClient, namespace: str | None, paths: Iterable[Path]
) -> list[pb.SubmitWorkloadResponse]:
    """Submit each file of Kubernetes manifests as one workload (a RayJob and its ConfigMap, a
    PyTorchJob...); stops at the first refusal, which is raised."""
    return [client.submit_workload(manifests_request(load_documents(path), namespace)) for path in paths]
