"""`kai-ray bench --kube --shape kube-burst-NxP`: P pending pods at once against `kai-ray serve`.

Issue 35 saw it on the dev cluster: while the in-process podgrouper took in 20,000 pending pods,
cycles took up to 410 s, a CPU-only pod that fitted waited over 120 s, Events were dropped
uncounted, and the scheduler's memory went from 112 MB to 1.75 GB and stayed at 1.84 GB after
every pod was deleted.  This benchmark replays it and measures what the issue asks for:

- a probe, a CPU-only pod created every `probe_every` seconds in a namespace of its own from
  the start of the burst until it is grouped and explained: seconds from create to bound;
- the RSS of the `kai-ray serve` process (its own process, so the figure is the scheduler's
  alone): before the burst, its peak, and once every burst pod and PodGroup is deleted and the
  scheduler's cache has let them go;
- the cycles' durations (from serve's log) and `kai_ray_events_dropped_total`.

N nodes of 8 GPUs hold 8·N one-GPU pods; the other burst pods stay pending, so every cycle of
the burst plans thousands of pending jobs, as on the dev cluster.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Final

from kai_ray.api.constants import DEFAULT_QUEUE, QUEUE_LABEL, SCHEDULER_NAME

__all__ = [
    "BURST_PATTERN",
    "BurstResult",
    "RssPeak",
    "burst_sizes",
    "create_pods",
    "delete_burst",
    "pod_body",
    "render",
    "rss_mb",
    "run_burst_bench",
]

BURST_PATTERN: Final = r"kube-burst-(\d+)x(\d+)"
BURST_NAMESPACE: Final = "burst"
PROBE_NAMESPACE: Final = "burst-probe"
CREATE_WORKERS: Final = 16
PROBE_EVERY_SECONDS: Final = 5.0
WAIT_SECONDS: Final = 1800.0
_POLL_SECONDS: Final = 0.1


def burst_sizes(shape: str) -> tuple[int, int] | None:
    """(nodes, pods) of a `kube-burst-NxP` shape, or None for another name."""
    match = re.fullmatch(BURST_PATTERN, shape)
    return None if match is None else (int(match.group(1)), int(match.group(2)))


def pod_body(name: str, *, gpus: int = 1, scheduler: str = SCHEDULER_NAME) -> dict[str, Any]:
    """A bare pod of the default queue: `gpus` whole GPUs (0: CPU only), 100m CPU, 100Mi."""
    resources: dict[str, Any] = {"requests": {"cpu": "100m", "memory": "100Mi"}}
    if gpus:
        resources["limits"] = {"nvidia.com/gpu": str(gpus)}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {QUEUE_LABEL: DEFAULT_QUEUE}},
        "spec": {
            "schedulerName": scheduler,
            "containers": [{"name": "main", "image": "busybox", "resources": resources}],
        },
    }


def create_pods(
    api: Any,
    namespace: str,
    bodies: Callable[[int], dict[str, Any]],
    count: int,
    workers: int = CREATE_WORKERS,
) -> None:
    """Create `count` pods (`bodies(index)` each) with `workers` calls in flight, as plain dicts
    (no client models built): about 300 pods/s on a 2-core dev cluster."""
    from kubernetes import client

    from kai_ray.cluster.kube.calls import discard

    core: Any = client.CoreV1Api(api)

    def create(index: int) -> None:
        discard(core.create_namespaced_pod(namespace, bodies(index), _preload_content=False))

    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="bench-create") as pool:
        for future in [pool.submit(create, index) for index in range(count)]:
            future.result()


def delete_burst(api: Any, namespace: str, timeout: float = WAIT_SECONDS) -> None:
    """Delete every pod and PodGroup of `namespace`, again while a list still finds one.

    A deletecollection answers with every object it deleted (tens of MB for 20,000 pods), and
    on a loaded dev cluster that answer broke off midway (`IncompleteRead`), the deletion done
    or not: so the answer is never read, and the call is repeated until none is left."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    core: Any = client.CoreV1Api(api)
    custom: Any = client.CustomObjectsApi(api)
    group = ("scheduling.run.ai", "v2alpha2", namespace, "podgroups")
    kinds: list[tuple[Callable[[], Any], Callable[[], Any]]] = [
        (
            lambda: core.delete_collection_namespaced_pod(
                namespace, grace_period_seconds=0, _preload_content=False
            ),
            lambda: core.list_namespaced_pod(namespace, limit=1, _preload_content=False),
        ),
        (
            lambda: custom.delete_collection_namespaced_custom_object(*group, _preload_content=False),
            lambda: custom.list_namespaced_custom_object(*group, limit=1, _preload_content=False),
        ),
    ]

    def deleted(delete: Callable[[], Any], first: Callable[[], Any]) -> bool:
        with contextlib.suppress(ApiException, HTTPError):
            delete().close()  # closed unread: the deleted objects are not wanted
        with contextlib.suppress(ApiException, HTTPError):
            return not json.loads(first().data)["items"]
        return False

    for delete, first in kinds:
        _wait(functools.partial(deleted, delete, first), f"every object deleted in {namespace}", timeout)


