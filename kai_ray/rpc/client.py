"""Talk to kai-ray's API: `KaiRayClient` over gRPC, `LocalClient` to a service in the same process.

Both have the operations of `kai_ray.rpc.api.SchedulerService` under the same names, minus the
caller (a remote caller is whoever its token says; a local one is given once), so code written
against `SchedulerClient` -- the CLI's commands above all -- runs unchanged against a server or
offline on a manifest directory.  Failures arrive as `ServiceError` either way: a gRPC status is
turned back into the code of the same name and the field the server named, never parsed out of the
message text.

`WorkloadFollower` (``client.follow_workloads``) is a watch that outlives the server, as a
Kubernetes informer does: it reconnects when the server goes away, resumes from the last token,
and after a restart (whose tokens the new process cannot bridge) turns a fresh listing into the
events the caller missed.

Requests built from files (a workload spec in YAML, keys in protobuf's JSON spelling, or
ordinary Kubernetes manifests) are `kai_ray.rpc.requests`'.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol, Self, TypeVar

import grpc
from google.protobuf.message import Message

from kai_ray.rpc.caller import ANYONE, Caller
from kai_ray.rpc.errors import ErrorCode, ServiceError
from kai_ray.rpc.protocol import SchedulerServiceLike
from kai_ray.v1 import scheduler_pb2 as pb
from kai_ray.v1 import scheduler_pb2_grpc as pb_grpc

__all__ = [
    "DEFAULT_RECONNECT_TIMEOUT",
    "DEFAULT_TIMEOUT",
    "FIELD_METADATA_KEY",
    "KaiRayClient",
    "LocalClient",
    "RemoteError",
    "SchedulerClient",
    "WorkloadFollower",
    "WorkloadSource",
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

DEFAULT_RECONNECT_TIMEOUT = 300.0
"""Seconds a `WorkloadFollower` keeps reconnecting through one outage: long enough for a server's
restart (a rolling update, a rescheduled pod), short enough that a server gone for good is
reported rather than waited for forever."""

_FIRST_RETRY_SECONDS = 0.1
_MAX_RETRY_SECONDS = 5.0
"""The follower's reconnect waits double from the first to the last of these (each then jittered
down by up to half, so many followers of one server do not all come back at the same instant)."""

_SETTLED_SECONDS = 30.0
"""A stream that stayed open this long without failing had reached the server, even if nothing
happened to send.  Longer than gRPC's 20 s connection timeout, so a connection attempt hanging on
an unreachable host is not mistaken for an open stream."""

_CHANNEL_OPTIONS = [("grpc.max_reconnect_backoff_ms", int(_MAX_RETRY_SECONDS * 1000))]
"""gRPC's own reconnection backoff grows to 120 s by default: a channel whose server was away
that long would then sit out up to two minutes after it came back.  Capped like the follower's."""


