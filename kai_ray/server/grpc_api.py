"""The gRPC transport of the API (`kai_ray.v1.Scheduler`): requests in, service calls, statuses out.

This module knows gRPC and nothing of scheduling; `kai_ray.service` knows scheduling and nothing
of gRPC.  What lives here is what a transport must decide:

* **Statuses.**  A `ServiceError` becomes the gRPC status of the same name; for bad input the
  field at fault leads the message (``workload.pod_sets[0].replicas: must be >= 1``) and is also
  sent alone as trailing metadata ``kai-ray-field``, so a client switches on data, not text.
  Anything else raised is a bug: INTERNAL with a fixed message (a traceback tells a client
  nothing it can act on, and may tell an attacker a lot), and one log record for the operator.
* **Threads.**  grpc's sync server runs each RPC on a worker thread for its whole life, so a
  `WatchWorkloads` stream holds a thread until it ends.  The pool is sized for
  ``max_watch_streams`` streams plus a reserve for unary calls, and watches beyond the limit are
  refused (RESOURCE_EXHAUSTED) instead of queueing: a queued unary call behind streams that never
  end would hang forever.  ``maximum_concurrent_rpcs`` equals the pool, so an overloaded server
  answers RESOURCE_EXHAUSTED at once too.  Threads are started lazily; an idle server has few.
* **Shutdown.**  `RunningServer.stop` stops taking calls, ends every watch (sets its stop event;
  the client gets UNAVAILABLE, the retryable status, and resumes from its last token elsewhere)
  and gives unary calls ``grace`` seconds to finish.
* **Around the API**: `grpc.health.v1.Health` (SERVING for ``""`` and the Scheduler service),
  server reflection, a receive limit on message size (RESOURCE_EXHAUSTED from grpc itself), TLS
  and tokens (`kai_ray.server.grpc_auth`).

`start_grpc_server` is the one entry point; ``kai-ray serve --grpc-address`` calls it.
"""

from __future__ import annotations

import ipaddress
import logging
import threading
from collections.abc import Callable, Iterator
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any, NoReturn, TypeVar

import grpc
from google.protobuf.message import Message
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from kai_ray.server.grpc_auth import TlsConfig, TokenAuthInterceptor, TokenTable, current_caller
from kai_ray.service.caller import Caller
from kai_ray.service.errors import ServiceError
from kai_ray.service.protocol import SchedulerServiceLike
from kai_ray.v1 import scheduler_pb2 as pb
from kai_ray.v1 import scheduler_pb2_grpc as pb_grpc

__all__ = [
    "DEFAULT_MAX_MESSAGE_BYTES",
    "DEFAULT_MAX_WATCH_STREAMS",
    "FIELD_METADATA_KEY",
    "SCHEDULER_SERVICE",
    "UNARY_WORKERS",
    "GrpcStartError",
    "RunningServer",
    "SchedulerServiceLike",
    "SchedulerServicer",
    "WatchStreams",
    "start_grpc_server",
    "status_code",
]

log = logging.getLogger(__name__)

SCHEDULER_SERVICE: str = pb.DESCRIPTOR.services_by_name["Scheduler"].full_name
#: Trailing metadata naming the request field a refused call is about (bad input only).
FIELD_METADATA_KEY = "kai-ray-field"
#: Largest request accepted; larger ones get RESOURCE_EXHAUSTED from grpc before any handler
#: runs.  4 MiB is grpc's own default, stated so it is a decision: a submit of manifests is a
#: few KiB, and a client sending megabytes is mistaken or hostile.
DEFAULT_MAX_MESSAGE_BYTES = 4 * 1024 * 1024
#: Concurrent `WatchWorkloads` streams (each holds a worker thread while open).
DEFAULT_MAX_WATCH_STREAMS = 512
#: Worker threads beyond the watch streams: unary calls, health and reflection always find one.
UNARY_WORKERS = 64
#: How long `RunningServer.stop` waits for grpc to wind down after the grace period.
_STOP_SLACK_SECONDS = 5.0
_INTERNAL_MESSAGE = "internal error in the kai-ray server (details are in its log)"


class GrpcStartError(RuntimeError):
    """The gRPC server could not start (the address is taken or invalid, TLS files unusable)."""


class WatchStreams:
    """The stop events of the open watch streams, bounded, so shutdown can end them all."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        self._open: set[threading.Event] = set()
        self._closing = False

    def open(self) -> threading.Event | None:
        """A new stream's stop event, or None when ``limit`` streams are open or the server stops."""
        with self._lock:
            if self._closing or len(self._open) >= self.limit:
                return None
            stop = threading.Event()
            self._open.add(stop)
            return stop

    def close(self, stop: threading.Event) -> None:
        stop.set()
        with self._lock:
            self._open.discard(stop)

    def __len__(self) -> int:
        with self._lock:
            return len(self._open)

    @property
    def closing(self) -> bool:
        return self._closing

    def close_all(self) -> None:
        """Refuse new streams and tell every open one to end."""
        with self._lock:
            self._closing = True
            streams = list(self._open)
        for stop in streams:
            stop.set()


