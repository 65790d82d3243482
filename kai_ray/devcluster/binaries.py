"""Where the dev cluster's binaries come from: built once from the packaged Go modules, cached outside."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

__all__ = [
    "CONTROLLER_MANAGER",
    "CONTROL_PLANE_BINARIES",
    "KUBECTL_BINARIES",
    "OPERATOR_BINARIES",
    "TOOLCHAIN",
    "DevClusterError",
    "build_bins",
    "build_kubectl",
    "build_operators",
    "built_dir",
    "repo_root",
    "require_binaries",
]

#: What ``toolchain/build-bins.sh`` must have produced for ``start`` (kwok is optional).
CONTROL_PLANE_BINARIES = ("etcd", "kube-apiserver")
#: Also built by ``toolchain/build-bins.sh``, from kube-apiserver's module.  Optional for ``start``
#: (``controller_manager="auto"`` runs it when present), so a ``KAI_RAY_K8S_BIN_DIR`` of older
#: binaries still works, without controllers.
CONTROLLER_MANAGER = "kube-controller-manager"
#: What else ``toolchain/build-bins.sh`` builds: a kubectl of the same version, for the test that
#: runs docs/install.md (not needed by ``start``, so a ``KAI_RAY_K8S_BIN_DIR`` without it is fine).
KUBECTL_BINARIES = ("kubectl",)
#: What ``toolchain/build-operators.sh`` produces: KubeRay's and Kubeflow's operators.
OPERATOR_BINARIES = ("ray-operator", "training-operator")


class DevClusterError(RuntimeError):
    """The dev control plane could not be built, started or reached."""


def repo_root() -> Path:
    """The kai-ray checkout this module lives in, for test-only helpers that need files beside it.

    Only meaningful when running from a checkout (``pip install -e``): an installed kai-ray has
    no checkout, and nothing it runs depends on this.  Its one user is ``upstream_crd_dir``
    (``../shared/crds``, used only by the tests).  Resolved from this file rather than the
    working directory so tests behave the same wherever they are launched from.
    """
    return Path(__file__).resolve().parents[2]


TOOLCHAIN = Path(__file__).resolve().parent / "toolchain"
"""The build scripts and the wrapper Go modules that pin what they build: package data, so an
installed kai-ray builds its dev cluster's binaries as a checkout does."""


def build_bins(timeout: float = 3600.0) -> Path:
    """Build (first time only) or locate the control plane's binaries and return their directory.

    That is etcd, kube-apiserver, kube-controller-manager, kubectl and kwok; only the first two
    are required of it.  ``KAI_RAY_K8S_BIN_DIR`` short-circuits the build for machines that
    already have binaries.
    """
    return built_dir("build-bins.sh", "KAI_RAY_K8S_BIN_DIR", CONTROL_PLANE_BINARIES, timeout)


def build_kubectl(timeout: float = 3600.0) -> Path:
    """Build (first time only) or locate kubectl and return its directory (the control plane's).

    kubectl is no dependency of kai-ray: the doc test runs docs/install.md's kubectl commands with
    it, since a fresh machine may have no kubectl, or one far from the API server's version.
    ``KAI_RAY_K8S_BIN_DIR`` must then hold a kubectl too.
    """
    return built_dir("build-bins.sh", "KAI_RAY_K8S_BIN_DIR", KUBECTL_BINARIES, timeout)


def build_operators(timeout: float = 3600.0) -> Path:
    """Build (first time only) or locate ray-operator/training-operator and return their directory.

    Separate from ``build_bins`` so a dev cluster that runs no operator never pays their cold
    build (minutes); ``KAI_RAY_OPERATOR_BIN_DIR`` short-circuits it like ``KAI_RAY_K8S_BIN_DIR``.
    """
    return built_dir("build-operators.sh", "KAI_RAY_OPERATOR_BIN_DIR", OPERATOR_BINARIES, timeout)


def built_dir(script_name: str, env_var: str, names: tuple[str, ...], timeout: float) -> Path:
    """Run ``toolchain/SCRIPT_NAME`` (a no-op once built) and return the bin dir it prints.

    The build scripts print the bin dir as their last stdout line; their progress goes to
    stderr, which is passed through so a cold build of several minutes is visibly alive.
    """
    env_dir = os.environ.get(env_var)
    if env_dir:
        path = Path(env_dir)
        require_binaries(path, names)
        return path
    script = TOOLCHAIN / script_name
    if not script.is_file():
        raise DevClusterError(f"{script} not found; set {env_var} to a directory with the binaries")
    proc = subprocess.run(
        ["bash", str(script)], stdout=subprocess.PIPE, stderr=None, text=True, timeout=timeout, check=False
    )
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    if proc.returncode != 0 or not lines:
        raise DevClusterError(f"{script} failed with exit code {proc.returncode}")
    path = Path(lines[-1].strip())
    require_binaries(path, names)
    return path


def require_binaries(bin_dir: Path, names: tuple[str, ...] = CONTROL_PLANE_BINARIES) -> None:
    for name in names:
        if not os.access(bin_dir / name, os.X_OK):
            raise DevClusterError(f"{bin_dir / name} is missing or not executable")
