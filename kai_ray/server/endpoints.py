"""The HTTP port of `serve` and `podgrouper`: /metrics for Prometheus, /healthz and /readyz for the kubelet.

One small server per process, as controller-runtime gives KAI's components: liveness
says the process still answers (a wedged process stops answering and is restarted);
readiness says its informer cache has listed everything, so a replica that is still
syncing gets no traffic and a rolling update waits for it. A standby replica waiting
for the lease is ready: it must be, or a Deployment of two could never finish rolling.
"""

from __future__ import annotations

import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

__all__ = ["Endpoints", "Health", "parse_address"]


class Health:
    """What /readyz reports; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ready = False
        self._reason = "starting: the cache has not listed everything yet"

    def mark_ready(self) -> None:
        with self._lock:
            self._ready, self._reason = True, "ok"

    def mark_not_ready(self, reason: str) -> None:
        with self._lock:
            self._ready, self._reason = False, reason

    def state(self) -> tuple[bool, str]:
        with self._lock:
            return self._ready, self._reason


class Endpoints:
    """/metrics (the registry's samples), /healthz and /readyz (from `health`) on one port."""

    def __init__(self, registry: CollectorRegistry, health: Health) -> None:
        self.registry = registry
        self.health = health
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def serve(self, address: str) -> tuple[str, int]:
        """Listen on `address` ("host:port"; empty host = all interfaces, port 0 = any free one).

        Returns the bound (host, port), so a caller that asked for port 0 can tell scrapers
        where to look.  A malformed address raises ValueError naming the expected form, so a
        typo in a flag fails at start-up rather than as an obscure socket error.
        """
        host, port = parse_address(address)
        with self._lock:
            if self._server is not None:
                raise RuntimeError("already serving; close() first")
            server = ThreadingHTTPServer((host, port), _handler(self.registry, self.health))
            server.daemon_threads = True
            thread = threading.Thread(target=server.serve_forever, name="kai-endpoints", daemon=True)
            thread.start()
            self._server, self._thread = server, thread
        bound_host, bound_port = server.server_address[:2]
        return str(bound_host), int(bound_port)

    def close(self) -> None:
        """Stop serving and free the port (no-op when not serving)."""
        with self._lock:
            server, thread = self._server, self._thread
            self._server = self._thread = None
        if server is not None and thread is not None:
            server.shutdown()
            server.server_close()
            thread.join()


def _handler(registry: CollectorRegistry, health: Health) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                self._reply(HTTPStatus.OK, generate_latest(registry), CONTENT_TYPE_LATEST)
            elif path in ("/healthz", "/livez"):
                self._reply(HTTPStatus.OK, b"ok\n")
            elif path == "/readyz":
                ready, reason = health.state()
                status = HTTPStatus.OK if ready else HTTPStatus.SERVICE_UNAVAILABLE
                self._reply(status, f"{reason}\n".encode())
            else:
                self._reply(HTTPStatus.NOT_FOUND, b"not found: /metrics, /healthz, /readyz\n")

        def _reply(
            self, status: HTTPStatus, body: bytes, content_type: str = "text/plain; charset=utf-8"
        ) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            """Probes and scrapes every few seconds are not worth a log line each."""

    return Handler


def parse_address(address: str) -> tuple[str, int]:
    """("host", port) from "host:port", "[v6]:port" or ":port" (all interfaces, as Go listens)."""
    host, colon, port_text = address.rpartition(":")
    if not colon or not port_text.isdigit() or int(port_text) > 65535:
        raise ValueError(f"metrics address {address!r}: expected host:port, e.g. 0.0.0.0:8080 or :8080")
    host = host.removeprefix("[").removesuffix("]")
    return host or "0.0.0.0", int(port_text)
