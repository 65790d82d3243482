"""`kai-ray serve` (on a cluster, or `--sim`) and `kai-ray podgrouper`: the long-running processes."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from kai_ray.api.constants import NODE_POOL_LABEL, QUEUE_LABEL
from kai_ray.cli.app import fail
from kai_ray.cli.options import (
    BindModeOption,
    DefaultsConfigMapOption,
    ExecutorName,
    ExecutorOption,
    IdentityOption,
    KubeconfigOption,
    LeaseDurationOption,
    LeaseNamespaceOption,
    MetricsAddressOption,
    NodePoolLabelOption,
    QueueLabelOption,
    RayAddressOption,
    RenewDeadlineOption,
    RetryPeriodOption,
    SchedulerNameOption,
    ShardsOption,
    executor_for,
    grouper_factory,
    lease_timing,
)
from kai_ray.cluster.kube.bind_mode import BindMode

if TYPE_CHECKING:
    from kai_ray.server.api_serve import GrpcOptions


def serve(
    kubeconfig: KubeconfigOption = None,
    scheduler_name: SchedulerNameOption = "kai-scheduler",
    config_file: Annotated[
        Path | None,
        typer.Option("--config", help="KAI's scheduler configuration (config.yaml or its ConfigMap)."),
    ] = None,
    executor: ExecutorOption = ExecutorName.LOCAL,
    shards: ShardsOption = 2,
    ray_address: RayAddressOption = None,
    period: Annotated[
        float,
        typer.Option("--period", min=0.05, help="Longest wait between cycles while work may be due."),
    ] = 1.0,
    idle_period: Annotated[
        float,
        typer.Option(
            "--idle-period",
            min=0.05,
            help="Longest wait after a cycle that found nothing to do, unless the cluster changes.",
        ),
    ] = 10.0,
    metrics_address: MetricsAddressOption = "127.0.0.1:8080",
    lease_namespace: LeaseNamespaceOption = "default",
    identity: IdentityOption = None,
    bind_backoff_limit: Annotated[
        int, typer.Option("--bind-backoff-limit", min=0, help="Binding attempts per BindRequest.")
    ] = 3,
    bind_mode: BindModeOption = BindMode.BIND_REQUEST,
    lease_duration: LeaseDurationOption = 15.0,
    renew_deadline: RenewDeadlineOption = 10.0,
    retry_period: RetryPeriodOption = 2.0,
    no_podgrouper: Annotated[
        bool,
        typer.Option(
            "--no-podgrouper", help="Do not group pods (another process does: `kai-ray podgrouper`, KAI's)."
        ),
    ] = False,
    queue_label_key: QueueLabelOption = QUEUE_LABEL,
    nodepool_label_key: NodePoolLabelOption = NODE_POOL_LABEL,
    default_priorities_configmap: DefaultsConfigMapOption = None,
    grpc_address: Annotated[
        str | None,
        typer.Option(
            "--grpc-address",
            metavar="HOST:PORT",
            help="Serve the gRPC API (docs/grpc.md) here; port 0 picks a free one. "
            "Default: off, or 127.0.0.1:50051 with --sim/--sim-nodes.",
        ),
    ] = None,
    tls_cert: Annotated[
        Path | None, typer.Option("--tls-cert", help="PEM certificate of the gRPC server (with --tls-key).")
    ] = None,
    tls_key: Annotated[Path | None, typer.Option("--tls-key", help="PEM private key of --tls-cert.")] = None,
    tls_client_ca: Annotated[
        Path | None,
        typer.Option("--tls-client-ca", help="Require gRPC clients' certificates signed by this CA (mTLS)."),
    ] = None,
    token_file: Annotated[
        Path | None,
        typer.Option(
            "--token-file",
            help="Bearer tokens of the gRPC API, one 'TOKEN NAMESPACES' per line (NAMESPACES: a,b or *).",
        ),
    ] = None,
    sim: Annotated[
        Path | None,
        typer.Option(
            "--sim",
            metavar="PATH",
            help="No Kubernetes: schedule a simulated cluster made from the manifests in PATH (a file "
            "or a directory, as `simulate` reads).",
        ),
    ] = None,
    sim_nodes: Annotated[
        int | None,
        typer.Option(
            "--sim-nodes",
            min=1,
            help="No Kubernetes: a simulated cluster of N nodes x 8 GPUs with KAI's default queues.",
        ),
    ] = None,
) -> None:
    """Schedule a Kubernetes cluster as KAI Scheduler does, until SIGTERM.

    Pods of this scheduler get their PodGroups from the podgrouper running in the
    same process (one per workload, as KAI's podgrouper makes them) unless
    `--no-podgrouper` is given. With `--sim DIR` or `--sim-nodes N` it schedules an
    embedded simulated cluster instead and serves the gRPC API on it.
    """
    from kai_ray_operators.manifests import prepare_manifests

    from kai_ray.server.api_serve import GrpcOptions
    from kai_ray.server.serve import ServeOptions, serve_forever

    def grpc_options(default_address: str | None) -> GrpcOptions | None:
        address = grpc_address if grpc_address is not None else default_address
        if not address:
            return None
        return GrpcOptions(address, tls_cert, tls_key, tls_client_ca, token_file)

    if sim is not None or sim_nodes is not None:
        api = grpc_options(DEFAULT_SIM_GRPC_ADDRESS)
        assert api is not None  # a default address is given
        raise typer.Exit(code=_serve_simulated(sim, sim_nodes, api, metrics_address))

    options = ServeOptions(
        kubeconfig=kubeconfig,
        scheduler_name=scheduler_name,
        period=period,
        idle_period=idle_period,
        metrics_address=metrics_address,
        lease_namespace=lease_namespace,
        identity=identity,
        config_file=config_file,
        bind_backoff_limit=bind_backoff_limit,
        bind_mode=bind_mode,
        lease_timing=lease_timing(lease_duration, renew_deadline, retry_period),
        grouper=None
        if no_podgrouper
        else grouper_factory(queue_label_key, nodepool_label_key, default_priorities_configmap),
        api=grpc_options(None),
        api_grouper=prepare_manifests,
    )
    raise typer.Exit(
        code=serve_forever(options, executor_for(executor, shards, ray_address, nodepool_label_key))
    )


DEFAULT_SIM_GRPC_ADDRESS = "127.0.0.1:50051"


def _serve_simulated(
    sim: Path | None, sim_nodes: int | None, options: GrpcOptions, metrics_address: str
) -> int:
    """`serve --sim DIR` / `--sim-nodes N`: the simulated backend, with the operators' podgrouper
    so a RayJob or PyTorchJob in DIR, or submitted as manifests, is grouped as on a cluster."""
    from kai_ray_operators.manifests import prepare_manifests

    from kai_ray.rpc.sim_backend import SimBackend, SimSourceError
    from kai_ray.server.api_serve import serve_simulated

    if sim is not None and sim_nodes is not None:
        fail(["give --sim or --sim-nodes, not both"])
    if sim is not None:
        if not sim.exists():
            fail([f"--sim: {sim} does not exist"])
        try:
            backend = SimBackend.from_directory(sim, grouper=prepare_manifests)
        except SimSourceError as exc:
            fail([str(problem) for problem in exc.problems])
        what = f"the manifests in {sim}"
    else:
        assert sim_nodes is not None
        backend = SimBackend.from_nodes(sim_nodes)
        what = f"{sim_nodes} nodes x 8 GPUs"
    return serve_simulated(backend, what, prepare_manifests, options, metrics_address)


def podgrouper(
    kubeconfig: KubeconfigOption = None,
    scheduler_name: SchedulerNameOption = "kai-scheduler",
    period: Annotated[
        float, typer.Option("--period", min=0.05, help="Seconds between passes when nothing changes.")
    ] = 1.0,
    metrics_address: MetricsAddressOption = "127.0.0.1:8081",
    lease_namespace: LeaseNamespaceOption = "default",
    identity: IdentityOption = None,
    lease_duration: LeaseDurationOption = 15.0,
    renew_deadline: RenewDeadlineOption = 10.0,
    retry_period: RetryPeriodOption = 2.0,
    queue_label_key: QueueLabelOption = QUEUE_LABEL,
    nodepool_label_key: NodePoolLabelOption = NODE_POOL_LABEL,
    default_priorities_configmap: DefaultsConfigMapOption = None,
) -> None:
    """Give pods their PodGroups as KAI's podgrouper does, alone, until SIGTERM.

    For `serve --no-podgrouper` or KAI's own scheduler; it has its own leader lease."""
    from kai_ray.server.podgrouper import PodGrouperOptions, run_podgrouper

    options = PodGrouperOptions(
        kubeconfig=kubeconfig,
        scheduler_name=scheduler_name,
        period=period,
        lease_namespace=lease_namespace,
        identity=identity,
        lease_timing=lease_timing(lease_duration, renew_deadline, retry_period),
        metrics_address=metrics_address,
    )
    factory = grouper_factory(queue_label_key, nodepool_label_key, default_priorities_configmap)
    raise typer.Exit(code=run_podgrouper(options, factory))
