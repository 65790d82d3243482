"""End-to-end benchmark on a real API server: `kai-ray bench --kube`.

Unlike the shape benchmarks, which time the engine alone, this one times
everything a pod goes through between "created" and "bound" on the dev
cluster (etcd + kube-apiserver + kwok on this machine): the grouper gives
each pod its PodGroup, the cache feeds the snapshot, the engine plans, the
applier creates BindRequests, the binder posts each binding and records it,
the status writer reports, and a background thread writes the Events. kwok
marks bound pods Running meanwhile, on the same CPUs.

The clock starts when the first cycle starts (the pods already exist and the
cache is synced) and stops when the binder has bound the last pod (its
`pods/binding` call returned); pods bound per second is pods over that time. Starting the cluster,
creating nodes and pods, and syncing the cache are timed separately.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import resource
import shutil
import statistics
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kai_ray.server.serve import GrouperFactory

from kai_ray.bench.burst import create_pods, pod_body
from kai_ray.cluster.kube.bind_mode import BindMode

__all__ = ["NAMESPACE", "KubeBenchResult", "render", "run_kube_bench"]

NAMESPACE = "kai-ray-bench"
SCHEDULER_USER_AGENT = "kai-ray-bench-scheduler"
"""The scheduler's user agent, which tells its writes apart in the audit log (the pod runner
writes pod status too)."""
DEFAULT_TIMEOUT_SECONDS = 600.0
IDLE_PATTERN = r"kube-idle-(\d+)x(\d+)"
"""`--kube --shape kube-idle-NxP`: N nodes, P pods, then the scheduler left running idle."""
IDLE_WINDOW_SECONDS = 60.0
CREATE_WORKERS = 16


@dataclass
class KubeBenchResult:
    nodes: int
    gpus_per_node: int
    pods: int
    bound: int
    """Pods with a node at the end, as the API server lists them."""
    cycles: int
    seconds: float
    """First cycle start until the last pod was bound (or the timeout)."""
    pods_per_second: float
    timed_out: bool
    concurrency: int
    """API calls in flight per step (`KubeScheduler.concurrency`)."""
    events_written_s: float
    """First cycle start until the last queued Event was written (they go out in the background)."""
    events_dropped: int
    phases: dict[str, float]
    """Seconds per cycle step, summed over all cycles (group, snapshot, report, plan, apply, bind, status)."""
    cycle_seconds: list[float]
    setup: dict[str, float]
    """Seconds spent before the clock started: cluster start (nodes included), pod creation, cache sync."""
    peak_rss_mb: float
    cpu_seconds: dict[str, float] = field(default_factory=dict)
    """CPU (user + system) each process used while the clock ran: the scheduler (this process),
    kube-apiserver, etcd and the pod runner, which all share this machine's cores."""
    errors: list[str] = field(default_factory=list)
    """Apply and binder failures seen during the run (the first few)."""
    bind_mode: str = BindMode.BIND_REQUEST.value
    api_writes: dict[str, int] = field(default_factory=dict)
    """The scheduler's writes while timed, by "verb resource[/subresource]", from the API
    server's audit log (Events included: they go out in the background, all counted)."""
    load_average: tuple[float, float, float] = (0.0, 0.0, 0.0)
    """`os.getloadavg()` at the end: how busy the machine was."""
    idle: dict[str, float] = field(default_factory=dict)
    """With `idle_seconds`: the scheduler left running on the settled cluster (`IdleCost`)."""

    @property
    def api_writes_per_pod(self) -> float:
        return sum(self.api_writes.values()) / self.bound if self.bound else 0.0

    @property
    def scheduler_cpu_ms_per_pod(self) -> float:
        return 1000 * self.cpu_seconds.get("scheduler", 0.0) / self.bound if self.bound else 0.0

    def as_json(self) -> dict[str, object]:
        """The fields of every bench result (shape, executor, runs, median_cycle_seconds,
        pods_placed, pods_per_second, peak_rss_mb), then this benchmark's own."""
        common: dict[str, object] = {
            "shape": f"kube-{self.nodes}x{self.pods}",
            "executor": "local",
            "runs": self.cycle_seconds,
            "median_cycle_seconds": statistics.median(self.cycle_seconds) if self.cycle_seconds else 0.0,
            "pods_placed": self.bound,
            "api_writes_per_pod": self.api_writes_per_pod,
            "scheduler_cpu_ms_per_pod": self.scheduler_cpu_ms_per_pod,
        }
        return common | asdict(self)


def _create_pods(api: Any, count: int, workers: int) -> None:
    from kubernetes import client

    core: Any = client.CoreV1Api(api)  # a plain dict as the body: no model to build
    core.create_namespace({"metadata": {"name": NAMESPACE}})
    create_pods(api, NAMESPACE, lambda index: pod_body(f"bench-{index:05d}"), count, workers)


