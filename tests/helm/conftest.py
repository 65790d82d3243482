"""Fixtures of the chart tests: the helm binary (built once from its Go module), a runner for it, and
the chart rendered offline (``helm template``) as parsed objects."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml
from chart_support import HelmRunner, Renderer, template_args

from kai_ray.devcluster.helm import build_helm


@pytest.fixture(scope="session")
def helm_bin() -> Path:
    """The helm executable; `make test` builds it before pytest starts (`make kube-bins`)."""
    return build_helm() / "helm"


@pytest.fixture(scope="session")
def helm(helm_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> HelmRunner:
    """Run helm with its caches and config in a temporary home, failing the test on a non-zero exit
    unless ``check=False``; returns the completed process (text stdout/stderr)."""
    home = tmp_path_factory.mktemp("helm-home")
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(home),
        "HELM_CACHE_HOME": str(home / "cache"),
        "HELM_CONFIG_HOME": str(home / "config"),
        "HELM_DATA_HOME": str(home / "data"),
    }

    def run(
        *args: str | Path, kubeconfig: Path | None = None, check: bool = True, timeout: float = 300
    ) -> subprocess.CompletedProcess[str]:
        argv: Sequence[str] = [str(helm_bin), *(str(arg) for arg in args)]
        if kubeconfig is not None:
            argv = [*argv, "--kubeconfig", str(kubeconfig)]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env, check=False)
        if check:
            output = f"--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}"
            assert proc.returncode == 0, f"{' '.join(argv)} exited {proc.returncode}\n{output}"
        return proc

    return run


@pytest.fixture(scope="session")
def render(helm: HelmRunner) -> Renderer:
    """The chart rendered offline with these values (see ``template_args``): its objects, parsed, in
    helm's order. No cluster, so every ``lookup`` finds nothing and everything optional renders."""

    def run(*values: str | Path) -> list[dict[str, Any]]:
        text = helm(*template_args(*values)).stdout
        return [doc for doc in yaml.safe_load_all(text) if doc]

    return run
