"""The gRPC API under load: `kai-ray bench --grpc`.

What runs: the embedded simulated cluster (`SimBackend.from_nodes`: N nodes × 8 GPUs, KAI's
default queues) scheduling itself in its background thread, the real `SchedulerService`, and a
real gRPC server on 127.0.0.1 (port chosen by the OS).  The clients are `KaiRayClient`s, each on
its own channel, in threads of a **separate process**: they are outside clients, and in this
process they would compete with the server for the interpreter lock and make it look slower
than it is.

The shape (the issue's 500 nodes and 4,000 pods): `pods / PODS_PER_WORKLOAD` gangs of
`PODS_PER_WORKLOAD` pods, each pod asking for `GPUS_PER_POD` GPUs, all in KAI's default leaf
queue.  With 2 GPUs a pod, half the gangs fill the cluster and the other half wait, so `Explain`
has both kinds of answer to give: the short one for a running workload and the full one (per
predicate node counts, the queue, who is ahead, what would have to free up) for a waiting one.

Phases, each timed on its own:
1. **submit**: every client submits its share of the workloads as fast as the server answers;
   submits/s is workloads over the wall time from the first call to the last answer (the
   clients connect, make one call each and build their requests before the clock starts).
   Cycles run meanwhile.
2. **settle**: from the last answer until the cluster has nothing left to do (`wait_idle`).
3. **explain**: every client explains its share of the workloads, each once, on the settled
   cluster; p50/p99 of the round trip as the client sees it, over all calls and over the
   waiting workloads' calls alone.
4. **cycle**: `repeat` cycles run by hand on the settled, full cluster (engine part and total,
   which adds the service re-deriving every workload view); plus what the cycles run during
   the submit phase took.
"""

from __future__ import annotations

import json
import resource
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import IO, Any

__all__ = [
    "EXPLAIN_P99_TARGET_MS",
    "GPUS_PER_POD",
    "PODS_PER_WORKLOAD",
    "SUBMITS_PER_SECOND_TARGET",
    "GrpcBenchResult",
    "render",
    "run_grpc_bench",
]

PODS_PER_WORKLOAD = 4
GPUS_PER_POD = 2
NAMESPACE = "bench"
SUBMITS_PER_SECOND_TARGET = 500.0
EXPLAIN_P99_TARGET_MS = 50.0
DEFAULT_CLIENTS = 8
CALL_TIMEOUT_SECONDS = 60.0
SETTLE_TIMEOUT_SECONDS = 600.0


@dataclass(frozen=True)
class Latency:
    """Round trips as a client saw them, in milliseconds."""

    calls: int
    p50_ms: float
    p99_ms: float
    max_ms: float

    @classmethod
    def of(cls, seconds: Sequence[float]) -> Latency:
        if not seconds:
            return cls(0, 0.0, 0.0, 0.0)
        ordered = sorted(seconds)
        return cls(
            len(ordered),
            _percentile(ordered, 0.50) * 1000,
            _percentile(ordered, 0.99) * 1000,
            ordered[-1] * 1000,
        )


@dataclass(frozen=True)
class CycleStats:
    """Scheduling cycles, in seconds: `engine` converts, snapshots and plans; `total` adds applying
    the plan and re-deriving every workload's view."""

    cycles: int
    median_engine_s: float
    median_total_s: float
    max_total_s: float

    @classmethod
    def of(cls, engine: Sequence[float], total: Sequence[float]) -> CycleStats:
        if not total:
            return cls(0, 0.0, 0.0, 0.0)
        return cls(len(total), statistics.median(engine), statistics.median(total), max(total))


@dataclass
class GrpcBenchResult:
    nodes: int
    gpus_per_node: int
    workloads: int
    pods_per_workload: int
    gpus_per_pod: int
    pods: int
    clients: int
    submit_seconds: float
    submits_per_second: float
    pods_per_second: float
    submit: Latency
    settle_seconds: float
    """Last submit answered → nothing left to schedule."""
    workloads_running: int
    workloads_pending: int
    explain: Latency
    explain_pending: Latency
    """The waiting workloads' explanations alone: the expensive ones."""
    cycles_during_submits: CycleStats
    full_cycle: CycleStats
    """Cycles run by hand on the settled cluster: every pod converted, nothing left to place."""
    peak_rss_mb: float
    targets: dict[str, float] = field(
        default_factory=lambda: {
            "submits_per_second": SUBMITS_PER_SECOND_TARGET,
            "explain_p99_ms": EXPLAIN_P99_TARGET_MS,
        }
    )
    errors: list[str] = field(default_factory=list)
    """Calls that failed (the first few); a clean run has none."""

    @property
    def targets_met(self) -> bool:
        return (
            not self.errors
            and self.submits_per_second >= SUBMITS_PER_SECOND_TARGET
            and self.explain.p99_ms <= EXPLAIN_P99_TARGET_MS
        )

    def as_json(self) -> dict[str, object]:
        data = asdict(self)
        data["targets_met"] = self.targets_met
        return data