def idle_sizes(shape: str) -> tuple[int, int]:
    """(nodes, pods) of a `kube-idle-NxP` shape; anything else is refused with the known name."""
    match = re.fullmatch(IDLE_PATTERN, shape)
    if match is None:
        raise ValueError(
            f"with --kube, --shape must be kube-idle-NxP or kube-burst-NxP (N nodes, P pods), not {shape!r}"
        )
    nodes, pods = (int(group) for group in match.groups())
    return nodes, pods


def _idle_cost(
    scheduler: Any, api: Any, pods: int, seconds: float, say: Callable[[str], None]
) -> dict[str, float]:
    """What the scheduler costs once everything runs and nothing changes.

    First every pod is Running and a cycle finds nothing to do; then the serve loop runs with
    its default pacing for `seconds` (`cpu_s`, `cycles`), and `cpu_per_period_s` spreads that
    CPU over the periods of KAI's 1 s `schedulePeriod` the window held: what an idle cycle
    costs, skipped or not. Last, one full cycle is forced (its CPU is `full_cycle_cpu_s`):
    what a cycle of the settled cluster costs when one runs (after the window, so that work
    done once after a burst, the podgrouper's first refresh of each pod, is not in it).
    """
    from kai_ray.server.scheduler import DEFAULT_PERIOD_SECONDS, CyclePacing

    say(f"waiting for {pods} pods Running and a settled cycle")
    deadline = time.monotonic() + DEFAULT_TIMEOUT_SECONDS
    unsettled: str | None = "no cycle yet"
    while unsettled is not None:
        running = _bound_pods(api, "Running")
        unsettled = (
            scheduler.run_cycle().unsettled_by if running >= pods else f"{running}/{pods} pods Running"
        )
        if time.monotonic() > deadline:
            raise TimeoutError(f"the cluster never settled: {unsettled}")
    say(f"settled; the paced loop for {seconds:.0f} s")
    stop = threading.Event()
    timer = threading.Timer(seconds, stop.set)
    cycles, before = scheduler.cycles_run, _own_cpu()
    timer.start()
    scheduler.cycle_until(stop, CyclePacing())
    cpu = _own_cpu() - before
    cycles = scheduler.cycles_run - cycles
    before = _own_cpu()
    scheduler.run_cycle()
    full = _own_cpu() - before
    return {
        "pods_running": float(pods),
        "full_cycle_cpu_s": full,
        "window_s": seconds,
        "cycles": float(cycles),
        "cpu_s": cpu,
        "cpu_per_period_s": cpu / (seconds / DEFAULT_PERIOD_SECONDS),
    }


def _own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _writes(events: list[dict[str, Any]]) -> dict[str, int]:
    """The scheduler's writes among audit events, by verb and resource (subresource)."""
    counts: Counter[str] = Counter()
    for event in events:
        if event.get("userAgent") != SCHEDULER_USER_AGENT:
            continue
        ref = event.get("objectRef") or {}
        resource = str(ref.get("resource") or "")
        if ref.get("subresource"):
            resource += f"/{ref['subresource']}"
        counts[f"{event.get('verb')} {resource}"] += 1
    return dict(sorted(counts.items()))


