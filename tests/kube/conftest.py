"""Fixtures for tests that need the real kube-apiserver test control plane.

One dev cluster (etcd + kube-apiserver + kwok) is started for the whole session because it
takes ~10-20 s on 2 cores; tests isolate themselves with a fresh namespace each.  It runs no
kube-controller-manager: many tests here stand in for a workload's controller themselves
(`kube_zone.batch_job` makes a Job's pods, the Argo and MPI stand-ins), name owners that do not
exist, or watch objects that a garbage collector would delete under them (the PodGroup and
BindRequest of an evicted or recreated pod).  Namespaces never finish deleting there, so
teardown deletes the test's pods with grace 0 and leaves the namespace Terminating, which is
harmless.

Tests that need the controllers (Deployments and Jobs getting pods, garbage collection, PVs
binding) go in `tests/kube/controllers/`: its conftest points `kube_cluster` and `kube_api`,
and so every fixture here, at `kube_controllers_cluster`, a second session cluster that runs
kube-controller-manager with `devcluster.CONTROLLERS`, started only when such a test runs.

The binaries come from kai_ray/devcluster/toolchain/build-bins.sh (cached outside the repo).
`make test` builds them first (`make kube-bins`) so a cold ~10 minute build does not run inside
a test's timeout.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kube_proxy import FlakyProxy
from kube_serve import History, Serve
from kube_zone import Zone
from kubernetes import client

from kai_ray import devcluster
from kai_ray.devcluster import ControllerManager, DevCluster

#: Fake GPU nodes created at start-up (managed by kwok); tests must not change them.
SESSION_NODES = 2
SESSION_GPUS_PER_NODE = 8


@pytest.fixture(scope="session")
def kube_bin_dir() -> Path:
    """Directory holding etcd / kube-apiserver / kwok, built once per machine."""
    return devcluster.build_bins()


def session_cluster(
    bin_dir: Path, tmp_path_factory: pytest.TempPathFactory, name: str, controller_manager: ControllerManager
) -> Iterator[DevCluster]:
    """A dev cluster shared by the whole test run, stopped (no orphans) at the end."""
    cluster_dir = tmp_path_factory.mktemp(name)
    cluster = devcluster.start(
        cluster_dir,
        nodes=SESSION_NODES,
        gpus_per_node=SESSION_GPUS_PER_NODE,
        bin_dir=bin_dir,
        die_with_parent=True,  # a killed pytest must not leave etcd/apiserver running
        audit=True,  # which process wrote what: the leadership tests read it
        controller_manager=controller_manager,
    )
    try:
        yield cluster
    finally:
        devcluster.stop(cluster_dir)


@pytest.fixture(scope="session")
def kube_cluster(kube_bin_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevCluster]:
    """The session's dev cluster, without kube-controller-manager (see the module's docstring)."""
    yield from session_cluster(kube_bin_dir, tmp_path_factory, "devcluster", "off")


@pytest.fixture(scope="session")
def kube_controllers_cluster(
    kube_bin_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[DevCluster]:
    """The session's dev cluster with kube-controller-manager, for `tests/kube/controllers/`."""
    yield from session_cluster(kube_bin_dir, tmp_path_factory, "devcluster-controllers", "on")


@pytest.fixture(scope="session")
def kube_api(kube_cluster: DevCluster) -> Iterator[Any]:
    """A `kubernetes.client.ApiClient` for the session cluster."""
    yield from api_client(kube_cluster)


@pytest.fixture(scope="session")
def kube_controllers_api(kube_controllers_cluster: DevCluster) -> Iterator[Any]:
    """A `kubernetes.client.ApiClient` for the session cluster with controllers."""
    yield from api_client(kube_controllers_cluster)


def api_client(cluster: DevCluster) -> Iterator[Any]:
    """An ApiClient for `cluster`, closed when the fixture that yields from this ends."""
    api = cluster.api_client()
    try:
        yield api
    finally:
        api.close()


@pytest.fixture
def namespace(kube_api: Any) -> Iterator[str]:
    """A fresh, uniquely named namespace for one test."""
    core = client.CoreV1Api(kube_api)
    name = f"t-{uuid.uuid4().hex[:10]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    try:
        yield name
    finally:
        # Without a namespace controller (the session cluster), nothing else deletes the pods:
        # delete them here so they do not pile up in etcd.
        core.delete_collection_namespaced_pod(name, grace_period_seconds=0)
        core.delete_namespace(name)


@pytest.fixture
def serves(kube_cluster: DevCluster, tmp_path: Path) -> Iterator[Callable[..., Serve]]:
    """Starts `kai-ray serve` (or `command`) processes; every one still running at the end is SIGKILLed.

    `serves(identity, lease_namespace, *extra_args, kubeconfig=None, command="serve")`; the admin
    kubeconfig of the session cluster unless another is given.
    """
    started: list[Serve] = []

    def start(
        identity: str,
        lease_namespace: str,
        *extra: str,
        kubeconfig: Path | None = None,
        command: str = "serve",
    ) -> Serve:
        serve = Serve(
            kubeconfig or kube_cluster.kubeconfig, identity, lease_namespace, tmp_path, extra, command
        )
        started.append(serve)
        return serve

    try:
        yield start
    finally:
        for serve in started:
            serve.kill()


@pytest.fixture
def proxy(kube_cluster: DevCluster) -> Iterator[FlakyProxy]:
    """A relay in front of the session's API server that a test can cut off (`FlakyProxy`)."""
    relay = FlakyProxy(int(kube_cluster.server.rsplit(":", 1)[1]))
    try:
        yield relay
    finally:
        relay.close()


@pytest.fixture
def history(kube_cluster: DevCluster, namespace: str) -> Iterator[History]:
    """Every node each pod of the namespace was seen on and every BindRequest made, from now on."""
    recorder = History(kube_cluster, namespace)
    try:
        yield recorder
    finally:
        recorder.close()


@pytest.fixture
def zone(kube_api: Any, namespace: str) -> Iterator[Zone]:
    """Nodes, queues and pods of this test's own (see `kube_zone`), removed afterwards."""
    made = Zone(kube_api, namespace)
    try:
        yield made
    finally:
        made.close()
