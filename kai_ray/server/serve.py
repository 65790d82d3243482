"""`kai-ray serve`: process-level wiring of the scheduling loop (signals, leader lease, metrics, logs).

Everything that can be wrong before the first cycle is said in one line and
ends the process with a status that tells what kind of problem it was (2: the
input, a kubeconfig or configuration file; 1: the cluster, unreachable or
refusing a permission); no traceback reaches the terminal for those.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from kai_ray import __version__
from kai_ray.api.config import SchedulerConfig
from kai_ray.api.scheduler_conf import SchedulerConfigError, load_scheduler_config
from kai_ray.cluster.kube.bind_mode import BindMode
from kai_ray.cluster.kube.fence import FencedApiClient
from kai_ray.cluster.kube.grouping import PodGrouper
from kai_ray.cluster.kube.leader import LeaderElector, LeaseTiming, lease_name
from kai_ray.cluster.kube.permissions import (
    API_PERMISSIONS,
    OWNER_READ_PERMISSIONS,
    PODGROUPER_PERMISSIONS,
    SCHEDULER_PERMISSIONS,
    USAGE_PERMISSIONS,
    Permission,
    missing_permissions,
)
from kai_ray.distributed.executor import Executor
from kai_ray.gc_tuning import tune_gc_for_serving
from kai_ray.server.endpoints import Endpoints, Health
from kai_ray.server.logs import configure_logging
from kai_ray.server.metrics import SchedulerMetrics
from kai_ray.server.process import (
    DEFAULT_METRICS_ADDRESS,
    EXIT_CLUSTER,
    EXIT_INPUT,
    EXIT_STOPPED,
    ServeError,
    open_endpoints,
    stop_on_signals,
)
from kai_ray.server.scheduler import (
    DEFAULT_CONCURRENCY,
    DEFAULT_IDLE_PERIOD_SECONDS,
    CyclePacing,
    KubeScheduler,
    RunOutcome,
)
from kai_ray.server.threads import EXIT_WAIT_SECONDS, dump_stacks_on_sigusr1, leave_within

if TYPE_CHECKING:
    from kai_ray.rpc.backend import Grouper
    from kai_ray.server.api_serve import GrpcOptions, KubeApi

log = logging.getLogger(__name__)

TOKEN_REFRESH_SECONDS = 10.0
"""How often the kubeconfig loader may re-check its token (it refreshes 5 minutes before expiry)."""


GrouperFactory = Callable[[Any], PodGrouper]
"""Builds a podgrouper over the fenced API client: the CLI passes the operators' controller, so
this package never imports `kai_ray_operators`."""


@dataclass(frozen=True)
class ServeOptions:
    kubeconfig: Path | None
    """None: the in-cluster service account (the scheduler runs as a pod)."""
    scheduler_name: str = "kai-scheduler"
    period: float = 1.0
    idle_period: float = DEFAULT_IDLE_PERIOD_SECONDS
    """Longest wait after a cycle that found the cluster settled, unless something changes."""
    metrics_address: str = DEFAULT_METRICS_ADDRESS
    """``host:port`` for /metrics; empty disables it; port 0 picks a free one (logged)."""
    lease_namespace: str = "default"
    identity: str | None = None
    config_file: Path | None = None
    bind_backoff_limit: int = 3
    bind_mode: BindMode = BindMode.BIND_REQUEST
    lease_timing: LeaseTiming = field(default_factory=LeaseTiming)
    grouper: GrouperFactory | None = None
    """The in-process podgrouper; None (`--no-podgrouper`) when another process groups pods."""
    api: GrpcOptions | None = None
    """The gRPC API (`--grpc-address` and its TLS/token flags); None: not served."""
    api_grouper: Grouper | None = None
    """How the API groups submitted workload manifests (the operators' podgrouper)."""


def pool_size_for(concurrency: int) -> int:
    """Connections for a scheduler with `concurrency` workers per step, plus the Event writer,
    the leader lease and the odd straggler: beyond the pool, every request pays a TLS handshake."""
    return concurrency + 8


def load_configuration(kubeconfig: Path | None) -> client.Configuration:
    """The client configuration from a kubeconfig file, or in-cluster when there is none."""
    configuration = client.Configuration()
    if kubeconfig is None:
        try:
            config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        except config.ConfigException as error:
            raise ServeError(
                f"no --kubeconfig given and not running in a cluster ({error})", EXIT_INPUT
            ) from None
        return configuration
    if not kubeconfig.is_file():
        raise ServeError(f"kubeconfig {kubeconfig}: no such file", EXIT_INPUT)
    try:
        # The client library ships this loader without annotations.
        config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)  # type: ignore[no-untyped-call]
    except (config.ConfigException, yaml.YAMLError, OSError, ValueError, TypeError, KeyError) as error:
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ServeError(f"kubeconfig {kubeconfig}: {reason}", EXIT_INPUT) from None
    hook = configuration.refresh_api_key_hook
    if hook is not None:
        configuration.refresh_api_key_hook = _throttled(hook, TOKEN_REFRESH_SECONDS)
    return configuration


