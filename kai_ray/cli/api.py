"""The API's commands: `kai-ray submit`, `status`, `watch`, `explain`, `queues`, `what-if`.

Each talks to one `SchedulerClient`: a server (`--server HOST:PORT`, with `--token`, `--tls-ca`
and, for mutual TLS, `--tls-cert`/`--tls-key`), or, offline, the embedded simulated cluster built
in this process from a manifest directory (`--manifests DIR`, one scheduling cycle run first)
behind a `LocalClient`.  Both go through the same rendering code, so what a command prints
offline is what it prints against a server holding the same cluster.

Failures are one line on stderr naming the request field at fault; the exit status is 2 for bad
input (the command line, a file, or a request the server calls INVALID_ARGUMENT / OUT_OF_RANGE)
and 1 for everything else (the server refused, was unreachable, or timed out).
"""

from __future__ import annotations

import enum
import functools
import inspect
import json
import signal
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer

from kai_ray.cli.api_views import (
    Output,
    as_dict,
    event_line,
    explanation_view,
    queues_table,
    show,
    what_if_view,
    workload_detail,
    workloads_table,
)
from kai_ray.cli.app import error_exit
from kai_ray.cli.help import KaiRayTyper
from kai_ray.cli.offline import offline
from kai_ray.report.table import terminal_console
from kai_ray.rpc.client import (
    DEFAULT_RECONNECT_TIMEOUT,
    DEFAULT_TIMEOUT,
    KaiRayClient,
    SchedulerClient,
    WorkloadFollower,
)
from kai_ray.rpc.errors import ErrorCode, ServiceError
from kai_ray.rpc.requests import (
    is_manifest_document,
    load_documents,
    manifests_request,
    parse_id,
    request_from_dict,
)
from kai_ray.v1 import scheduler_pb2 as pb

__all__ = ["Output", "OutputOption", "app"]

app = KaiRayTyper()
"""Merged into `kai-ray`'s own app (`kai_ray/cli/__init__.py`)."""

TOKEN_ENV = "KAI_RAY_TOKEN"
SERVER_ENV = "KAI_RAY_SERVER"

BAD_INPUT = frozenset({ErrorCode.INVALID_ARGUMENT, ErrorCode.OUT_OF_RANGE})
"""Codes that mean "fix what you typed" (exit 2) rather than "the server said no" (exit 1)."""


class State(enum.StrEnum):
    """Workload states a `status` list can be filtered by (the API's, in lower case)."""

    PENDING = "pending"
    RUNNING = "running"
    EVICTED = "evicted"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


ServerOption = Annotated[
    str | None,
    typer.Option(
        "--server",
        envvar=SERVER_ENV,
        help="HOST:PORT of a kai-ray gRPC API (`kai-ray serve --grpc-address`).",
        show_default=False,
    ),
]
TokenOption = Annotated[
    str | None,
    typer.Option(
        "--token",
        envvar=TOKEN_ENV,
        help="Bearer token for the server; better from the environment, never printed.",
        show_default=False,
    ),
]
TlsCaOption = Annotated[
    Path | None,
    typer.Option(
        "--tls-ca",
        help="PEM file of the CA that signed the server's certificate; switches to TLS.",
        show_default=False,
        metavar="PEM",
    ),
]
TlsCertOption = Annotated[
    Path | None,
    typer.Option(
        "--tls-cert",
        help="PEM file of this client's certificate, for a server that requires one "
        "(serve --tls-client-ca); with --tls-key. Switches to TLS.",
        show_default=False,
        metavar="PEM",
    ),
]
TlsKeyOption = Annotated[
    Path | None,
    typer.Option(
        "--tls-key",
        help="PEM file of the private key of --tls-cert.",
        show_default=False,
        metavar="PEM",
    ),
]
ManifestsOption = Annotated[
    Path | None,
    typer.Option(
        "--manifests",
        help="Offline: answer from the simulated cluster built from the manifests in DIR "
        "(after one scheduling cycle), instead of a server.",
        show_default=False,
        metavar="DIR",
    ),
]
TimeoutOption = Annotated[
    float,
    typer.Option("--timeout", min=0.1, help="Seconds each call to the server may take.", metavar="SECONDS"),
]
OutputOption = Annotated[Output, typer.Option("--output", help="table (for people) or json (for programs).")]