class SchedulerClient(Protocol):
    """What the CLI needs of a client: the API's operations, whether remote or in-process."""

    def submit_workload(self, request: pb.SubmitWorkloadRequest) -> pb.SubmitWorkloadResponse: ...
    def get_workload(self, request: pb.GetWorkloadRequest) -> pb.Workload: ...
    def list_workloads(self, request: pb.ListWorkloadsRequest) -> pb.ListWorkloadsResponse: ...
    def watch_workloads(
        self, request: pb.WatchWorkloadsRequest, stop: threading.Event | None = None
    ) -> Iterator[pb.WorkloadEvent]: ...
    def follow_workloads(
        self,
        request: pb.WatchWorkloadsRequest,
        stop: threading.Event | None = None,
        *,
        reconnect_timeout: float = DEFAULT_RECONNECT_TIMEOUT,
    ) -> WorkloadFollower: ...
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

    def watch_workloads(
        self, request: pb.WatchWorkloadsRequest, stop: threading.Event | None = None
    ) -> Iterator[pb.WorkloadEvent]:
        """Each client's own: a gRPC stream, or the service's generator."""
        raise NotImplementedError

    def follow_workloads(
        self,
        request: pb.WatchWorkloadsRequest,
        stop: threading.Event | None = None,
        *,
        reconnect_timeout: float = DEFAULT_RECONNECT_TIMEOUT,
    ) -> WorkloadFollower:
        """A watch that survives the server's restarts (`WorkloadFollower`)."""
        return WorkloadFollower(self, request, stop, reconnect_timeout=reconnect_timeout)

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
    ``tls_cert`` and ``tls_key`` (PEM files or bytes, both or neither) are this client's
    certificate and key, for a server that requires one (`serve --tls-client-ca`); they switch to
    TLS too, trusting the system's CAs unless ``tls_ca`` is given.  ``timeout`` is each unary
    call's deadline in seconds (watch streams have none: they run until stopped).
    """

    def __init__(
        self,
        address: str,
        token: str | None = None,
        tls_ca: Path | bytes | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        *,
        tls_cert: Path | bytes | None = None,
        tls_key: Path | bytes | None = None,
    ) -> None:
        if (tls_cert is None) != (tls_key is None):
            # One without the other cannot be used, and would otherwise surface only as a failed
            # handshake on the first call.
            raise ValueError("tls_cert and tls_key go together: give both (a client certificate) or neither")
        if tls_ca is not None or tls_cert is not None:
            credentials = grpc.ssl_channel_credentials(
                root_certificates=_pem(tls_ca), private_key=_pem(tls_key), certificate_chain=_pem(tls_cert)
            )
            self._channel: grpc.Channel = grpc.secure_channel(address, credentials, _CHANNEL_OPTIONS)
        else:
            self._channel = grpc.insecure_channel(address, _CHANNEL_OPTIONS)
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


def _pem(source: Path | bytes | None) -> bytes | None:
    return source.read_bytes() if isinstance(source, Path) else source


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


# ------------------------------------------------------------------------------------- following


class WorkloadSource(Protocol):
    """What a `WorkloadFollower` needs of a client: the watch, and the list it relists with."""

    def list_workloads(self, request: pb.ListWorkloadsRequest) -> pb.ListWorkloadsResponse: ...
    def watch_workloads(
        self, request: pb.WatchWorkloadsRequest, stop: threading.Event | None = None
    ) -> Iterator[pb.WorkloadEvent]: ...


class WorkloadFollower:
    """The events of a watch that outlives the server, as a Kubernetes informer's are.

    Iterating it watches ``request`` through ``client`` and yields its events, remembering the last
    resume token (`resume_token`) and the last known state of every workload (`workloads`).  When
    the stream breaks with UNAVAILABLE (the server stopping or unreachable) it reconnects, waiting
    between attempts with jittered exponential backoff (0.1 s doubling to 5 s), and resumes from the
    token.  When the server no longer knows the token (OUT_OF_RANGE: a restarted server numbers its
    events afresh) it lists the workloads and watches again without a token; the caller sees only
    what it missed: DELETED (with the last known state, and no resume token) for workloads gone,
    then MODIFIED for changed ones and ADDED for new ones, where the new watch's opening ADDED
    events would otherwise repeat what the caller already has.  Unchanged workloads send nothing.

    It gives up with UNAVAILABLE once an outage has lasted ``reconnect_timeout`` seconds (0: at
    once, as a plain watch does), and at once if the server was never reached: a wrong address or
    a server that is down at the start is reported, not waited for.  Any other error
    (PERMISSION_DENIED, UNAUTHENTICATED, INVALID_ARGUMENT...) is raised at once: retrying cannot
    mend it.  So is OUT_OF_RANGE for a token the caller gave, since the follower cannot know which
    workloads the caller had to tell what was deleted.  Setting ``stop`` ends it quietly, and so
    does a stream the server ends without an error (it is done, not gone).

    A stream broken halfway through a watch's opening ADDED events leaves no token to skip the
    rest (only the last of them carries one), so the follower lists again.  One gap this API
    cannot close: a workload deleted between the relist's listing and the start of the new watch
    is reported DELETED only at the next relist.
    """

    def __init__(
        self,
        client: WorkloadSource,
        request: pb.WatchWorkloadsRequest,
        stop: threading.Event | None = None,
        *,
        reconnect_timeout: float = DEFAULT_RECONNECT_TIMEOUT,
    ) -> None:
        self.resume_token = request.resume_token
        self.workloads: dict[str, pb.Workload] = {}
        self._client = client
        self._namespace, self._queue = request.namespace, request.queue
        self._stop = stop or threading.Event()
        self._reconnect_timeout = reconnect_timeout
        # Only a follower that began with the whole listing knows what the caller has, so only it
        # can turn a relist into the events the caller missed.
        self._complete = not request.resume_token

    def __iter__(self) -> Iterator[pb.WorkloadEvent]:
        delay = _FIRST_RETRY_SECONDS
        outage_since: float | None = None  # when the current outage began; None before any
        while not self._stop.is_set():
            started, reached = time.monotonic(), False
            try:
                if not self.resume_token and self.workloads:
                    deleted = self._relist()
                    reached = True
                    yield from deleted
                stream = self._client.watch_workloads(
                    pb.WatchWorkloadsRequest(
                        namespace=self._namespace, queue=self._queue, resume_token=self.resume_token
                    ),
                    self._stop,
                )
                try:
                    for event in stream:
                        reached = True
                        missed = self._absorb(event)
                        if missed is not None:
                            yield missed
                finally:
                    close = getattr(stream, "close", None)
                    if close is not None:
                        close()
                return
            except ServiceError as error:
                if self._stop.is_set():
                    return
                status = _status(error)
                if status == ErrorCode.OUT_OF_RANGE.value and self._complete and self.resume_token:
                    self.resume_token = ""  # relist at once: the server is there
                    continue
                if status != ErrorCode.UNAVAILABLE.value:
                    raise
                now = time.monotonic()
                if reached or now - started >= _SETTLED_SECONDS:
                    outage_since, delay = now, _FIRST_RETRY_SECONDS
                if outage_since is None or self._reconnect_timeout <= 0:
                    raise
                remaining = outage_since + self._reconnect_timeout - now
                if remaining <= 0:
                    raise RemoteError(
                        status,
                        f"the server did not come back within {self._reconnect_timeout:g} s: {error.message}",
                        error.field,
                    ) from error
                if self._stop.wait(min(random.uniform(delay / 2, delay), remaining)):
                    return
                delay = min(delay * 2, _MAX_RETRY_SECONDS)

    def _absorb(self, event: pb.WorkloadEvent) -> pb.WorkloadEvent | None:
        """Remember ``event``; what the caller should see of it, None if nothing is new to it.

        An ADDED event of a workload already known is the opening listing of a new watch: nothing
        if the workload is as the caller knows it, else the MODIFIED it missed."""
        self.resume_token = event.resume_token or self.resume_token
        workload = event.workload
        if event.type == pb.WorkloadEvent.DELETED:
            self.workloads.pop(workload.id, None)
            return event
        known = self.workloads.get(workload.id)
        self.workloads[workload.id] = workload
        if event.type != pb.WorkloadEvent.ADDED or known is None:
            return event
        if _comparable(known) == _comparable(workload):
            return None
        return pb.WorkloadEvent(
            type=pb.WorkloadEvent.MODIFIED, workload=workload, resume_token=event.resume_token
        )

    def _relist(self) -> list[pb.WorkloadEvent]:
        """DELETED for every known workload the server no longer lists (forgotten here too).

        New and changed workloads are left to the new watch's opening ADDED events, whose last
        carries a resume token; a listing has none."""
        listed: set[str] = set()
        # 1000: the most a page may hold.
        request = pb.ListWorkloadsRequest(namespace=self._namespace, queue=self._queue, page_size=1000)
        while True:
            page = self._client.list_workloads(request)
            listed.update(w.id for w in page.workloads)
            if not page.next_page_token:
                break
            request.page_token = page.next_page_token
        gone = sorted(set(self.workloads) - listed)
        return [pb.WorkloadEvent(type=pb.WorkloadEvent.DELETED, workload=self.workloads.pop(i)) for i in gone]


def _status(error: ServiceError) -> str:
    """The status an error came with: a `RemoteError`'s own (INTERNAL stays INTERNAL, not the
    UNAVAILABLE it is reported as), else its code's."""
    return error.status if isinstance(error, RemoteError) else error.code.value


def _comparable(workload: pb.Workload) -> pb.Workload:
    """``workload`` without what a restarted server re-derives without anything having changed:
    `last_transition` (reset to when the new process first saw the workload; a real transition
    changes the state as well) and the order of its PodGroups and pods (the order it found them)."""
    copy = pb.Workload()
    copy.CopyFrom(workload)
    copy.ClearField("last_transition")
    copy.pod_groups.sort()
    copy.placements.sort(key=lambda p: (p.pod, p.node))
    return copy
