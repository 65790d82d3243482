"""Credentials of the dev cluster: the service-account key, kubeconfigs for the admin and for tests.

Every file holding a secret is written private (mode 0600) from its creation, because the
cluster's directory is often under a shared /tmp and the admin token is cluster-admin.
"""

from __future__ import annotations

import functools
import shutil
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from kai_ray.devcluster.binaries import DevClusterError
from kai_ray.devcluster.processes import write_private
from kai_ray.devcluster.seeding import create_ignoring_conflict

if TYPE_CHECKING:
    from kai_ray.devcluster.control_plane import DevCluster

__all__ = ["generate_rsa_key", "service_account_kubeconfig", "write_kubeconfig"]


def generate_rsa_key(path: Path) -> None:
    """ServiceAccount signing key (one PEM file is both the public and the private key).

    openssl prints it and we write it, so the file is private from creation whatever
    openssl's own file-mode handling is.
    """
    openssl = shutil.which("openssl")
    if openssl is None:
        raise DevClusterError("openssl is needed to generate the service-account key")
    key = subprocess.run([openssl, "genrsa", "2048"], check=True, capture_output=True).stdout
    write_private(path, key)


def write_kubeconfig(path: Path, server: str, token: str, ca_file: Path, user: str = "admin") -> None:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "devcluster", "cluster": {"server": server, "certificate-authority": str(ca_file)}}
        ],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": "devcluster", "context": {"cluster": "devcluster", "user": user}}],
        "current-context": "devcluster",
    }
    write_private(path, yaml.safe_dump(config, sort_keys=False))


def service_account_kubeconfig(cluster: DevCluster, api: Any, namespace: str, name: str, path: Path) -> Path:
    """Create ServiceAccount ``namespace/name`` and write a kubeconfig (mode 0600) that acts as it.

    For tests of RBAC: the admin token is in ``system:masters`` and bypasses authorization, a
    ServiceAccount starts with no permissions beyond discovery.  The ServiceAccount is created
    explicitly because no controller-manager runs here; the token comes from the TokenRequest
    API (valid one hour, signed with ``sa.key``), as kubelets obtain them.  ``api`` is an
    admin ``ApiClient``; ``namespace`` must exist.  Returns ``path``.
    """
    from kubernetes import client

    core = client.CoreV1Api(api)
    account = client.V1ServiceAccount(metadata=client.V1ObjectMeta(name=name))
    create_ignoring_conflict(functools.partial(core.create_namespaced_service_account, namespace, account))
    # No audiences: the token is for the apiserver itself (its default audience, the issuer).
    request = client.AuthenticationV1TokenRequest(
        spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=3600)
    )
    status = core.create_namespaced_service_account_token(name, namespace, request).status
    if status is None or not status.token:
        raise DevClusterError(f"TokenRequest for ServiceAccount {namespace}/{name} returned no token")
    path = Path(path)
    write_kubeconfig(
        path, cluster.server, status.token, cluster.ca_file, user=f"system:serviceaccount:{namespace}:{name}"
    )
    return path