@dataclass(frozen=True)
class Connection:
    """Where a command's answers come from, as given on its command line."""

    server: str | None
    token: str | None
    tls_ca: Path | None
    tls_cert: Path | None
    tls_key: Path | None
    manifests: Path | None
    timeout: float


_CONNECTION_OPTIONS = [
    inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=option)
    for name, option, default in (
        ("server", ServerOption, None),
        ("token", TokenOption, None),
        ("tls_ca", TlsCaOption, None),
        ("tls_cert", TlsCertOption, None),
        ("tls_key", TlsKeyOption, None),
        ("manifests", ManifestsOption, None),
        ("timeout", TimeoutOption, DEFAULT_TIMEOUT),
    )
]
"""The options every command of the API takes after its own, in `Connection`'s order."""


def _command(name: str | None = None) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Register an API command: ``function``'s parameters but its first, ``connection``, then the
    connection options (--server, --token, --tls-ca, --tls-cert, --tls-key, --manifests, --timeout),
    which reach it as that `Connection`.  A `ServiceError` it raises, before calling or from the
    call, is reported as one line (exit 2 for bad input, else 1)."""

    def register(function: Callable[..., None]) -> Callable[..., None]:
        own = list(inspect.signature(function, eval_str=True).parameters.values())
        assert own[0].name == "connection", function.__name__

        @functools.wraps(function)
        def command(**options: Any) -> None:
            connection = Connection(*(options.pop(p.name) for p in _CONNECTION_OPTIONS))
            try:
                function(connection, **options)
            except ServiceError as exc:
                _service_failure(exc)

        # What typer reads for the command's options (it follows __signature__, not __wrapped__).
        command.__signature__ = inspect.Signature([*own[1:], *_CONNECTION_OPTIONS])  # type: ignore[attr-defined]
        app.command(name)(command)
        return function

    return register


def _service_failure(exc: ServiceError) -> NoReturn:
    where = f"{exc.field}: " if exc.field else ""
    error_exit(f"{exc.code.value}: {where}{exc.message}", 2 if exc.code in BAD_INPUT else 1)


@contextmanager
def _connect(connection: Connection) -> Iterator[SchedulerClient]:
    """The client a command talks to; closed when the command is done."""
    if connection.server is not None and connection.manifests is not None:
        error_exit("give --server or --manifests, not both")
    client: SchedulerClient
    if connection.manifests is not None:
        client = offline(connection.manifests)
    elif connection.server is not None:
        for flag, path in (
            ("--tls-ca", connection.tls_ca),
            ("--tls-cert", connection.tls_cert),
            ("--tls-key", connection.tls_key),
        ):
            if path is not None and not path.is_file():
                error_exit(f"{flag}: {path}: no such file")
        if (connection.tls_cert is None) != (connection.tls_key is None):
            error_exit("--tls-cert and --tls-key go together: the client's certificate and its key")
        client = KaiRayClient(
            connection.server,
            token=connection.token,
            tls_ca=connection.tls_ca,
            timeout=connection.timeout,
            tls_cert=connection.tls_cert,
            tls_key=connection.tls_key,
        )
    else:
        error_exit(f"give --server HOST:PORT (or ${SERVER_ENV}), or --manifests DIR to work offline")
    try:
        yield client
    finally:
        client.close()


def _submit_requests(path: Path, namespace: str | None, name: str | None) -> list[pb.SubmitWorkloadRequest]:
    """The submits FILE stands for: a workload spec (one per document), or Kubernetes manifests
    (all of the file as one workload)."""
    documents = load_documents(path)
    if not documents:
        raise ServiceError(ErrorCode.INVALID_ARGUMENT, f"{path}: no YAML documents in it", "file")
    kinds = {is_manifest_document(d) for d in documents}
    if kinds == {True}:
        return [manifests_request(documents, namespace, name)]
    if kinds == {True, False}:
        raise ServiceError(
            ErrorCode.INVALID_ARGUMENT,
            f"{path}: mixes Kubernetes manifests and workload specs; put them in separate files",
            "file",
        )
    requests = []
    for index, document in enumerate(documents):
        try:
            request = request_from_dict(document, pb.SubmitWorkloadRequest())
        except ServiceError as exc:
            where = f"{path}" + (f" (document {index + 1})" if len(documents) > 1 else "")
            raise ServiceError(exc.code, f"{where}: {exc.message}", exc.field) from None
        if namespace is not None:
            request.namespace = namespace
        if name is not None:
            if len(documents) > 1:
                raise ServiceError(
                    ErrorCode.INVALID_ARGUMENT, f"--name with {len(documents)} workloads in {path}", "name"
                )
            request.name = name
        requests.append(request)
    return requests


_WHAT_IF_KEYS = {"workloads", "addNodes", "add_nodes", "removeNodes", "remove_nodes"}


def _what_if_request(path: Path, namespace: str | None, remove_nodes: Sequence[str]) -> pb.WhatIfRequest:
    """FILE is a WhatIfRequest document, or workload specs / manifests to add hypothetically."""
    documents = load_documents(path)
    if (
        len(documents) == 1
        and isinstance(documents[0], Mapping)
        and documents[0]
        and set(documents[0]) <= _WHAT_IF_KEYS
    ):
        try:
            request = request_from_dict(documents[0], pb.WhatIfRequest())
        except ServiceError as exc:
            raise ServiceError(exc.code, f"{path}: {exc.message}", exc.field) from None
    else:
        request = pb.WhatIfRequest(workloads=_submit_requests(path, namespace, None))
    request.remove_nodes.extend(remove_nodes)
    return request


def _state_filter(state: State | None) -> str | None:
    """The API's name of the state (`RUNNING`); None asks for any state."""
    return state.value.upper() if state is not None else None