def check_cluster(
    api: Any,
    lease_namespace: str,
    permissions: Sequence[Permission],
    optional: Sequence[Permission] = (),
    optional_in_lease_namespace: Sequence[Permission] = (),
) -> None:
    """Reachable, credentials accepted, every one of `permissions` granted; else one `ServeError` line.

    Missing `optional` permissions (cluster-wide) and `optional_in_lease_namespace` ones are one
    warning line each: what they cost is said, and the process goes on (the podgrouper without an
    owner kind groups its pods on their own; recorded usage without ConfigMaps stays in memory).
    """
    host = api.configuration.host
    try:
        client.VersionApi(api).get_code(_request_timeout=(5.0, 5.0))
        missing = missing_permissions(api, permissions, lease_namespace)
        unreadable = missing_permissions(api, optional)
        unkept = missing_permissions(api, (), lease_namespace, optional_in_lease_namespace)
    except ApiException as error:
        if error.status in (401, 403):
            raise ServeError(
                f"the API server at {host} refused our credentials ({error.status} {error.reason})",
                EXIT_CLUSTER,
            ) from None
        raise ServeError(
            f"the API server at {host} answered {error.status} {error.reason}", EXIT_CLUSTER
        ) from None
    except Exception as error:  # connection refused, TLS, timeout: urllib3 wraps them variously
        raise ServeError(
            f"cannot reach the API server at {host}: {_root_cause(error)}", EXIT_CLUSTER
        ) from None
    if missing:
        listed = ", ".join(str(p) for p in missing)
        raise ServeError(
            f'missing permissions: {listed} (docs/kubernetes.md, "Permissions", lists them; '
            "examples/rbac/ has manifests that grant them)",
            EXIT_CLUSTER,
        )
    if unreadable:
        kinds = sorted(
            {str(Permission(p.group, p.resource, "read")).removeprefix("read ") for p in unreadable}
        )
        log.warning(
            "the podgrouper cannot read %s: a pod owned by one is grouped by the owner below it, or alone",
            ", ".join(kinds),
        )
    if unkept:
        log.warning(
            "recorded queue usage cannot be kept in namespace %s (missing %s): a restart forgets it",
            lease_namespace,
            ", ".join(str(p) for p in unkept),
        )


def serve_forever(options: ServeOptions, executor: Executor | None) -> int:
    """Schedule until SIGTERM/SIGINT (exit 0) or lost leadership (exit 1); start-up problems exit early."""
    configure_logging()
    dump_stacks_on_sigusr1()
    try:
        code = _serve(options, executor)
    except ServeError as error:
        log.error("%s", error)
        return error.exit_code
    leave_within(EXIT_WAIT_SECONDS, code)
    return code


@dataclass
class Connection:
    """A checked connection: the lease's client, and the client fenced by that lease."""

    elector: LeaderElector
    api: FencedApiClient
    identity: str


