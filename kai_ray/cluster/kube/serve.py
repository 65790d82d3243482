"""`kai-ray serve`: process-level wiring of the scheduling loop (signals, leader lease, metrics, logs)."""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

from kubernetes import client, config

from kai_ray.cluster.kube.leader import LeaderElector
from kai_ray.cluster.kube.scheduler import DEFAULT_CONCURRENCY, KubeScheduler
from kai_ray.distributed.executor import Executor
from kai_ray.server.metrics import SchedulerMetrics

LEASE_NAME = "kai-ray-scheduler"


class JsonFormatter(logging.Formatter):
    """One JSON object per line: what log collectors in a cluster expect."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {"time": self.formatTime(record), "level": record.levelname, "logger": record.name}
        entry["message"] = record.getMessage()
        if record.exc_info:
            entry["error"] = self.formatException(record.exc_info)
        return json.dumps(entry)


def _configure_logging() -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    logging.basicConfig(level=logging.INFO, handlers=[handler], force=True)


def pool_size_for(concurrency: int) -> int:
    """Connections for a scheduler with `concurrency` workers per step, plus the Event writer,
    the leader lease and the odd straggler: beyond the pool, every request pays a TLS handshake."""
    return concurrency + 8


def api_client(kubeconfig: Path, pool_size: int = 40) -> client.ApiClient:
    configuration = client.Configuration()
    # The client library ships this loader without annotations.
    config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)  # type: ignore[no-untyped-call]
    configuration.connection_pool_maxsize = pool_size
    hook = configuration.refresh_api_key_hook
    if hook is not None:
        configuration.refresh_api_key_hook = _throttled(hook, TOKEN_REFRESH_SECONDS)
    return client.ApiClient(configuration)


TOKEN_REFRESH_SECONDS = 10.0
"""How often the kubeconfig loader may re-check its token (it refreshes 5 minutes before expiry)."""


def _throttled(hook: Callable[[Any], None], seconds: float) -> Callable[[Any], None]:
    """The kubeconfig loader's token hook, run at most once per `seconds` per configuration.

    The loader installs it on every token-based kubeconfig and the client calls it before
    every request; each call re-applies the whole kubeconfig to the shared Configuration
    (host, TLS files, proxy lookup in the environment), which costs more CPU than building
    the request, from every worker thread at once.  Expiring tokens (exec plugins, OIDC) are
    renewed minutes before they expire, so checking every few seconds loses nothing.
    """
    lock = threading.Lock()
    last: dict[int, float] = {}

    def refresh(configuration: Any) -> None:
        now = time.monotonic()
        with lock:
            if now - last.get(id(configuration), -seconds) < seconds:
                return
            last[id(configuration)] = now
            hook(configuration)
            # The loader's hook re-installs itself on every call; keep this one in its place.
            configuration.refresh_api_key_hook = refresh

    return refresh


def serve_forever(
    *,
    kubeconfig: Path,
    scheduler_name: str,
    executor: Executor | None,
    period: float,
    metrics_port: int | None,
    lease_namespace: str,
    identity: str | None,
) -> None:
    """Runs until SIGTERM or SIGINT, then finishes the current cycle and gives the lease up."""
    _configure_logging()
    api = api_client(kubeconfig, pool_size=pool_size_for(DEFAULT_CONCURRENCY))
    metrics = SchedulerMetrics()
    if metrics_port is not None:
        metrics.serve(metrics_port)
    scheduler = KubeScheduler(api, scheduler_name=scheduler_name, executor=executor, metrics=metrics)
    name = identity or f"{socket.gethostname()}-{os.getpid()}"
    leader = LeaderElector(api, lease_namespace, LEASE_NAME, name)
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        logging.getLogger(__name__).info("signal %d: stopping after this cycle", signum)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    scheduler.run(stop, period=period, leader=leader)
