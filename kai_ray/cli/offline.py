"""`--manifests DIR`: the API commands answered by the embedded simulated cluster, in this process."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from kai_ray.cli.app import error_exit

__all__ = ["OfflineClient", "offline", "offline_client"]
from kai_ray.rpc.client import LocalClient, SchedulerClient
from kai_ray.v1 import scheduler_pb2 as pb


class OfflineClient(LocalClient):
    """The simulated cluster of `--manifests DIR`, in this process, answering as a server would.

    A submit is followed by one cycle before its answer, since no scheduling loop runs here: the
    workload comes back as the scheduler would leave it (bound, or pending with its reason)
    rather than merely accepted."""

    def __init__(self, service: Any, backend: Any) -> None:
        super().__init__(service)
        self.backend = backend

    def submit_workload(self, request: pb.SubmitWorkloadRequest) -> pb.SubmitWorkloadResponse:
        response = super().submit_workload(request)
        self.backend.run_cycle()
        response.workload.CopyFrom(self.get_workload(pb.GetWorkloadRequest(id=response.id)))
        return response

    def close(self) -> None:
        self.backend.close()


def offline_client(directory: Path) -> OfflineClient:
    """A client of the simulated cluster built from the manifests in ``directory``, after one cycle.

    Workloads (RayJob, PyTorchJob, Job...) are grouped by the operators' podgrouper, as `simulate`
    and `serve --sim` do.  Broken manifests raise `SimSourceError` with every problem."""
    from kai_ray_operators.manifests import prepare_manifests

    from kai_ray.rpc.api import SchedulerService
    from kai_ray.rpc.sim_backend import SimBackend

    backend = SimBackend.from_directory(directory, grouper=prepare_manifests)
    # The service first: it follows the backend's cycles from the one below on.
    service = SchedulerService(backend, grouper=prepare_manifests)
    backend.run_cycle()
    return OfflineClient(service, backend)


def offline(directory: Path) -> SchedulerClient:
    """`offline_client`, with bad manifests reported as `simulate` reports them (exit 2)."""
    from kai_ray.api.manifests import read_manifest_documents
    from kai_ray.rpc.sim_backend import SimSourceError

    if not directory.is_dir():
        error_exit(f"--manifests: {directory} is not a directory")
    documents, problems = read_manifest_documents(directory)
    if not documents and not problems:
        error_exit(f"--manifests: {directory}: no Kubernetes manifests in it (*.yaml, *.yml, *.json)")
    try:
        return offline_client(directory)
    except SimSourceError as exc:
        for problem in exc.problems:
            typer.echo(f"error: {problem}", err=True)
        raise typer.Exit(code=2) from None
