"""Fixtures for tests that need the real kube-apiserver test control plane.

One dev cluster (etcd + kube-apiserver + kwok) is started for the whole session because it
takes ~10-20 s on 2 cores; tests isolate themselves with a fresh namespace each.  Namespaces
never finish deleting (no kube-controller-manager), so teardown deletes the test's pods with
grace 0 and leaves the namespace Terminating, which is harmless.

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
from kube_serve import History, Serve
from kube_zone import Zone
from kubernetes import client

from kai_ray import devcluster
from kai_ray.devcluster import DevCluster

#: Fake GPU nodes created at start-up (managed by kwok); tests must not change them.
SESSION_NODES = 2
SESSION_GPUS_PER_NODE = 8


@pytest.fixture(scope="session")
def kube_bin_dir() -> Path:
    """Directory holding etcd / kube-apiserver / kwok, built once per machine."""
    return devcluster.build_bins()


@pytest.fixture(scope="session")
def kube_cluster(kube_bin_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevCluster]:
    """A dev cluster shared by the whole test run, stopped (no orphans) at the end."""
    cluster_dir = tmp_path_factory.mktemp("devcluster")
    cluster = devcluster.start(
        cluster_dir,
        nodes=SESSION_NODES,
        gpus_per_node=SESSION_GPUS_PER_NODE,
        bin_dir=kube_bin_dir,
        die_with_parent=True,  # a killed pytest must not leave etcd/apiserver running
        audit=True,  # which process wrote what: the leadership tests read it
    )
    try:
        yield cluster
    finally:
        devcluster.stop(cluster_dir)


@pytest.fixture(scope="session")
def kube_api(kube_cluster: DevCluster) -> Iterator[Any]:
    """A `kubernetes.client.ApiClient` for the session cluster."""
    api = kube_cluster.api_client()
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
        # No namespace controller runs: delete pods ourselves so they do not pile up in etcd.
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