# ------------------------------------------------------------------------------------- commands


@_command()
def submit(
    connection: Connection,
    file: Annotated[
        Path,
        typer.Argument(
            help="A workload spec (YAML: namespace, name, workload: {queue, podSets...}; "
            "see docs/cli.md) or Kubernetes manifests (a RayJob, a PyTorchJob, pods...).",
            show_default=False,
        ),
    ],
    namespace: Annotated[
        str | None,
        typer.Option(
            "--namespace",
            "-n",
            help="Namespace to submit to; default: the one the file names.",
            show_default=False,
        ),
    ] = None,
    name: Annotated[
        str | None,
        typer.Option(
            "--name",
            help="The workload's name; default: the file's, else from its first pod set.",
            show_default=False,
        ),
    ] = None,
    output: OutputOption = Output.TABLE,
) -> None:
    """Submit FILE as a workload (all of its objects, or none) and print its state."""
    requests = _submit_requests(file, namespace, name)
    with _connect(connection) as client:
        responses = [client.submit_workload(request) for request in requests]
    show(output, responses, lambda: workloads_table([r.workload for r in responses], "Submitted"))


@_command()
def status(
    connection: Connection,
    workload: Annotated[
        str | None,
        typer.Argument(help="NAMESPACE/NAME of one workload; without it, a list.", show_default=False),
    ] = None,
    namespace: Annotated[
        str | None,
        typer.Option("--namespace", "-n", help="List only this namespace.", show_default=False),
    ] = None,
    queue: Annotated[
        str | None, typer.Option("--queue", help="List only this queue.", show_default=False)
    ] = None,
    state: Annotated[
        State | None, typer.Option("--state", help="List only workloads in this state.", show_default=False)
    ] = None,
    output: OutputOption = Output.TABLE,
) -> None:
    """Show one workload, or list workloads (every page) with optional filters."""
    if workload is not None:
        if namespace is not None or queue is not None or state is not None:
            error_exit("--namespace, --queue and --state filter a list; not with NAMESPACE/NAME")
        workload_id = parse_id(workload)
    with _connect(connection) as client:
        if workload is not None:
            found = client.get_workload(pb.GetWorkloadRequest(id=workload_id))
            show(output, found, lambda: workload_detail(found))
            return
        listed: list[pb.Workload] = []
        request = pb.ListWorkloadsRequest(
            namespace=namespace or "", queue=queue or "", state=_state_filter(state), page_size=1000
        )
        while True:
            page = client.list_workloads(request)
            listed.extend(page.workloads)
            if not page.next_page_token:
                break
            request.page_token = page.next_page_token
    show(output, listed, lambda: workloads_table(listed))


