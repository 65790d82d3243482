"""`kai-ray serve`: process-level wiring of the scheduling loop (signals, leader lease, metrics, logs)."""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import sys
import threading
from pathlib import Path
from types import FrameType

from kubernetes import client, config

from kai_ray.cluster.kube.leader import LeaderElector
from kai_ray.cluster.kube.scheduler import KubeScheduler
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


def api_client(kubeconfig: Path, pool_size: int = 32) -> client.ApiClient:
    configuration = client.Configuration()
    # The client library ships this loader without annotations.
    config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)  # type: ignore[no-untyped-call]
    configuration.connection_pool_maxsize = pool_size
    return client.ApiClient(configuration)


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
    api = api_client(kubeconfig)
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
