"""The gRPC transport of the API (`kai_ray.v1.Scheduler`): requests in, service calls, statuses out.

This module knows gRPC and nothing of scheduling; `kai_ray.rpc` knows scheduling and nothing
of gRPC.  What lives here is what a transport must decide:

* **Statuses.**  A `ServiceError` becomes the gRPC status of the same name; for bad input the
  field at fault leads the message (``workload.pod_sets[0].replicas: must be >= 1``) and is also
  sent alone as trailing metadata ``kai-ray-field``, so a client switches on data, not text.
  Anything else raised is a bug: INTERNAL with a fixed message (a traceback tells a client
  nothing it can act on, and may tell an attacker a lot), and one log record for the operator.
* **Where calls run.**  The server is grpc's asyncio server, on an event loop of its own thread
  (`ServerLoop`).  A service that answers from memory (`answers_from_memory`: the simulated
  cluster) is called on that loop itself, one call after another: no hand-off to a worker
  thread and back, which in grpc's thread-pool server cost more than the call itself (a submit:
  ~0.35 ms of work, ~1.2 ms of server time through the pool; submits/s on the 500-node bench
  rose by about a quarter).  Calls that may block run on a pool of ``UNARY_WORKERS`` threads:
  `WhatIf` always (a whole cycle on a copy of the cluster), and every call of a service that
  does I/O (Kubernetes).  A `WatchWorkloads` stream waits for events on a thread of a second
  pool, sized ``max_watch_streams``; watches beyond the limit are refused (RESOURCE_EXHAUSTED)
  instead of queueing behind streams that never end.  ``maximum_concurrent_rpcs`` is the sum of
  the two, so an overloaded server answers RESOURCE_EXHAUSTED at once too.  Threads are started
  lazily; an idle server has few.
* **Shutdown.**  `RunningServer.stop` stops taking calls, ends every watch (sets its stop event;
  the client gets UNAVAILABLE, the retryable status, and resumes from its last token elsewhere)
  and gives unary calls ``grace`` seconds to finish.
* **Around the API**: `grpc.health.v1.Health` (SERVING for ``""`` and the Scheduler service),
  server reflection, a receive limit on message size (RESOURCE_EXHAUSTED from grpc itself), TLS
  and tokens (`kai_ray.rpc.auth`).

`start_grpc_server` is the one entry point; ``kai-ray serve --grpc-address`` calls it.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator
from concurrent import futures
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, NoReturn, TypeVar

import grpc
from google.protobuf.message import DecodeError, Message
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from kai_ray.rpc.auth import TlsConfig, TokenAuthInterceptor, TokenTable, current_caller
from kai_ray.rpc.caller import Caller
from kai_ray.rpc.errors import ServiceError
from kai_ray.rpc.handlers import replace_behavior, with_prelude
from kai_ray.rpc.protocol import SchedulerServiceLike
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
#: Concurrent `WatchWorkloads` streams (each holds a thread of the watch pool while open).
DEFAULT_MAX_WATCH_STREAMS = 512
#: Threads for unary calls that may block (see "Where calls run").
UNARY_WORKERS = 64
#: How long `RunningServer.stop` waits for grpc to wind down after the grace period.
_STOP_SLACK_SECONDS = 5.0
#: How long `start_grpc_server` waits for the server to listen (binding, TLS set-up).
_START_TIMEOUT_SECONDS = 30.0
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
_Result = TypeVar("_Result")
_END = object()
"""What the watch feed returns when the service's event iterator is exhausted."""