def _percentile(ordered: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile of sorted values."""
    rank = max(1, round(fraction * len(ordered) + 0.5))
    return ordered[min(rank, len(ordered)) - 1]


def workload_name(index: int) -> str:
    return f"gang-{index:05d}"


# ---------------------------------------------------------------------------------- the clients
# These run in the client process: module-level, so the spawned process can import them.


def _request(index: int, pods_per_workload: int, gpus_per_pod: int) -> Any:
    from kai_ray.api.constants import DEFAULT_QUEUE
    from kai_ray.v1 import scheduler_pb2 as pb

    template = pb.PodTemplate(requests={"nvidia.com/gpu": str(gpus_per_pod), "cpu": "1", "memory": "4Gi"})
    return pb.SubmitWorkloadRequest(
        namespace=NAMESPACE,
        name=workload_name(index),
        workload=pb.WorkloadSpec(
            queue=DEFAULT_QUEUE,
            pod_sets=[pb.PodSet(name="worker", replicas=pods_per_workload, template=template)],
        ),
    )


def _run_clients(
    address: str, shares: list[list[int]], call: Callable[[Any, Any], None], prepare: Callable[[int], Any]
) -> dict[str, Any]:
    """One thread and channel per share; each connects, makes one call and builds its requests
    (`prepare`) before the shared start, then times each of its calls.  Returns wall seconds,
    per-call seconds and errors.  Building requests is the client's work, not the server's: done
    inside the timed loop, the first one (importing the API's models) stalled every thread."""
    from kai_ray.rpc.client import KaiRayClient
    from kai_ray.v1 import scheduler_pb2 as pb

    clients = [KaiRayClient(address, timeout=CALL_TIMEOUT_SECONDS) for _ in shares]
    start = threading.Barrier(len(shares) + 1)
    latencies: list[list[tuple[int, float]]] = [[] for _ in shares]
    errors: list[str] = []

    def work(slot: int) -> None:
        client = clients[slot]
        client.list_queues(pb.ListQueuesRequest())  # connected before the clock starts
        requests = [(index, prepare(index)) for index in shares[slot]]
        start.wait()
        for index, request in requests:
            began = time.perf_counter()
            try:
                call(client, request)
            except Exception as exc:  # counted and reported; the run goes on
                errors.append(f"{workload_name(index)}: {exc}")
                continue
            latencies[slot].append((index, time.perf_counter() - began))

    threads = [threading.Thread(target=work, args=(slot,)) for slot in range(len(shares))]
    for thread in threads:
        thread.start()
    start.wait()
    began = time.perf_counter()
    for thread in threads:
        thread.join()
    seconds = time.perf_counter() - began
    for client in clients:
        client.close()
    return {"seconds": seconds, "latencies": [x for slot in latencies for x in slot], "errors": errors[:10]}


def client_submits(
    address: str, shares: list[list[int]], pods_per_workload: int, gpus_per_pod: int
) -> dict[str, Any]:
    def submit(client: Any, request: Any) -> None:
        client.submit_workload(request)

    return _run_clients(
        address, shares, submit, lambda index: _request(index, pods_per_workload, gpus_per_pod)
    )


def client_explains(address: str, shares: list[list[int]]) -> dict[str, Any]:
    from kai_ray.v1 import scheduler_pb2 as pb

    def explain(client: Any, request: Any) -> None:
        client.explain(request)

    return _run_clients(
        address, shares, explain, lambda index: pb.ExplainRequest(id=f"{NAMESPACE}/{workload_name(index)}")
    )


class ClientProcess:
    """The clients' process: `python -m kai_ray.bench.grpc_bench`, one JSON line per command on
    its stdin and one JSON line per answer on its stdout.  A plain subprocess rather than
    multiprocessing, which would re-import the caller's main module in the child."""

    def __init__(self) -> None:
        self._process = subprocess.Popen(
            [sys.executable, "-m", "kai_ray.bench.grpc_bench"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def call(self, command: dict[str, Any]) -> dict[str, Any]:
        stdin, stdout = self._process.stdin, self._process.stdout
        assert stdin is not None and stdout is not None
        stdin.write(json.dumps(command) + "\n")
        stdin.flush()
        line = stdout.readline()
        if not line:
            raise RuntimeError(f"the bench's client process exited ({self._process.wait()})")
        answer: dict[str, Any] = json.loads(line)
        if "error" in answer:
            raise RuntimeError(f"the bench's client process failed: {answer['error']}")
        return answer

    def close(self) -> None:
        if self._process.stdin is not None:
            self._process.stdin.close()
        try:
            self._process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()


@contextmanager
def client_process() -> Iterator[ClientProcess]:
    process = ClientProcess()
    try:
        yield process
    finally:
        process.close()


def serve_commands(lines: IO[str], out: IO[str]) -> None:
    """The client process's loop: ``ready``, ``submit`` and ``explain`` commands until EOF."""
    for line in lines:
        command = json.loads(line)
        try:
            op = command["op"]
            if op == "ready":
                import kai_ray.rpc.client  # noqa: F401 - imported before any clock runs

                answer: dict[str, Any] = {"ok": True}
            elif op == "submit":
                answer = client_submits(
                    command["address"],
                    command["shares"],
                    command["pods_per_workload"],
                    command["gpus_per_pod"],
                )
            elif op == "explain":
                answer = client_explains(command["address"], command["shares"])
            else:
                answer = {"error": f"unknown command {op!r}"}
        except Exception as exc:  # reported to the parent, which raises it
            answer = {"error": f"{type(exc).__name__}: {exc}"}
        out.write(json.dumps(answer) + "\n")
        out.flush()


# ---------------------------------------------------------------------------------- the run


def run_grpc_bench(
    nodes: int = 500,
    pods: int = 4000,
    *,
    clients: int = DEFAULT_CLIENTS,
    repeat: int = 3,
    gpus_per_node: int = 8,
    pods_per_workload: int = PODS_PER_WORKLOAD,
    gpus_per_pod: int = GPUS_PER_POD,
    progress: Callable[[str], None] = lambda _line: None,
) -> GrpcBenchResult:
    """The whole benchmark; see the module docstring.  Raises ValueError for a shape it cannot run."""
    from kai_ray.gc_tuning import tune_gc_for_serving
    from kai_ray.rpc.api import SchedulerService
    from kai_ray.rpc.sim_backend import SimBackend
    from kai_ray.rpc.transport import start_grpc_server
    from kai_ray.v1 import scheduler_pb2 as pb

    if pods < pods_per_workload:
        raise ValueError(f"--pods must be at least {pods_per_workload} (one workload of {pods_per_workload})")
    if clients < 1 or repeat < 1 or nodes < 1:
        raise ValueError("nodes, clients and repeat must be at least 1")
    workloads = pods // pods_per_workload
    clients = min(clients, workloads)
    shares = [list(range(slot, workloads, clients)) for slot in range(clients)]

    backend = SimBackend.from_nodes(nodes, gpus_per_node)
    service = SchedulerService(backend)
    tune_gc_for_serving()  # as `kai-ray serve` does
    backend.start()
    errors: list[str] = []
    try:
        backend.wait_idle(SETTLE_TIMEOUT_SECONDS)
        with start_grpc_server(service, "127.0.0.1:0") as server, client_process() as remote:
            address = f"127.0.0.1:{server.port}"
            remote.call({"op": "ready"})
            progress(f"submitting {workloads} workloads × {pods_per_workload} pods from {clients} clients")
            first_cycle = backend.cycles
            submitted = remote.call(
                {
                    "op": "submit",
                    "address": address,
                    "shares": shares,
                    "pods_per_workload": pods_per_workload,
                    "gpus_per_pod": gpus_per_pod,
                }
            )
            answered = time.perf_counter()
            errors.extend(submitted["errors"])
            during = [t for t in backend.timings() if t.number > first_cycle]
            progress("waiting for the cluster to settle")
            backend.wait_idle(SETTLE_TIMEOUT_SECONDS)
            settle = time.perf_counter() - answered
            states = {w.id: w.state for w in service.workloads.all()}
            running = sum(state == pb.RUNNING for state in states.values())
            pending = sum(state in (pb.PENDING, pb.EVICTED) for state in states.values())
            progress(f"explaining {workloads} workloads")
            explained = remote.call({"op": "explain", "address": address, "shares": shares})
            errors.extend(explained["errors"])
        progress(f"timing {repeat} cycles on the full cluster")
        full_engine: list[float] = []
        full_total: list[float] = []
        for _ in range(repeat):
            record = backend.run_cycle()
            timing = next(t for t in reversed(backend.timings()) if t.number == record.number)
            full_engine.append(timing.engine_seconds)
            full_total.append(timing.seconds)
    finally:
        backend.close()

    waiting = {
        index
        for index in range(workloads)
        if states.get(f"{NAMESPACE}/{workload_name(index)}") in (pb.PENDING, pb.EVICTED)
    }
    seconds = submitted["seconds"]
    done = len(submitted["latencies"])
    return GrpcBenchResult(
        nodes=nodes,
        gpus_per_node=gpus_per_node,
        workloads=workloads,
        pods_per_workload=pods_per_workload,
        gpus_per_pod=gpus_per_pod,
        pods=workloads * pods_per_workload,
        clients=clients,
        submit_seconds=seconds,
        submits_per_second=done / seconds if seconds else 0.0,
        pods_per_second=done * pods_per_workload / seconds if seconds else 0.0,
        submit=Latency.of([s for _, s in submitted["latencies"]]),
        settle_seconds=settle,
        workloads_running=running,
        workloads_pending=pending,
        explain=Latency.of([s for _, s in explained["latencies"]]),
        explain_pending=Latency.of([s for i, s in explained["latencies"] if i in waiting]),
        cycles_during_submits=CycleStats.of([t.engine_seconds for t in during], [t.seconds for t in during]),
        full_cycle=CycleStats.of(full_engine, full_total),
        peak_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        errors=errors[:10],
    )


def render(result: GrpcBenchResult, console: Any) -> None:
    """The result as `kai-ray bench --grpc` prints it: throughput and latency, then cycles."""
    from rich.table import Table

    title = (
        f"kai-ray bench --grpc: {result.nodes} nodes × {result.gpus_per_node} GPUs, "
        f"{result.workloads} workloads × {result.pods_per_workload} pods × {result.gpus_per_pod} GPUs, "
        f"{result.clients} clients"
    )
    summary = Table(title=title)
    row = {
        "submits/s": f"{result.submits_per_second:.0f} (≥ {SUBMITS_PER_SECOND_TARGET:.0f})",
        "pods/s": f"{result.pods_per_second:.0f}",
        "submit p50/p99 ms": f"{result.submit.p50_ms:.1f} / {result.submit.p99_ms:.1f}",
        "settle s": f"{result.settle_seconds:.1f}",
        "running/pending": f"{result.workloads_running} / {result.workloads_pending}",
        "Explain p50/p99 ms": (
            f"{result.explain.p50_ms:.1f} / {result.explain.p99_ms:.1f} (≤ {EXPLAIN_P99_TARGET_MS:.0f})"
        ),
        "waiting p99 ms": f"{result.explain_pending.p99_ms:.1f}",
        "peak RSS MB": f"{result.peak_rss_mb:.0f}",
    }
    for column in row:
        summary.add_column(column, justify="right")
    summary.add_row(*row.values())
    console.print(summary)
    cycles = Table(title="scheduling cycles, seconds (engine: convert + snapshot + actions)")
    for column in ("when", "cycles", "median engine", "median total", "max total"):
        cycles.add_column(column, justify="right")
    for name, stats in (
        ("during submits", result.cycles_during_submits),
        ("full cluster, by hand", result.full_cycle),
    ):
        cycles.add_row(
            name,
            str(stats.cycles),
            f"{stats.median_engine_s:.3f}",
            f"{stats.median_total_s:.3f}",
            f"{stats.max_total_s:.3f}",
        )
    console.print(cycles)
    console.print("targets met" if result.targets_met else "targets NOT met")
    for error in result.errors:
        console.print(f"error: {error}")


if __name__ == "__main__":
    serve_commands(sys.stdin, sys.stdout)
