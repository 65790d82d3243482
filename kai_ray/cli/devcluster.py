"""`kai-ray devcluster up|down`: the local kube-apiserver, etcd and kwok for trying kai-ray out."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kai_ray.cli.app import fail
from kai_ray.cli.help import KaiRayTyper
from kai_ray.devcluster.control_plane import ControllerManager

devcluster_app = KaiRayTyper(
    help="A real kube-apiserver + etcd on loopback, for trying kai-ray out and for tests."
)


@devcluster_app.command("up")
def devcluster_up(
    directory: Annotated[Path, typer.Option("--dir", help="Where the kubeconfig, logs and state go.")],
    nodes: Annotated[int, typer.Option("--nodes", min=0, help="Fake GPU nodes to create.")] = 0,
    gpus_per_node: Annotated[int, typer.Option("--gpus-per-node", min=0, help="GPUs on each fake node.")] = 8,
    bin_dir: Annotated[
        Path | None,
        typer.Option(
            "--bin-dir",
            help="Use the etcd and kube-apiserver (and kwok, if there) in DIR instead of building them.",
        ),
    ] = None,
    crd_dir: Annotated[
        Path | None,
        typer.Option(
            "--crd-dir", help="Install the CRDs in these YAML files instead of kai-ray's generated ones."
        ),
    ] = None,
    controller_manager: Annotated[
        ControllerManager,
        typer.Option(
            "--controller-manager",
            help="Run kube-controller-manager's Deployment, ReplicaSet, Job, garbage-collector, "
            "namespace and PV-binder controllers: auto (when its binary was built), on, off.",
        ),
    ] = "auto",
) -> None:
    """Start etcd, kube-apiserver, a pod runner and controllers; install CRDs and KAI's default objects."""
    from kai_ray import devcluster

    # Checked here too so the one-line error names the flag (start() checks both again).
    try:
        if bin_dir is not None:
            devcluster.require_binaries(bin_dir)
    except devcluster.DevClusterError as exc:
        fail([f"--bin-dir: {exc}"])
    try:
        if crd_dir is not None:
            devcluster.crd_documents(crd_dir)
    except devcluster.DevClusterError as exc:
        fail([f"--crd-dir: {exc}"])
    try:
        cluster = devcluster.start(
            directory,
            nodes=nodes,
            gpus_per_node=gpus_per_node,
            bin_dir=bin_dir,
            crd_dir=crd_dir,
            controller_manager=controller_manager,
        )
    except devcluster.DevClusterError as exc:
        fail([str(exc)])
    typer.echo(f"kubeconfig: {cluster.kubeconfig}")
    typer.echo(f"server: {cluster.server}")
    typer.echo(f"controllers: {', '.join(cluster.controllers) or 'none (no kube-controller-manager)'}")


@devcluster_app.command("down")
def devcluster_down(
    directory: Annotated[Path, typer.Option("--dir", help="The directory given to `up`.")],
) -> None:
    """Stop everything `devcluster up` started in that directory."""
    from kai_ray import devcluster

    devcluster.stop(directory)
    typer.echo(f"stopped {directory}")
