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
from google.protobuf import json_format
from google.protobuf.message import Message
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from kai_ray.cli.help import KaiRayTyper
from kai_ray.report.table import terminal_console
from kai_ray.rpc.client import (
    DEFAULT_RECONNECT_TIMEOUT,
    DEFAULT_TIMEOUT,
    KaiRayClient,
    LocalClient,
    SchedulerClient,
    WorkloadFollower,
    is_manifest_document,
    load_documents,
    manifests_request,
    parse_id,
    request_from_dict,
)
from kai_ray.rpc.errors import ErrorCode, ServiceError
from kai_ray.v1 import scheduler_pb2 as pb

__all__ = ["OfflineClient", "app", "offline_client"]

app = KaiRayTyper()
"""Merged into `kai-ray`'s own app (`kai_ray/cli/__init__.py`)."""

TOKEN_ENV = "KAI_RAY_TOKEN"
SERVER_ENV = "KAI_RAY_SERVER"
GPU = "nvidia.com/gpu"
GIB = 1024**3

BAD_INPUT = frozenset({ErrorCode.INVALID_ARGUMENT, ErrorCode.OUT_OF_RANGE})
"""Codes that mean "fix what you typed" (exit 2) rather than "the server said no" (exit 1)."""

_STATE_STYLE = {
    "RUNNING": "green",
    "SUCCEEDED": "green",
    "PENDING": "yellow",
    "EVICTED": "magenta",
    "FAILED": "red",
    "CANCELLED": "dim",
}


class Output(enum.StrEnum):
    TABLE = "table"
    JSON = "json"


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


def _fail(message: str, code: int = 2) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code=code)


def _service_failure(exc: ServiceError) -> NoReturn:
    where = f"{exc.field}: " if exc.field else ""
    _fail(f"{exc.code.value}: {where}{exc.message}", 2 if exc.code in BAD_INPUT else 1)


class OfflineClient(LocalClient):
    """The simulated cluster of `--manifests DIR`, in this process, answering as a server would.

    A submit is followed by one cycle before its answer, since no scheduling loop runs here: the
    workload comes back as the scheduler would leave it (bound, or pending with its reason)
    rather than merely accepted."""

    def __init__(self, service: Any, backend: Any) -> None:
        super().__init__(service)
        self.backend = backend

    def submit_workload(self, request: pb.SubmitWorkloadRequest) -> pb.SubmitWorkloadResponse:
        response = super().submit_workload(request)
        self.backend.run_cycle()
        response.workload.CopyFrom(self.get_workload(pb.GetWorkloadRequest(id=response.id)))
        return response

    def close(self) -> None:
        self.backend.close()


def offline_client(directory: Path) -> OfflineClient:
    """A client of the simulated cluster built from the manifests in ``directory``, after one cycle.

    Workloads (RayJob, PyTorchJob, Job...) are grouped by the operators' podgrouper, as `simulate`
    and `serve --sim` do.  Broken manifests raise `SimSourceError` with every problem."""
    from kai_ray_operators.manifests import prepare_manifests

    from kai_ray.rpc.api import SchedulerService
    from kai_ray.rpc.sim_backend import SimBackend

    backend = SimBackend.from_directory(directory, grouper=prepare_manifests)
    # The service first: it follows the backend's cycles from the one below on.
    service = SchedulerService(backend, grouper=prepare_manifests)
    backend.run_cycle()
    return OfflineClient(service, backend)


def _offline(directory: Path) -> SchedulerClient:
    """`offline_client`, with bad manifests reported as `simulate` reports them (exit 2)."""
    from kai_ray.api.manifests import read_manifest_documents
    from kai_ray.rpc.sim_backend import SimSourceError

    if not directory.is_dir():
        _fail(f"--manifests: {directory} is not a directory")
    documents, problems = read_manifest_documents(directory)
    if not documents and not problems:
        _fail(f"--manifests: {directory}: no Kubernetes manifests in it (*.yaml, *.yml, *.json)")
    try:
        return offline_client(directory)
    except SimSourceError as exc:
        for problem in exc.problems:
            typer.echo(f"error: {problem}", err=True)
        raise typer.Exit(code=2) from None