class SchedulerServicer(pb_grpc.SchedulerServicer):
    """Maps each RPC of `kai_ray.v1.Scheduler` to the service method of the same meaning.

    The caller is read at the start of each handler (`current_caller`, bound by the token
    interceptor; `ANYONE` without tokens) and passed explicitly, so the service layer never
    depends on how the transport authenticates.  Where a call runs: see the module docstring.
    """

    def __init__(
        self, service: SchedulerServiceLike, streams: WatchStreams, calls: Executor, watches: Executor
    ) -> None:
        self._service = service
        self._streams = streams
        self._calls = calls
        self._watches = watches
        self._inline = service.answers_from_memory

    async def SubmitWorkload(
        self, request: pb.SubmitWorkloadRequest, context: Any
    ) -> pb.SubmitWorkloadResponse:
        return await self._unary("SubmitWorkload", self._service.submit_workload, request, context)

    async def GetWorkload(self, request: pb.GetWorkloadRequest, context: Any) -> pb.Workload:
        return await self._unary("GetWorkload", self._service.get_workload, request, context)

    async def ListWorkloads(self, request: pb.ListWorkloadsRequest, context: Any) -> pb.ListWorkloadsResponse:
        return await self._unary("ListWorkloads", self._service.list_workloads, request, context)

    async def CancelWorkload(self, request: pb.CancelWorkloadRequest, context: Any) -> pb.Workload:
        return await self._unary("CancelWorkload", self._service.cancel_workload, request, context)

    async def Explain(self, request: pb.ExplainRequest, context: Any) -> pb.Explanation:
        return await self._unary("Explain", self._service.explain, request, context)

    async def ListQueues(self, request: pb.ListQueuesRequest, context: Any) -> pb.ListQueuesResponse:
        return await self._unary("ListQueues", self._service.list_queues, request, context)

    async def WhatIf(self, request: pb.WhatIfRequest, context: Any) -> pb.WhatIfResponse:
        # A whole cycle on a copy of the cluster: seconds at scale, so always on a thread.
        return await self._unary("WhatIf", self._service.what_if, request, context, inline=False)

    async def GetCluster(self, request: pb.GetClusterRequest, context: Any) -> pb.Cluster:
        return await self._unary("GetCluster", self._service.get_cluster, request, context)

    async def WatchWorkloads(
        self, request: pb.WatchWorkloadsRequest, context: Any
    ) -> AsyncIterator[pb.WorkloadEvent]:
        caller = current_caller()
        stop = self._streams.open()
        if stop is None:
            if self._streams.closing:
                await _abort(context, grpc.StatusCode.UNAVAILABLE, "the server is shutting down")
            await _abort(
                context,
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"too many watch streams open (at most {self._streams.limit}); retry later",
            )
        # Fires when the RPC ends for any reason, the client's cancel or disconnect included:
        # the service's blocking iterator then returns and its thread is freed.
        context.add_done_callback(lambda _context: stop.set())
        failure: ServiceError | None = None
        crashed = False
        feed = _WatchFeed(self._watches, stop)
        try:
            async for event in feed.events(self._service.watch_workloads, request, caller):
                yield event
        except ServiceError as error:
            failure = error
        except Exception:
            log.error("WatchWorkloads failed", exc_info=True)
            crashed = True
        finally:
            feed.close()
            self._streams.close(stop)
        if crashed:
            await _abort(context, grpc.StatusCode.INTERNAL, _INTERNAL_MESSAGE)
        if failure is not None:
            await _abort_service_error(context, failure)
        if self._streams.closing:
            await _abort(
                context,
                grpc.StatusCode.UNAVAILABLE,
                "the server is shutting down; watch again from the last resume_token",
            )

    async def _unary(
        self,
        name: str,
        method: Callable[[_Request, Caller], _Response],
        request: _Request,
        context: Any,
        *,
        inline: bool | None = None,
    ) -> _Response:
        caller = current_caller()
        failure: ServiceError | None = None
        try:
            if self._inline if inline is None else inline:
                return method(request, caller)
            return await asyncio.get_running_loop().run_in_executor(self._calls, method, request, caller)
        except ServiceError as error:
            failure = error
        except Exception:
            # One record (one line in serve's JSON log) with the traceback for the operator;
            # the client gets a fixed message.
            log.error("%s failed", name, exc_info=True)
        if failure is None:
            await _abort(context, grpc.StatusCode.INTERNAL, _INTERNAL_MESSAGE)
        log.debug("%s refused: %s", name, failure.code)
        await _abort_service_error(context, failure)


class _WatchFeed:
    """The service's blocking event iterator, read from the event loop: each `next` runs on a
    thread of the watch pool (it may wait for hours), and the iterator is closed on that pool
    once no `next` is running (a generator cannot be closed while another thread runs it)."""

    def __init__(self, pool: Executor, stop: threading.Event) -> None:
        self._pool = pool
        self._stop = stop
        self._iterator: Iterator[pb.WorkloadEvent] | None = None
        self._running: Future[object] | None = None

    async def events(
        self,
        watch: Callable[[pb.WatchWorkloadsRequest, Caller, threading.Event], Iterator[pb.WorkloadEvent]],
        request: pb.WatchWorkloadsRequest,
        caller: Caller,
    ) -> AsyncIterator[pb.WorkloadEvent]:
        self._iterator = await self._run(watch, request, caller, self._stop)
        while True:
            event = await self._run(next, self._iterator, _END)
            if event is _END:
                return
            yield event

    async def _run(self, function: Callable[..., Any], *args: Any) -> Any:
        self._running = self._pool.submit(function, *args)
        try:
            return await asyncio.wrap_future(self._running)
        finally:
            if self._running.done():
                self._running = None

    def close(self) -> None:
        """End the stream: the service's iterator returns promptly once `stop` is set."""
        self._stop.set()
        if self._iterator is not None:
            self._pool.submit(_close_after, self._running, self._iterator)