def connect(
    kubeconfig: Path | None,
    lease_namespace: str,
    lease: str,
    identity: str | None,
    timing: LeaseTiming,
    permissions: Sequence[Permission],
    optional: Sequence[Permission] = (),
    optional_in_lease_namespace: Sequence[Permission] = (),
) -> Connection:
    """Load the kubeconfig, check the cluster and `permissions` (`ServeError` if not), build the elector."""
    configuration = load_configuration(kubeconfig)
    configuration.connection_pool_maxsize = pool_size_for(DEFAULT_CONCURRENCY)
    identity = identity or f"{socket.gethostname()}-{os.getpid()}"
    # Not fenced (the lease and the start-up checks come before leadership), but timed out.
    election_api = FencedApiClient(configuration)
    election_api.user_agent = f"kai-ray/{__version__} ({identity})"
    check_cluster(election_api, lease_namespace, permissions, optional, optional_in_lease_namespace)
    elector = LeaderElector(election_api, lease_namespace, lease, identity, timing)
    api = FencedApiClient(configuration, elector.leadership)
    api.user_agent = election_api.user_agent
    return Connection(elector, api, identity)


def _serve(options: ServeOptions, executor: Executor | None) -> int:
    scheduler_config = _scheduler_config(options.config_file)
    grouping = options.grouper is not None
    connection = connect(
        options.kubeconfig,
        options.lease_namespace,
        lease_name(options.scheduler_name),
        options.identity,
        options.lease_timing,
        tuple(
            dict.fromkeys(
                (
                    *SCHEDULER_PERMISSIONS,
                    *(PODGROUPER_PERMISSIONS if grouping else ()),
                    *(API_PERMISSIONS if options.api is not None else ()),
                )
            )
        ),
        OWNER_READ_PERMISSIONS if grouping else (),
        USAGE_PERMISSIONS if _records_usage(scheduler_config) else (),
    )
    metrics = SchedulerMetrics()
    health = Health()
    endpoints = open_endpoints(metrics.registry, health, options.metrics_address)
    scheduler = KubeScheduler(
        connection.api,
        config=scheduler_config,
        scheduler_name=options.scheduler_name,
        executor=executor,
        metrics=metrics,
        bind_backoff_limit=options.bind_backoff_limit,
        bind_mode=options.bind_mode,
        grouper=options.grouper(connection.api) if options.grouper is not None else None,
        health=health,
        usage_namespace=options.lease_namespace,
    )
    api = _start_api(scheduler, options, endpoints)
    tune_gc_for_serving()
    stop = stop_on_signals()
    log.info(
        "kai-ray %s serving as %s (scheduler %s, podgrouper %s)",
        __version__,
        connection.identity,
        options.scheduler_name,
        "in-process" if grouping else "off",
    )
    try:
        pacing = CyclePacing(period=options.period, idle_period=options.idle_period)
        outcome = scheduler.run(stop, elector=connection.elector, pacing=pacing)
    finally:
        if api is not None:
            api.stop()
        if endpoints is not None:
            endpoints.close()
    if outcome is RunOutcome.LOST_LEADERSHIP:
        log.error("exiting: leadership was lost; another replica schedules now")
        return EXIT_CLUSTER
    return EXIT_STOPPED


def _start_api(
    scheduler: KubeScheduler, options: ServeOptions, endpoints: Endpoints | None
) -> KubeApi | None:
    """The gRPC API over the scheduler's cache, before the loop starts (it answers UNAVAILABLE until
    the cache has listed the cluster); a start-up failure closes what was opened and exits 2."""
    if options.api is None:
        return None
    from kai_ray.server.api_serve import start_kube_api

    try:
        return start_kube_api(scheduler, options.api, options.api_grouper)
    except ServeError:
        if endpoints is not None:
            endpoints.close()
        raise


def _records_usage(config: SchedulerConfig) -> bool:
    """Time-based fair share with usage recorded by serve itself (kept in a ConfigMap)."""
    return config.usage_db is not None and config.usage_db.client_type == "embedded"


def _scheduler_config(path: Path | None) -> SchedulerConfig:
    if path is None:
        return SchedulerConfig()
    try:
        loaded, warnings = load_scheduler_config(path)
    except SchedulerConfigError as error:
        raise ServeError(str(error), EXIT_INPUT) from None
    for warning in warnings:
        log.warning("%s", warning)
    return loaded


def _root_cause(error: BaseException) -> str:
    """The innermost reason of a connection failure ("Connection refused"), not urllib3's wrapping."""
    seen = error
    while True:
        inner = getattr(seen, "reason", None) or seen.__cause__ or seen.__context__
        if not isinstance(inner, BaseException) or inner is seen:
            break
        seen = inner
    text = str(seen)
    return text.rsplit(": ", 1)[-1] if ": " in text else text or type(seen).__name__


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