@contextmanager
def _connect(connection: Connection) -> Iterator[SchedulerClient]:
    """The client a command talks to; closed when the command is done."""
    if connection.server is not None and connection.manifests is not None:
        _fail("give --server or --manifests, not both")
    client: SchedulerClient
    if connection.manifests is not None:
        client = _offline(connection.manifests)
    elif connection.server is not None:
        for flag, path in (
            ("--tls-ca", connection.tls_ca),
            ("--tls-cert", connection.tls_cert),
            ("--tls-key", connection.tls_key),
        ):
            if path is not None and not path.is_file():
                _fail(f"{flag}: {path}: no such file")
        if (connection.tls_cert is None) != (connection.tls_key is None):
            _fail("--tls-cert and --tls-key go together: the client's certificate and its key")
        client = KaiRayClient(
            connection.server,
            token=connection.token,
            tls_ca=connection.tls_ca,
            timeout=connection.timeout,
            tls_cert=connection.tls_cert,
            tls_key=connection.tls_key,
        )
    else:
        _fail(f"give --server HOST:PORT (or ${SERVER_ENV}), or --manifests DIR to work offline")
    try:
        yield client
    finally:
        client.close()


def _as_dict(message: Message) -> dict[str, Any]:
    """A message as JSON data: proto field names (as in error paths), zeros and empty lists kept
    so a program need not know the defaults."""
    return json_format.MessageToDict(
        message, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )


def _print_json(data: Any) -> None:
    typer.echo(json.dumps(data, indent=2, sort_keys=True))


# ------------------------------------------------------------------------------------- formatting


def _amount(resource: str, value: float) -> str:
    """A number of the API's fixed units the way people read it: GPUs and cores plain, memory in Gi."""
    if value < 0:
        return "∞"
    if resource == "memory":
        return f"{value / GIB:.4g}Gi"
    return f"{value:.4g}"


def _resources(values: Mapping[str, float]) -> str:
    order = {GPU: 0, "cpu": 1, "memory": 2}
    keys = sorted(values, key=lambda k: (order.get(k, 3), k))
    return ", ".join(f"{k} {_amount(k, values[k])}" for k in keys if values[k])


def _state(state: int) -> Text:
    name = pb.WorkloadState.Name(state) if state else "UNKNOWN"
    return Text(name, style=_STATE_STYLE.get(name, ""))


def _workloads_table(workloads: Sequence[pb.Workload], title: str = "Workloads") -> Table:
    table = Table(title=title, title_justify="left")
    for column in ("workload", "queue", "state", "pods bound", "gang", "requested", "reason"):
        table.add_column(column, overflow="fold")
    for w in workloads:
        reason = ": ".join(part for part in (w.reason, w.message) if part)
        table.add_row(
            w.id,
            w.queue,
            _state(w.state),
            f"{w.pods_bound}/{w.pods}",
            str(w.min_available),
            _resources(w.requested),
            reason,
        )
    return table


def _constraint(constraint: pb.TopologyConstraint) -> str:
    """`cluster-topology: required rack`, the levels given and nothing else."""
    given = (("required", constraint.required_level), ("preferred", constraint.preferred_level))
    levels = [f"{kind} {level}" for kind, level in given if level]
    return f"{constraint.topology}: {', '.join(levels)}"