def _close_after(running: Future[object] | None, iterator: Iterator[object]) -> None:
    """Once no `next` runs, one more lets the iterator see `stop` and return as the protocol
    says it does (a stream cancelled between two events left it waiting at a yield); closing
    it then ends one that did not."""
    if running is not None:
        futures.wait([running])
    try:
        next(iterator, None)
    except Exception:
        log.debug("a watch iterator failed while ending", exc_info=True)
    close = getattr(iterator, "close", None)
    if close is not None:
        close()


class _Undecodable:
    """A request body that is not the method's message: the call is refused by its handler."""

    def __init__(self, error: DecodeError) -> None:
        self.error = error


class DecodeGuard(grpc.aio.ServerInterceptor):  # type: ignore[misc]  # grpc is untyped
    """A body that does not decode gets INTERNAL ("the request of METHOD does not decode"), the
    status grpc's thread-pool server gave a message it could not parse, and one log line; grpc's
    asyncio server would answer UNKNOWN and log a traceback per call, an easy flood for a broken
    or hostile client."""

    async def intercept_service(
        self, continuation: Callable[[Any], Awaitable[Any]], handler_call_details: Any
    ) -> Any:
        handler = await continuation(handler_call_details)
        if handler is None or handler.request_deserializer is None:
            return handler
        parse = handler.request_deserializer
        method: str = handler_call_details.method

        def decode(body: bytes) -> Any:
            try:
                return parse(body)
            except DecodeError as error:
                return _Undecodable(error)

        async def refuse_undecodable(request: Any, context: Any) -> contextlib.AbstractContextManager[None]:
            if isinstance(request, _Undecodable):
                log.warning("refused %s from %s: %s", method, context.peer(), request.error)
                await _abort(context, grpc.StatusCode.INTERNAL, f"the request of {method} does not decode")
            return contextlib.nullcontext()

        return replace_behavior(
            handler, lambda behavior: with_prelude(behavior, refuse_undecodable), deserializer=decode
        )


async def _abort(context: Any, code: grpc.StatusCode, message: str) -> NoReturn:
    await context.abort(code, message)
    raise AssertionError("grpc's context.abort returned")  # it raises; this satisfies NoReturn


def status_code(error: ServiceError) -> grpc.StatusCode:
    """The gRPC status of an `ErrorCode`: the one of the same name (they are defined so)."""
    return grpc.StatusCode[error.code.name]


async def _abort_service_error(context: Any, error: ServiceError) -> NoReturn:
    message = error.message
    if error.field:
        message = f"{error.field}: {message}"
        # Metadata values must be printable ASCII; a field path quoting a user's map key might
        # not be, so it is escaped rather than dropped.
        ascii_field = error.field.encode("ascii", "backslashreplace").decode("ascii")
        context.set_trailing_metadata(((FIELD_METADATA_KEY, ascii_field),))
    await _abort(context, status_code(error), message)


@dataclass
class RunningServer:
    """A started gRPC server: its bound ``port`` (the real one when the address asked for 0).

    The server lives on its own event loop thread; these methods are called from any other.
    """

    server: Any
    port: int
    address: str
    health: Any
    streams: WatchStreams
    loop: ServerLoop
    pools: tuple[ThreadPoolExecutor, ...]
    _stopped: bool = field(default=False, repr=False)

    def stop(self, grace: float | None = 5.0) -> None:
        """Stop serving: health turns NOT_SERVING, new calls are refused, every watch stream ends
        now (UNAVAILABLE, so clients resume elsewhere), unary calls get ``grace`` seconds.
        Idempotent."""
        if self._stopped:
            return
        self._stopped = True
        try:
            self.loop.call(self._shutdown(grace), (grace or 0.0) + _STOP_SLACK_SECONDS)
        except TimeoutError:
            log.warning("the gRPC server did not stop within %.1fs of its grace period", _STOP_SLACK_SECONDS)
        finally:
            self.loop.close()
            for pool in self.pools:
                pool.shutdown(wait=False, cancel_futures=True)

    async def _shutdown(self, grace: float | None) -> None:
        await self.health.enter_graceful_shutdown()
        self.streams.close_all()
        await self.server.stop(grace)

    def wait_for_termination(self, timeout: float | None = None) -> bool:
        """Block until the server stops (or ``timeout``); True when it has stopped."""
        return self.loop.wait_closed(timeout)

    def __enter__(self) -> RunningServer:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop(grace=1.0)