_Request = TypeVar("_Request", bound=Message)
_Response = TypeVar("_Response", bound=Message)


class SchedulerServicer(pb_grpc.SchedulerServicer):
    """Maps each RPC of `kai_ray.v1.Scheduler` to the service method of the same meaning.

    The caller is read at the start of each handler (`current_caller`, bound by the token
    interceptor; `ANYONE` without tokens) and passed explicitly, so the service layer never
    depends on how the transport authenticates.
    """

    def __init__(self, service: SchedulerServiceLike, streams: WatchStreams) -> None:
        self._service = service
        self._streams = streams

    def SubmitWorkload(self, request: pb.SubmitWorkloadRequest, context: Any) -> pb.SubmitWorkloadResponse:
        return self._unary("SubmitWorkload", self._service.submit_workload, request, context)

    def GetWorkload(self, request: pb.GetWorkloadRequest, context: Any) -> pb.Workload:
        return self._unary("GetWorkload", self._service.get_workload, request, context)

    def ListWorkloads(self, request: pb.ListWorkloadsRequest, context: Any) -> pb.ListWorkloadsResponse:
        return self._unary("ListWorkloads", self._service.list_workloads, request, context)

    def CancelWorkload(self, request: pb.CancelWorkloadRequest, context: Any) -> pb.Workload:
        return self._unary("CancelWorkload", self._service.cancel_workload, request, context)

    def Explain(self, request: pb.ExplainRequest, context: Any) -> pb.Explanation:
        return self._unary("Explain", self._service.explain, request, context)

    def ListQueues(self, request: pb.ListQueuesRequest, context: Any) -> pb.ListQueuesResponse:
        return self._unary("ListQueues", self._service.list_queues, request, context)

    def WhatIf(self, request: pb.WhatIfRequest, context: Any) -> pb.WhatIfResponse:
        return self._unary("WhatIf", self._service.what_if, request, context)

    def GetCluster(self, request: pb.GetClusterRequest, context: Any) -> pb.Cluster:
        return self._unary("GetCluster", self._service.get_cluster, request, context)

    def WatchWorkloads(self, request: pb.WatchWorkloadsRequest, context: Any) -> Iterator[pb.WorkloadEvent]:
        # Not a generator itself: the caller and the stream slot are taken now, while the caller
        # binding of this handler call is in force, and a refusal is immediate.
        caller = current_caller()
        stop = self._streams.open()
        if stop is None:
            if self._streams.closing:
                _abort(context, grpc.StatusCode.UNAVAILABLE, "the server is shutting down")
            _abort(
                context,
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"too many watch streams open (at most {self._streams.limit}); retry later",
            )
        # Fires when the RPC ends for any reason, the client's cancel or disconnect included:
        # the service's blocking iterator then returns and the worker thread is freed.
        if not context.add_callback(stop.set):
            stop.set()
        return self._watch(request, caller, stop, context)

    def _watch(
        self, request: pb.WatchWorkloadsRequest, caller: Caller, stop: threading.Event, context: Any
    ) -> Iterator[pb.WorkloadEvent]:
        events: Iterator[pb.WorkloadEvent] | None = None
        failure: ServiceError | None = None
        try:
            try:
                events = self._service.watch_workloads(request, caller, stop)
                yield from events
            except ServiceError as error:
                failure = error
            except Exception:
                log.error("WatchWorkloads failed", exc_info=True)
                _abort(context, grpc.StatusCode.INTERNAL, _INTERNAL_MESSAGE)
            if failure is not None:
                _abort_service_error(context, failure)
            if self._streams.closing:
                _abort(
                    context,
                    grpc.StatusCode.UNAVAILABLE,
                    "the server is shutting down; watch again from the last resume_token",
                )
        finally:
            close = getattr(events, "close", None)
            if close is not None:
                close()
            self._streams.close(stop)

    def _unary(
        self,
        name: str,
        method: Callable[[_Request, Caller], _Response],
        request: _Request,
        context: Any,
    ) -> _Response:
        caller = current_caller()
        try:
            return method(request, caller)
        except ServiceError as error:
            failure = error
        except Exception:
            # One record (one line in serve's JSON log) with the traceback for the operator;
            # the client gets a fixed message.
            log.error("%s failed", name, exc_info=True)
            _abort(context, grpc.StatusCode.INTERNAL, _INTERNAL_MESSAGE)
        log.debug("%s refused: %s", name, failure.code)
        _abort_service_error(context, failure)


def _abort(context: Any, code: grpc.StatusCode, message: str) -> NoReturn:
    context.abort(code, message)
    raise AssertionError("grpc's context.abort returned")  # it raises; this satisfies NoReturn