@_command()
def watch(
    connection: Connection,
    namespace: Annotated[
        str | None,
        typer.Option("--namespace", "-n", help="Only workloads of this namespace.", show_default=False),
    ] = None,
    queue: Annotated[
        str | None, typer.Option("--queue", help="Only workloads of this queue.", show_default=False)
    ] = None,
    resume: Annotated[
        str | None,
        typer.Option(
            "--resume",
            help="Go on after the event with this resume token (printed on exit, and in JSON output).",
            show_default=False,
            metavar="TOKEN",
        ),
    ] = None,
    output: Annotated[
        Output, typer.Option("--output", help="table (one line per event) or json (one object per line).")
    ] = Output.TABLE,
    reconnect_timeout: Annotated[
        float,
        typer.Option(
            "--reconnect-timeout",
            min=0,
            help="How long to keep reconnecting when the server goes away (a restart); the watch "
            "then goes on, printing what changed meanwhile. 0: end when the server does.",
            metavar="SECONDS",
        ),
    ] = DEFAULT_RECONNECT_TIMEOUT,
) -> None:
    """Print every change of state of the matching workloads as it happens, until Ctrl-C.

    Without --resume it starts with one ADDED event per existing workload.  A server restart does
    not end it: it reconnects and prints the DELETED, MODIFIED and ADDED events it missed."""
    request = pb.WatchWorkloadsRequest(
        namespace=namespace or "", queue=queue or "", resume_token=resume or ""
    )
    stop = threading.Event()
    console = terminal_console()
    follower: WorkloadFollower | None = None
    try:
        with _connect(connection) as client, _interrupt_sets(stop):
            follower = client.follow_workloads(request, stop, reconnect_timeout=reconnect_timeout)
            for event in follower:
                if output == Output.JSON:
                    typer.echo(json.dumps(as_dict(event), sort_keys=True))
                else:
                    console.print(event_line(event), soft_wrap=True)
    except KeyboardInterrupt:  # a second Ctrl-C, while the first one's stop is under way
        stop.set()
    if follower is not None and follower.resume_token and output == Output.TABLE:
        typer.echo(f"resume with: --resume {follower.resume_token}", err=True)


@contextmanager
def _interrupt_sets(stop: threading.Event) -> Iterator[None]:
    """Ctrl-C sets ``stop`` instead of raising KeyboardInterrupt wherever the main thread happens
    to be: inside gRPC's stream iteration that can leave the call's lock half taken and the
    process hung on exit. The watch then cancels its stream and ends as `stop` asks. A second
    Ctrl-C raises as usual (the first restores the previous handler). Only the main thread may
    set a handler; elsewhere Ctrl-C is left as it is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    installed = signal.getsignal(signal.SIGINT)
    previous = signal.default_int_handler if installed is None else installed

    def interrupted(signum: int, frame: object) -> None:
        signal.signal(signal.SIGINT, previous)
        stop.set()

    signal.signal(signal.SIGINT, interrupted)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@_command()
def explain(
    connection: Connection,
    workload: Annotated[str, typer.Argument(help="NAMESPACE/NAME of the workload.", show_default=False)],
    output: OutputOption = Output.TABLE,
) -> None:
    """Why a workload waits or was evicted, as the scheduler sees it.

    Its gang, the checks nodes fail, its queue's share, who is ahead of it in the queue and what
    would have to free up."""
    workload_id = parse_id(workload)
    with _connect(connection) as client:
        explanation = client.explain(pb.ExplainRequest(id=workload_id))
    show(output, explanation, lambda: explanation_view(explanation))


@_command()
def queues(connection: Connection, output: OutputOption = Output.TABLE) -> None:
    """The queue tree with each queue's quota, limit, fair share, allocation and request."""
    with _connect(connection) as client:
        listed = client.list_queues(pb.ListQueuesRequest())
    show(output, listed.queues, lambda: queues_table(listed.queues))


@_command("what-if")
def what_if(
    connection: Connection,
    file: Annotated[
        Path,
        typer.Argument(
            help="Workloads to add (a workload spec or Kubernetes manifests), or a WhatIfRequest "
            "in YAML (workloads, addNodes, removeNodes).",
            show_default=False,
        ),
    ],
    remove_node: Annotated[
        list[str] | None,
        typer.Option(
            "--remove-node",
            help="A node to take away for this cycle (repeatable).",
            show_default=False,
            metavar="NODE",
        ),
    ] = None,
    namespace: Annotated[
        str | None,
        typer.Option(
            "--namespace",
            "-n",
            help="Namespace of the workloads; default: the one the file names.",
            show_default=False,
        ),
    ] = None,
    output: OutputOption = Output.TABLE,
) -> None:
    """What one cycle would bind and evict with FILE's workloads added; nothing is applied.

    The cycle runs on a copy of the cluster as it is now."""
    request = _what_if_request(file, namespace, remove_node or [])
    with _connect(connection) as client:
        response = client.what_if(request)
    show(output, response, lambda: what_if_view(response))