def _cpu_seconds(workdir: Path) -> dict[str, float]:
    """CPU seconds used so far by this process ("scheduler") and each dev-cluster process."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    out = {"scheduler": usage.ru_utime + usage.ru_stime}
    state = json.loads((workdir / "state.json").read_text())
    ticks = os.sysconf("SC_CLK_TCK")
    for name, info in (state.get("processes") or {}).items():
        try:
            fields = Path(f"/proc/{int(info['pid'])}/stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        out[name] = (int(fields[11]) + int(fields[12])) / ticks  # utime, stime
    return out


def _bound_pods(api: Any, phase: str | None = None) -> int:
    """Pods of the benchmark that have a node (and are in `phase`, if given), from one paged list."""
    from kubernetes import client

    core: Any = client.CoreV1Api(api)
    bound, token = 0, None
    while True:
        response = core.list_namespaced_pod(NAMESPACE, limit=1000, _continue=token, _preload_content=False)
        page = json.loads(response.data)
        bound += sum(
            1
            for pod in page["items"]
            if (pod.get("spec") or {}).get("nodeName")
            and phase in (None, (pod.get("status") or {}).get("phase"))
        )
        token = (page.get("metadata") or {}).get("continue")
        if not token:
            return bound


def run_kube_bench(
    grouper: GrouperFactory,
    nodes: int = 500,
    pods: int = 4000,
    gpus_per_node: int = 8,
    *,
    timeout: float = DEFAULT_TIMEOUT_SECONDS,
    directory: Path | None = None,
    bin_dir: Path | None = None,
    concurrency: int | None = None,
    progress: Callable[[str], None] | None = None,
    bind_mode: BindMode = BindMode.BIND_REQUEST,
    count_writes: bool = True,
    idle_seconds: float = 0.0,
) -> KubeBenchResult:
    """Start a dev cluster, create `nodes` GPU nodes and `pods` one-GPU pods, schedule until bound.

    `grouper` builds the podgrouper `serve` runs in-process (the CLI passes the operators' one),
    so the pods' PodGroups are made inside the timed cycles, as on a cluster.

    The cluster lives in `directory` (a fresh temporary directory by default, removed
    afterwards) and is always stopped before returning.
    """
    from kai_ray import devcluster
    from kai_ray.cluster.kube.fence import FencedApiClient
    from kai_ray.server.scheduler import DEFAULT_CONCURRENCY, KubeScheduler
    from kai_ray.server.serve import load_configuration, pool_size_for

    if pods > nodes * gpus_per_node:
        raise ValueError(f"{pods} one-GPU pods cannot all fit on {nodes} nodes x {gpus_per_node} GPUs")
    say = progress or (lambda _: None)
    owned = directory is None
    workdir = Path(tempfile.mkdtemp(prefix="kai-ray-bench-")) if directory is None else Path(directory)
    setup: dict[str, float] = {}
    try:
        say(f"starting a dev cluster with {nodes} nodes x {gpus_per_node} GPUs in {workdir}")
        started = time.perf_counter()
        cluster = devcluster.start(
            workdir,
            nodes=nodes,
            gpus_per_node=gpus_per_node,
            bin_dir=bin_dir,
            die_with_parent=True,
            audit=True,
            # The binds measured are kai-ray's alone: no controller watches or writes beside them,
            # as in the runs docs/performance.md records.
            controller_manager="off",
        )
        setup["cluster_start_s"] = time.perf_counter() - started
        # The client `kai-ray serve` builds: a connection pool with room for every worker.
        workers = concurrency or DEFAULT_CONCURRENCY
        configuration = load_configuration(cluster.kubeconfig)
        configuration.connection_pool_maxsize = pool_size_for(workers)
        api: Any = FencedApiClient(configuration)
        try:
            say(f"creating {pods} pods")
            started = time.perf_counter()
            _create_pods(api, pods, CREATE_WORKERS)
            setup["pod_create_s"] = time.perf_counter() - started
            api.user_agent = SCHEDULER_USER_AGENT
            scheduler = KubeScheduler(api, concurrency=workers, grouper=grouper(api), bind_mode=bind_mode)
            started = time.perf_counter()
            scheduler.start()
            scheduler.warm_up()  # as `serve` does before its first cycle
            setup["cache_sync_s"] = time.perf_counter() - started
            try:
                audit_mark = len(devcluster.read_audit_events(cluster)) if count_writes else 0
                cpu_before = _cpu_seconds(workdir)
                first = time.perf_counter()
                if scheduler.grouping is not None:
                    scheduler.grouping.start()  # beside the cycles, as `serve` runs it
                result = _schedule(scheduler, api, nodes, gpus_per_node, pods, first, timeout, say)
                cpu_after = _cpu_seconds(workdir)
                say("waiting for the queued Events")
                scheduler.events.flush(timeout)
                result.events_written_s = time.perf_counter() - first
                result.events_dropped = scheduler.events.dropped
                result.concurrency = scheduler.concurrency
                if count_writes:
                    result.api_writes = _writes(devcluster.read_audit_events(cluster)[audit_mark:])
                if idle_seconds > 0:
                    result.idle = _idle_cost(scheduler, api, pods, idle_seconds, say)
                result.bind_mode = bind_mode.value
                result.load_average = os.getloadavg()
            finally:
                scheduler.stop()
        finally:
            api.close()
        result.setup = setup
        result.cpu_seconds = {
            name: cpu_after[name] - cpu_before[name] for name in cpu_after if name in cpu_before
        }
        return result
    finally:
        with contextlib.suppress(Exception):
            devcluster.stop(workdir)
        if owned:
            shutil.rmtree(workdir, ignore_errors=True)


def _record_binds(binder: Any) -> dict[str, float]:
    """When each benchmark pod was bound, as the binder reports it; filled in from its threads.

    A binder pass that outlives `BIND_PASS_TIMEOUT_SECONDS` keeps binding in the background
    and those outcomes never reach a `CycleOutcome`, so the times are taken at the source:
    the binder's two entries, for BindRequests and for direct binds.
    """
    bound: dict[str, float] = {}

    def timed(carry_out: Callable[[Any], Any]) -> Callable[[Any], Any]:
        def recorded(request: Any) -> Any:
            outcome = carry_out(request)
            if (
                outcome is not None
                and outcome.phase == "Succeeded"
                and outcome.pod.startswith(f"{NAMESPACE}/")
            ):
                bound[outcome.pod] = time.perf_counter()  # one key per pod: safe across threads
            return outcome

        return recorded

    binder.bind_one = timed(binder.bind_one)
    binder.bind_now = timed(binder.bind_now)
    return bound


def _schedule(
    scheduler: Any,
    api: Any,
    nodes: int,
    gpus_per_node: int,
    pods: int,
    first: float,
    timeout: float,
    say: Callable[[str], None],
) -> KubeBenchResult:
    phases: dict[str, float] = {}
    cycle_seconds: list[float] = []
    errors: list[str] = []
    bound = _record_binds(scheduler.binder)
    deadline = first + timeout
    while len(bound) < pods and time.perf_counter() < deadline:
        outcome = scheduler.run_cycle()
        cycle_seconds.append(outcome.seconds)
        for name, seconds in outcome.phases.items():
            phases[name] = phases.get(name, 0.0) + seconds
        errors.extend(str(error) for error in outcome.applied.errors)
        errors.extend(f"{request}: {reason}" for request, reason in outcome.bound.failed)
        say(
            f"cycle {len(cycle_seconds)}: {outcome.seconds:.2f}s, {len(outcome.plan.binds)} planned, "
            f"{len(bound)}/{pods} bound"
        )
        if len(bound) < pods and not outcome.plan.binds and not outcome.bound.outcomes:
            time.sleep(0.2)  # binds still running from an earlier pass: a pause, not synchronisation
    timed_out = len(bound) < pods
    final = _bound_pods(api)
    last_bound = max(bound.values(), default=first)
    seconds = (deadline if timed_out else last_bound) - first
    return KubeBenchResult(
        nodes=nodes,
        gpus_per_node=gpus_per_node,
        pods=pods,
        bound=final,
        cycles=len(cycle_seconds),
        seconds=seconds,
        pods_per_second=final / seconds if seconds > 0 else 0.0,
        timed_out=timed_out,
        concurrency=0,
        events_written_s=0.0,
        events_dropped=0,
        phases=phases,
        cycle_seconds=cycle_seconds,
        setup={},
        peak_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        errors=errors[:20],
    )


def render(result: KubeBenchResult, console: Any) -> None:
    """The result as `kai-ray bench` prints it: a summary table, then where the time went."""
    from rich.table import Table

    title = f"kai-ray bench --kube {result.nodes}x{result.gpus_per_node} GPUs, {result.pods} pods"
    summary = Table(title=title)
    row = {
        "nodes": str(result.nodes),
        "pods": str(result.pods),
        "bound": str(result.bound),
        "cycles": str(result.cycles),
        "seconds": f"{result.seconds:.1f}",
        "pods/s": f"{result.pods_per_second:.0f}",
        "events done s": f"{result.events_written_s:.1f}",
        "timed out": "yes" if result.timed_out else "no",
        "peak RSS MB": f"{result.peak_rss_mb:.0f}",
    }
    for column in row:
        summary.add_column(column, justify="right")
    summary.add_row(*row.values())
    console.print(summary)
    phases = Table(title="cycle steps, seconds summed over all cycles")
    for name in result.phases:
        phases.add_column(name, justify="right")
    phases.add_row(*(f"{seconds:.2f}" for seconds in result.phases.values()))
    console.print(phases)
    cpu = Table(title="CPU seconds while timed")
    for name in result.cpu_seconds:
        cpu.add_column(name, justify="right")
    cpu.add_row(*(f"{seconds:.1f}" for seconds in result.cpu_seconds.values()))
    console.print(cpu)
    setup = ", ".join(f"{name} {seconds:.1f}" for name, seconds in result.setup.items())
    console.print(f"set-up (not timed): {setup}; concurrency {result.concurrency}")
    writes = ", ".join(f"{name} {count}" for name, count in result.api_writes.items())
    console.print(
        f"bind mode {result.bind_mode}: {result.api_writes_per_pod:.2f} API writes and "
        f"{result.scheduler_cpu_ms_per_pod:.2f} ms of scheduler CPU per bound pod "
        f"(load average {result.load_average[0]:.1f}); writes: {writes}"
    )
    if result.idle:
        idle = result.idle
        console.print(
            f"idle with {idle['pods_running']:.0f} pods running: "
            f"{idle['cpu_per_period_s']:.3f} s of scheduler CPU per 1 s period "
            f"({idle['cycles']:.0f} cycles in {idle['window_s']:.0f} s); "
            f"one forced full cycle {idle['full_cycle_cpu_s']:.3f} s"
        )
    if result.events_dropped:
        console.print(f"{result.events_dropped} Events dropped (queue full)")
    for error in result.errors:
        console.print(f"error: {error}")