def status_code(error: ServiceError) -> grpc.StatusCode:
    """The gRPC status of an `ErrorCode`: the one of the same name (they are defined so)."""
    return grpc.StatusCode[error.code.name]


def _abort_service_error(context: Any, error: ServiceError) -> NoReturn:
    message = error.message
    if error.field:
        message = f"{error.field}: {message}"
        # Metadata values must be printable ASCII; a field path quoting a user's map key might
        # not be, so it is escaped rather than dropped.
        ascii_field = error.field.encode("ascii", "backslashreplace").decode("ascii")
        context.set_trailing_metadata(((FIELD_METADATA_KEY, ascii_field),))
    _abort(context, status_code(error), message)


@dataclass
class RunningServer:
    """A started gRPC server: its bound ``port`` (the real one when the address asked for 0)."""

    server: Any
    port: int
    address: str
    health: Any
    streams: WatchStreams
    _stopped: bool = field(default=False, repr=False)

    def stop(self, grace: float | None = 5.0) -> None:
        """Stop serving: health turns NOT_SERVING, new calls are refused, every watch stream ends
        now (UNAVAILABLE, so clients resume elsewhere), unary calls get ``grace`` seconds.
        Idempotent."""
        if self._stopped:
            return
        self._stopped = True
        self.health.enter_graceful_shutdown()
        done = self.server.stop(grace)
        self.streams.close_all()
        if not done.wait((grace or 0.0) + _STOP_SLACK_SECONDS):
            log.warning("the gRPC server did not stop within %.1fs of its grace period", _STOP_SLACK_SECONDS)

    def wait_for_termination(self, timeout: float | None = None) -> bool:
        """Block until the server stops (or ``timeout``); True when it has stopped."""
        return bool(self.server.wait_for_termination(timeout))

    def __enter__(self) -> RunningServer:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop(grace=1.0)


def start_grpc_server(
    service: SchedulerServiceLike,
    address: str,
    tls: TlsConfig | None = None,
    tokens: TokenTable | None = None,
    *,
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    max_watch_streams: int = DEFAULT_MAX_WATCH_STREAMS,
) -> RunningServer:
    """Serve ``service`` as `kai_ray.v1.Scheduler` on ``address`` (``HOST:PORT``; port 0 picks a
    free one, see `RunningServer.port`), with health and reflection; TLS when ``tls`` is given,
    bearer tokens when ``tokens`` is given.  Raises `GrpcStartError` or
    `grpc_auth.AuthConfigError`; nothing is left running on failure."""
    credentials = tls.server_credentials() if tls is not None else None
    if tokens is not None and tls is None and not _is_loopback(address):
        log.warning("bearer tokens without TLS on %s: they cross the network in clear text", address)
    workers = max_watch_streams + UNARY_WORKERS
    streams = WatchStreams(max_watch_streams)
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="kai-ray-grpc"),
        interceptors=[TokenAuthInterceptor(tokens)] if tokens is not None else [],
        maximum_concurrent_rpcs=workers,
        options=[
            ("grpc.max_receive_message_length", max_message_bytes),
            # grpc sets SO_REUSEPORT by default on Linux: a second server on a taken port would
            # then start "fine" and share its traffic.  Fail instead.
            ("grpc.so_reuseport", 0),
            # Watch streams can idle for hours: ping to notice a client that vanished without
            # closing (its stream's thread is then freed), and accept clients' own keepalive
            # pings down to 10 s instead of grpc's 5 min (which answers GOAWAY "too_many_pings").
            ("grpc.keepalive_time_ms", 60_000),
            ("grpc.keepalive_timeout_ms", 20_000),
            ("grpc.http2.min_ping_interval_without_data_ms", 10_000),
        ],
    )
    # Generated code has no annotations (grpc_tools writes no .pyi for the _grpc module).
    pb_grpc.add_SchedulerServicer_to_server(SchedulerServicer(service, streams), server)  # type: ignore[no-untyped-call]
    health_servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection(
        (SCHEDULER_SERVICE, health.SERVICE_NAME, reflection.SERVICE_NAME), server
    )
    try:
        if credentials is not None:
            port = server.add_secure_port(address, credentials)
        else:
            port = server.add_insecure_port(address)
    except RuntimeError as error:
        server.stop(None)
        raise GrpcStartError(f"cannot listen on {address}: {error}") from None
    if not port:  # older grpcio reports a failed bind as port 0
        server.stop(None)
        raise GrpcStartError(f"cannot listen on {address}")
    server.start()
    for name in ("", SCHEDULER_SERVICE):
        health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    log.info(
        "gRPC API on %s:%d%s%s",
        address.rsplit(":", 1)[0],
        port,
        ", TLS" + (" with client certificates" if tls and tls.client_ca else "") if tls else "",
        f", {len(tokens)} token(s)" if tokens is not None else "",
    )
    return RunningServer(server, port, address, health_servicer, streams)


def _is_loopback(address: str) -> bool:
    host = address.rsplit(":", 1)[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