def _workload_detail(w: pb.Workload) -> Group:
    facts = Table.grid(padding=(0, 2))
    facts.add_column(style="bold")
    facts.add_column(overflow="fold")
    rows: list[tuple[str, str | Text]] = [
        ("workload", w.id),
        ("queue", w.queue),
        ("state", _state(w.state)),
        ("priority", f"{w.priority_class or '(default)'} ({w.priority})"),
        ("preemptible", "yes" if w.preemptible else "no"),
        ("pods", f"{w.pods_bound} of {w.pods} bound; gang minimum {w.min_available}"),
        ("requested", _resources(w.requested) or "-"),
        ("allocated", _resources(w.allocated) or "-"),
        ("pod groups", ", ".join(w.pod_groups) or "-"),
    ]
    if w.HasField("topology"):
        rows.append(("topology", _constraint(w.topology)))
    if w.reason or w.message:
        rows.append(("why", ": ".join(p for p in (w.reason, w.message) if p)))
    for name, value in rows:
        facts.add_row(name, value)
    parts: list[Table] = [facts]
    if w.placements:
        placements = Table(title="Pods", title_justify="left")
        placements.add_column("pod", overflow="fold")
        placements.add_column("node", overflow="fold")
        for p in w.placements:
            placements.add_row(p.pod, p.node or Text("not bound", style="yellow"))
        parts.append(placements)
    return Group(*parts)


def _queue_rows(queues: Sequence[pb.Queue]) -> list[tuple[pb.Queue, int]]:
    """Queues in tree order with their depth; the server sends parents first, siblings by name,
    but a queue whose parent is missing is still shown, at the top."""
    by_name = {q.name: q for q in queues}
    children: dict[str, list[str]] = {}
    for q in queues:
        children.setdefault(q.parent if q.parent in by_name else "", []).append(q.name)
    ordered: list[tuple[pb.Queue, int]] = []

    def walk(name: str, depth: int) -> None:
        ordered.append((by_name[name], depth))
        for child in sorted(children.get(name, [])):
            walk(child, depth + 1)

    for top in sorted(children.get("", [])):
        walk(top, 0)
    return ordered


def _queues_table(queues: Sequence[pb.Queue]) -> Table:
    table = Table(
        title="Queues: GPUs, and CPU cores / memory as fair share / allocated / requested",
        title_justify="left",
    )
    table.add_column("queue", overflow="fold")
    for column in ("GPU quota", "limit", "fair share", "allocated", "requested"):
        table.add_column(column, justify="right")
    table.add_column("CPU cores", justify="right")
    table.add_column("memory", justify="right")
    table.add_column("running / pending", justify="right")
    empty = pb.QueueResource(limit=-1)
    for queue, depth in _queue_rows(queues):
        gpu = queue.resources.get(GPU, empty)
        cells = [
            _amount(GPU, gpu.quota),
            _amount(GPU, gpu.limit),
            _amount(GPU, gpu.fair_share),
            _amount(GPU, gpu.allocated),
            _amount(GPU, gpu.requested),
        ]
        for resource in ("cpu", "memory"):
            r = queue.resources.get(resource, empty)
            cells.append(" / ".join(_amount(resource, v) for v in (r.fair_share, r.allocated, r.requested)))
        cells.append(f"{queue.workloads_running} / {queue.workloads_pending}")
        table.add_row("  " * depth + queue.name, *cells)
    return table


def _explanation(e: pb.Explanation) -> Group:
    parts: list[Text | Table] = []
    head = Text(f"{e.id}: ")
    head.append_text(_state(e.state))
    if e.cause:
        head.append(f" ({e.cause})")
    parts.append(head)
    if e.message:
        parts.append(Text(e.message))
    if e.evicted_by:
        parts.append(Text(f"evicted to make room for {e.evicted_by}"))
    if e.HasField("gang"):
        g = e.gang
        line = (
            f"gang: {g.min_available} required, {g.pods_existing} exist, {g.pods_bound} bound, "
            f"{g.pods_placeable} more would fit now"
        )
        parts.append(Text(line))
    if e.predicates:
        parts.append(Text("nodes that refuse its next pod, each cause counted on its own:"))
        parts.extend(_refusal(p, e.nodes_total) for p in e.predicates)
    if e.HasField("queue"):
        parts.append(_queues_table([e.queue]))
    if e.ahead:
        ahead = Table(title="Ahead in its queue", title_justify="left")
        for column in ("workload", "queue", "priority"):
            ahead.add_column(column)
        for ref in e.ahead:
            ahead.add_row(ref.id, ref.queue, str(ref.priority))
        parts.append(ahead)
    if e.to_free:
        parts.append(Text(f"to free for its next pods: {_resources(e.to_free)}"))
    return Group(*parts)


