"""The ``helm`` binary the chart tests and docs use, built once from its Go module like the control plane."""

from __future__ import annotations

from pathlib import Path

from kai_ray.devcluster.binaries import built_dir

__all__ = ["build_helm"]

HELM_BINARIES = ("helm",)


def build_helm(timeout: float = 3600.0) -> Path:
    """Build (first time only) or locate helm and return its directory.

    Separate from ``build_bins``: only the chart's tests need it.  ``KAI_RAY_HELM_BIN_DIR``
    points at a directory that already holds a helm binary, skipping the build.
    """
    return built_dir("build-helm.sh", "KAI_RAY_HELM_BIN_DIR", HELM_BINARIES, timeout)
