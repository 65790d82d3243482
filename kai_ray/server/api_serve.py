"""The gRPC API as `kai-ray serve` runs it: flags turned into a listening server, and the
embedded simulated cluster (`serve --sim DIR` / `--sim-nodes N`) a newcomer can talk to with no
Kubernetes at all.

Start-up problems (a taken port, an unreadable TLS or token file) are `ServeError`s with exit
status 2 and one line naming the flag, as for every other `serve` input.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from prometheus_client import CollectorRegistry

from kai_ray.gc_tuning import tune_gc_for_serving
from kai_ray.rpc.api import SchedulerService
from kai_ray.rpc.auth import AuthConfigError, TlsConfig, TokenTable, load_token_file
from kai_ray.rpc.backend import Grouper
from kai_ray.rpc.kube_backend import KubeBackend, SchedulerLike
from kai_ray.rpc.sim_backend import SimBackend
from kai_ray.rpc.transport import GrpcStartError, RunningServer, SchedulerServiceLike, start_grpc_server
from kai_ray.server.endpoints import Health
from kai_ray.server.logs import configure_logging
from kai_ray.server.process import EXIT_INPUT, EXIT_STOPPED, ServeError, open_endpoints, stop_on_signals
from kai_ray.server.threads import EXIT_WAIT_SECONDS, dump_stacks_on_sigusr1, leave_within

__all__ = ["GrpcOptions", "KubeApi", "open_grpc", "serve_simulated", "start_kube_api"]

log = logging.getLogger("kai_ray.serve")

#: Seconds a stopping server gives unary calls in flight (watch streams end at once).
STOP_GRACE = 5.0


@dataclass(frozen=True)
class GrpcOptions:
    """``--grpc-address`` and the security flags that go with it."""

    address: str
    tls_cert: Path | None = None
    tls_key: Path | None = None
    tls_client_ca: Path | None = None
    token_file: Path | None = None

    def tls(self) -> TlsConfig | None:
        """TLS when a certificate is given; a lone key or client CA is a mistake, said at once."""
        if self.tls_cert is None and self.tls_key is None:
            if self.tls_client_ca is not None:
                raise ServeError("--tls-client-ca needs --tls-cert and --tls-key", EXIT_INPUT)
            return None
        if self.tls_cert is None or self.tls_key is None:
            raise ServeError("--tls-cert and --tls-key go together", EXIT_INPUT)
        return TlsConfig(self.tls_cert, self.tls_key, self.tls_client_ca)


def open_grpc(service: SchedulerServiceLike, options: GrpcOptions) -> RunningServer:
    """The API listening on ``options.address`` (the server logs where, so port 0 can be found)."""
    tls = options.tls()
    try:
        tokens: TokenTable | None = (
            load_token_file(options.token_file) if options.token_file is not None else None
        )
        server = start_grpc_server(service, options.address, tls, tokens)
    except (AuthConfigError, GrpcStartError) as error:
        raise ServeError(f"--grpc-address {options.address}: {error}", EXIT_INPUT) from None
    return server


def serve_simulated(
    backend: SimBackend, what: str, grouper: Grouper | None, options: GrpcOptions, metrics_address: str
) -> int:
    """Run ``backend``'s scheduling loop and serve the API on it until SIGTERM/SIGINT (exit 0);
    ``what`` says in the log what the cluster was made from.

    The same loop as `simulate` (convert, schedule, apply), run continuously: pods "run" once
    bound.  /healthz, /readyz and /metrics answer as under Kubernetes; ready at once, since
    there is no cache to fill.
    """
    configure_logging()
    dump_stacks_on_sigusr1()
    try:
        service = SchedulerService(backend, grouper=grouper)
        health = Health()
        health.mark_ready()
        endpoints = open_endpoints(CollectorRegistry(), health, metrics_address)
        # One cycle before the first call, so queues, nodes and placements are there to answer.
        backend.run_cycle()
        tune_gc_for_serving()
        backend.start()
        try:
            server = open_grpc(service, options)
        except ServeError:
            backend.close()
            if endpoints is not None:
                endpoints.close()
            raise
    except ServeError as error:
        log.error("%s", error)
        return error.exit_code
    stop = stop_on_signals()
    log.info("kai-ray serving a simulated cluster: %s", what)
    try:
        stop.wait()
    finally:
        server.stop(STOP_GRACE)
        backend.close()
        if endpoints is not None:
            endpoints.close()
    leave_within(EXIT_WAIT_SECONDS, EXIT_STOPPED)
    return EXIT_STOPPED


@dataclass
class KubeApi:
    """The gRPC API of a running `kai-ray serve` on Kubernetes: stopped before the scheduler."""

    backend: KubeBackend
    server: RunningServer

    @property
    def port(self) -> int:
        """The gRPC port (the one picked when the address asked for port 0)."""
        return self.server.port

    def stop(self, grace: float | None = STOP_GRACE) -> None:
        self.server.stop(grace)
        self.backend.close()


def start_kube_api(scheduler: SchedulerLike, options: GrpcOptions, grouper: Grouper | None = None) -> KubeApi:
    """`kai-ray serve --grpc-address`: the Kubernetes backend over ``scheduler``, its service and
    the gRPC server, nothing left running on failure.

    ``grouper``: the operators' `prepare_manifests`, so submitted RayJobs and PyTorchJobs are
    grouped.  Call it before `scheduler.run` (which blocks): until the cache has listed the
    cluster the API answers UNAVAILABLE, so a half-listed cluster never refuses a good submit.
    """
    backend = KubeBackend(scheduler)
    try:
        server = open_grpc(SchedulerService(backend, grouper=grouper), options)
    except BaseException:
        backend.close()
        raise
    return KubeApi(backend, server)
