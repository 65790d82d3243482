"""What every long-running `kai-ray` process shares: exit codes, the one-line fatal error, the
metrics and health endpoints, and stopping on a signal.

`serve`, the API server process and the standalone podgrouper all end the same way and serve the
same endpoints; kept here so none of them imports another for it (`serve` and `api_serve` did,
both ways).
"""

from __future__ import annotations

import logging
import signal
import threading
from types import FrameType

from prometheus_client import CollectorRegistry

from kai_ray.server.endpoints import Endpoints, Health

__all__ = [
    "DEFAULT_METRICS_ADDRESS",
    "EXIT_CLUSTER",
    "EXIT_INPUT",
    "EXIT_STOPPED",
    "ServeError",
    "open_endpoints",
    "stop_on_signals",
]

log = logging.getLogger(__name__)

EXIT_STOPPED = 0
EXIT_CLUSTER = 1
"""The cluster refused (unreachable, credentials, permissions) or leadership was lost."""
EXIT_INPUT = 2
"""A kubeconfig, configuration file or flag is wrong."""
DEFAULT_METRICS_ADDRESS = "127.0.0.1:8080"


class ServeError(Exception):
    """A problem that ends `serve` before it schedules anything; `str()` is the one line to print."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def open_endpoints(registry: CollectorRegistry, health: Health, address: str) -> Endpoints | None:
    """/metrics, /healthz and /readyz on `address` (none when it is empty); a bad address is input."""
    if not address:
        return None
    endpoints = Endpoints(registry, health)
    try:
        host, port = endpoints.serve(address)
    except (ValueError, OSError) as error:
        raise ServeError(f"--metrics-address {address}: {error}", EXIT_INPUT) from None
    log.info("metrics on http://%s:%d/metrics (and /healthz, /readyz)", host, port)
    return endpoints


def stop_on_signals() -> threading.Event:
    """An event set by SIGTERM or SIGINT: the loop finishes its pass and gives up the lease."""
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        log.info("signal %d: finishing the cycle, giving up the lease", signum)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    return stop