def rss_mb(pid: int) -> float:
    """The resident set of process `pid`, in MiB (Linux's /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise ValueError(f"no VmRSS for process {pid}")


class RssPeak:
    """The largest RSS of a process, sampled every `interval` seconds on a thread of its own."""

    def __init__(self, pid: int, interval: float = 0.25) -> None:
        self.pid = pid
        self.peak = rss_mb(pid)
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="rss-peak", daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.wait(self._interval):
            with contextlib.suppress(OSError, ValueError):  # the process ended
                self.peak = max(self.peak, rss_mb(self.pid))

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        return self.peak


@dataclass
class BurstResult:
    nodes: int
    pods: int
    create_s: float = 0.0
    """Seconds to create the burst's pods (16 calls in flight)."""
    grouped_s: float = 0.0
    """From the first pod created until every one was linked to its PodGroup."""
    probes: list[tuple[float, float]] = field(default_factory=list)
    """(seconds into the burst when created, seconds until bound) per probe pod."""
    rss_before_mb: float = 0.0
    rss_peak_mb: float = 0.0
    rss_after_mb: float = 0.0
    """Once every burst pod and PodGroup is deleted, the cache emptied and memory given back."""
    cycles: list[float] = field(default_factory=list)
    """Every cycle's seconds from the burst's start until its pods were deleted."""
    events_dropped: int = 0
    load_average: tuple[float, float, float] = (0.0, 0.0, 0.0)

    @property
    def max_probe_s(self) -> float:
        return max((seconds for _, seconds in self.probes), default=0.0)

    def as_json(self) -> dict[str, object]:
        return {
            "shape": f"kube-burst-{self.nodes}x{self.pods}",
            "max_probe_s": self.max_probe_s,
            "max_cycle_s": max(self.cycles, default=0.0),
            "median_cycle_s": statistics.median(self.cycles) if self.cycles else 0.0,
        } | asdict(self)


class _Serve:
    """`kai-ray serve` as its own process on the dev cluster, its JSON log in a file."""

    def __init__(self, kubeconfig: Path, log_path: Path) -> None:
        self.log_path = log_path
        command = [
            str(Path(sys.executable).parent / "kai-ray"),
            "serve",
            "--kubeconfig",
            str(kubeconfig),
            "--identity",
            "burst",
            "--lease-namespace",
            "default",
            "--metrics-address",
            "127.0.0.1:0",
        ]
        with log_path.open("wb") as stderr:
            self.proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=stderr)

    def messages(self) -> list[str]:
        found = []
        for line in self.log_path.read_text(errors="replace").splitlines():
            with contextlib.suppress(ValueError):
                found.append(str(json.loads(line).get("message", "")))
        return found

    def cycle_seconds(self) -> list[float]:
        return [float(m.rsplit(" ", 1)[1].rstrip("s")) for m in self.messages() if m.startswith("cycle:")]

    def metrics(self) -> dict[str, float]:
        address = next(m.split()[2] for m in self.messages() if m.startswith("metrics on "))
        with urllib.request.urlopen(address, timeout=10) as response:
            text = response.read().decode()
        samples = (line.rsplit(" ", 1) for line in text.splitlines() if line and not line.startswith("#"))
        return {name: float(value) for name, value in samples}

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=30)


def _wait(check: Callable[[], bool], what: str, timeout: float = WAIT_SECONDS) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(_POLL_SECONDS)


class _Probes:
    """A CPU-only pod every `every` seconds, each timed from its create to its node, until stopped."""

    def __init__(self, api: Any, started: float, every: float) -> None:
        from kubernetes import client

        self._core: Any = client.CoreV1Api(api)
        self._started = started
        self._every = every
        self.timed: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="burst-probes", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        index = 0
        while not self._stop.is_set():
            name, created = f"probe-{index}", time.monotonic()
            self._core.create_namespaced_pod(PROBE_NAMESPACE, pod_body(name, gpus=0), _preload_content=False)
            while not self._core.read_namespaced_pod(name, PROBE_NAMESPACE).spec.node_name:
                time.sleep(_POLL_SECONDS)
            self.timed.append((created - self._started, time.monotonic() - created))
            index += 1
            self._stop.wait(max(0.0, created + self._every - time.monotonic()))

    def stop(self) -> list[tuple[float, float]]:
        self._stop.set()
        self._thread.join()
        return self.timed