def _refusal(failure: pb.PredicateFailure, total: int) -> Text:
    """One cause as the engine words it ("3 of 4 nodes: host port 8080/TCP in use"), with the
    kube-scheduler filter it is named after, dimmed."""
    line = Text(f"  {failure.nodes} of {total} nodes: {failure.message}  ")
    line.append(f"[{failure.predicate}]", style="dim")
    return line


def _what_if_view(response: pb.WhatIfResponse) -> Group:
    parts: list[Text | Table] = [
        Text(
            f"what if: {len(response.binds)} pod(s) would be bound, {len(response.evictions)} evicted, "
            f"{len(response.pipelined)} pipelined; nothing was applied"
        )
    ]
    placements = (
        ("Would bind", response.binds),
        ("Would pipeline (bound once evicted pods are gone)", response.pipelined),
    )
    for title, rows in placements:
        if rows:
            table = Table(title=title, title_justify="left")
            for column in ("workload", "pod", "node"):
                table.add_column(column, overflow="fold")
            for row in rows:
                table.add_row(row.workload, row.pod, row.node)
            parts.append(table)
    if response.evictions:
        evictions = Table(title="Would evict", title_justify="left")
        for column in ("workload", "pod", "node", "cause", "for"):
            evictions.add_column(column, overflow="fold")
        for ev in response.evictions:
            evictions.add_row(ev.workload, ev.pod, ev.node, ev.cause, ev.for_workload)
        parts.append(evictions)
    parts.append(_workloads_table(response.workloads, "Workloads after the cycle"))
    return Group(*parts)


def _show(output: Output, answer: Message | Sequence[Message], view: Callable[[], RenderableType]) -> None:
    """A command's answer: the message(s) as JSON for `--output json`, else ``view()`` for people."""
    if output == Output.JSON:
        _print_json(_as_dict(answer) if isinstance(answer, Message) else [_as_dict(m) for m in answer])
    else:
        terminal_console().print(view())


# ------------------------------------------------------------------------------------- requests


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
    _show(output, responses, lambda: _workloads_table([r.workload for r in responses], "Submitted"))


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
            _fail("--namespace, --queue and --state filter a list; not with NAMESPACE/NAME")
        workload_id = parse_id(workload)
    with _connect(connection) as client:
        if workload is not None:
            found = client.get_workload(pb.GetWorkloadRequest(id=workload_id))
            _show(output, found, lambda: _workload_detail(found))
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
    _show(output, listed, lambda: _workloads_table(listed))


def _event_line(event: pb.WorkloadEvent) -> Text:
    w = event.workload
    line = Text(f"{pb.WorkloadEvent.Type.Name(event.type):8} {w.id} ")
    line.append_text(_state(w.state))
    line.append(f" {w.pods_bound}/{w.pods} bound")
    reason = ": ".join(p for p in (w.reason, w.message) if p)
    if reason:
        line.append(f"  {reason}")
    return line


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
                    typer.echo(json.dumps(_as_dict(event), sort_keys=True))
                else:
                    console.print(_event_line(event), soft_wrap=True)
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
    _show(output, explanation, lambda: _explanation(explanation))


@_command()
def queues(connection: Connection, output: OutputOption = Output.TABLE) -> None:
    """The queue tree with each queue's quota, limit, fair share, allocation and request."""
    with _connect(connection) as client:
        listed = client.list_queues(pb.ListQueuesRequest())
    _show(output, listed.queues, lambda: _queues_table(listed.queues))


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
    _show(output, response, lambda: _what_if_view(response))