class ServerLoop:
    """An asyncio event loop on a thread of its own: `serve`, the bench and the tests start and
    stop the server from blocking code, which talks to the loop only through `call` and `close`."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kai-ray-grpc", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_forever()
            self._loop.run_until_complete(self._loop.shutdown_asyncgens())
        finally:
            self._loop.close()
            self._closed.set()

    def call(self, coroutine: Coroutine[Any, Any, _Result], timeout: float) -> _Result:
        """Run ``coroutine`` on the loop and wait for its result; TimeoutError after ``timeout``."""
        future = asyncio.run_coroutine_threadsafe(coroutine, self._loop)
        try:
            return future.result(timeout)
        except futures.TimeoutError:
            future.cancel()
            raise TimeoutError(f"no result within {timeout:.1f}s") from None

    def close(self) -> None:
        """Stop the loop and wait (boundedly) for its thread to finish."""
        if not self._closed.is_set():
            self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(_STOP_SLACK_SECONDS)

    def wait_closed(self, timeout: float | None = None) -> bool:
        return self._closed.wait(timeout)


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
    `auth.AuthConfigError`; nothing is left running on failure."""
    credentials = tls.server_credentials() if tls is not None else None
    if tokens is not None and tls is None and not _is_loopback(address):
        log.warning("bearer tokens without TLS on %s: they cross the network in clear text", address)
    streams = WatchStreams(max_watch_streams)
    calls = ThreadPoolExecutor(max_workers=UNARY_WORKERS, thread_name_prefix="kai-ray-grpc-call")
    watches = ThreadPoolExecutor(max_workers=max_watch_streams, thread_name_prefix="kai-ray-grpc-watch")
    loop = ServerLoop()
    servicer = SchedulerServicer(service, streams, calls, watches)
    try:
        server, health_servicer, port = loop.call(
            _serve(servicer, address, credentials, tokens, max_message_bytes, max_watch_streams),
            _START_TIMEOUT_SECONDS,
        )
    except BaseException:
        loop.close()
        calls.shutdown(wait=False)
        watches.shutdown(wait=False)
        raise
    log.info(
        "gRPC API on %s:%d%s%s",
        address.rsplit(":", 1)[0],
        port,
        ", TLS" + (" with client certificates" if tls and tls.client_ca else "") if tls else "",
        f", {len(tokens)} token(s)" if tokens is not None else "",
    )
    return RunningServer(server, port, address, health_servicer, streams, loop, (calls, watches))


async def _serve(
    servicer: SchedulerServicer,
    address: str,
    credentials: Any,
    tokens: TokenTable | None,
    max_message_bytes: int,
    max_watch_streams: int,
) -> tuple[Any, Any, int]:
    """The server started on the running loop: (server, health servicer, port)."""
    server = grpc.aio.server(
        interceptors=[*([TokenAuthInterceptor(tokens)] if tokens is not None else []), DecodeGuard()],
        maximum_concurrent_rpcs=max_watch_streams + UNARY_WORKERS,
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
    pb_grpc.add_SchedulerServicer_to_server(servicer, server)  # type: ignore[no-untyped-call]
    health_servicer = health.aio.HealthServicer()
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
        await server.stop(None)
        raise GrpcStartError(f"cannot listen on {address}: {error}") from None
    if not port:  # older grpcio reports a failed bind as port 0
        await server.stop(None)
        raise GrpcStartError(f"cannot listen on {address}")
    await server.start()
    for name in ("", SCHEDULER_SERVICE):
        await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    return server, health_servicer, port


def _is_loopback(address: str) -> bool:
    host = address.rsplit(":", 1)[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