def run_burst_bench(
    nodes: int,
    pods: int,
    *,
    directory: Path | None = None,
    bin_dir: Path | None = None,
    probe_every: float = PROBE_EVERY_SECONDS,
    progress: Callable[[str], None] | None = None,
) -> BurstResult:
    """Start a dev cluster with `nodes` 8-GPU nodes and `kai-ray serve`, burst `pods` one-GPU pods,
    probe, delete them; the cluster and serve are always stopped before returning."""
    from kubernetes import client

    from kai_ray import devcluster

    say = progress or (lambda _: None)
    owned = directory is None
    workdir = Path(tempfile.mkdtemp(prefix="kai-ray-burst-")) if directory is None else Path(directory)
    result = BurstResult(nodes, pods)
    serve: _Serve | None = None
    try:
        say(f"starting a dev cluster with {nodes} nodes x 8 GPUs in {workdir}")
        cluster = devcluster.start(
            workdir / "cluster", nodes=nodes, bin_dir=bin_dir, die_with_parent=True, controller_manager="off"
        )
        configuration = cluster.configuration()
        configuration.connection_pool_maxsize = CREATE_WORKERS + 4
        api = client.ApiClient(configuration)
        core: Any = client.CoreV1Api(api)
        serve = running = _Serve(cluster.kubeconfig, workdir / "serve.log")
        _wait(lambda: len(running.cycle_seconds()) >= 2, "serve's first cycles", 120)
        result.rss_before_mb = rss_mb(running.proc.pid)
        for namespace in (BURST_NAMESPACE, PROBE_NAMESPACE):
            core.create_namespace({"metadata": {"name": namespace}})
        cycles_before = len(running.cycle_seconds())
        peak = RssPeak(running.proc.pid)
        started = time.monotonic()
        probes = _Probes(api, started, probe_every)
        say(f"creating {pods} pods (RSS before: {result.rss_before_mb:.0f} MB)")
        create_pods(api, BURST_NAMESPACE, lambda index: pod_body(f"burst-{index:05d}"), pods)
        result.create_s = time.monotonic() - started
        linked = "kai_ray_podgrouper_pods_linked_total"
        say(f"created in {result.create_s:.0f} s; waiting for every pod to be grouped")
        _wait(lambda: running.metrics().get(linked, 0) >= pods, "the burst grouped")
        result.grouped_s = time.monotonic() - started
        probes_grouped = len(probes.timed)
        say(f"grouped after {result.grouped_s:.0f} s; two more probes")
        _wait(lambda: len(probes.timed) >= probes_grouped + 2, "two probes after grouping", 120)
        result.probes = probes.stop()
        result.rss_peak_mb = peak.stop()
        result.cycles = running.cycle_seconds()[cycles_before:]
        say(f"deleting the burst (peak RSS {result.rss_peak_mb:.0f} MB)")
        delete_burst(api, BURST_NAMESPACE)
        _wait(lambda: _cached_pods(running.metrics()) <= len(result.probes), "the cache emptied")
        emptied = len(running.cycle_seconds())
        _wait(lambda: len(running.cycle_seconds()) >= emptied + 2, "two cycles of the emptied cache", 120)
        result.rss_after_mb = rss_mb(running.proc.pid)
        result.events_dropped = int(running.metrics().get("kai_ray_events_dropped_total", 0))
        result.load_average = os.getloadavg()
        return result
    finally:
        if serve is not None:
            serve.stop()
        with contextlib.suppress(Exception):
            devcluster.stop(workdir / "cluster")
        if owned:
            shutil.rmtree(workdir, ignore_errors=True)


def _cached_pods(metrics: dict[str, float]) -> float:
    return metrics.get('kai_ray_tracked_objects{memory="cache_Pod"}', 0.0)


def render(result: BurstResult, console: Any) -> None:
    """The result as `kai-ray bench` prints it."""
    from rich.table import Table

    table = Table(title=f"kai-ray bench --kube kube-burst-{result.nodes}x{result.pods}")
    row = {
        "create s": f"{result.create_s:.0f}",
        "grouped s": f"{result.grouped_s:.0f}",
        "probes": str(len(result.probes)),
        "worst probe s": f"{result.max_probe_s:.1f}",
        "longest cycle s": f"{max(result.cycles, default=0.0):.1f}",
        "RSS before MB": f"{result.rss_before_mb:.0f}",
        "peak MB": f"{result.rss_peak_mb:.0f}",
        "after deletion MB": f"{result.rss_after_mb:.0f}",
        "Events dropped": str(result.events_dropped),
    }
    for column in row:
        table.add_column(column, justify="right")
    table.add_row(*row.values())
    console.print(table)
    probes = ", ".join(f"{at:.0f}s: {seconds:.1f}" for at, seconds in result.probes)
    console.print(f"probes (created at: seconds to bind): {probes}")
    console.print(f"load average at the end {result.load_average[0]:.1f}")
