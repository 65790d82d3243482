"""kai-ray installed from its wheel, away from the checkout: the CLI, `simulate` and a dev cluster work.

Why: a user gets kai-ray by `pip install`, with no source tree around it. Everything the dev
cluster needs must then come from the installed package: its build scripts and pinned Go
modules (`kai_ray/devcluster/toolchain`, package data) and kai-ray's CRDs (generated from the
models in process). A test run from the checkout cannot see a file missing from the wheel,
because the editable install finds it in the source tree; this test can.

How: the wheel is built from a copy of the checkout (`pip wheel` builds in the source tree,
and setuptools' `build/` there could leak stale files into the wheel or race with another
run), installed into a venv outside the checkout, and its `kai-ray` is run from a temporary
directory with a minimal environment (no PYTHONPATH, the checkout's directories off PATH), so
nothing can be imported from the checkout. `devcluster up` must find the control-plane
binaries already built in the user cache (`make test` builds them first) through the
*installed* copy of `toolchain/build-bins.sh`: without that package data it fails.

The venv with kai-ray's dependencies is cached in `~/.cache/kai-ray/wheel-test-venv/KEY`, KEY
a hash of pyproject.toml and the interpreter: each run builds a fresh wheel and reinstalls only
it (`--force-reinstall --no-deps`); a changed pyproject.toml makes a new venv with fresh
dependencies (and removes the old one). A marker file written last says the dependencies are
complete, and a lock held for the whole test keeps concurrent runs from reinstalling the wheel
under each other. Cold, the dependency install (ray, polars, kubernetes, ...) takes a few
minutes; warm, the test takes about a minute.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kube_support import api_for_kubeconfig, processes_mentioning
from kubernetes import client

from kai_ray import devcluster
from kai_ray.api.crds import CRDS, crd_manifest

pytestmark = [pytest.mark.kube, pytest.mark.timeout(1200)]

REPO = Path(__file__).resolve().parents[2]
VENV_CACHE = Path.home() / ".cache" / "kai-ray" / "wheel-test-venv"
DEPS_MARKER = ".kai-ray-deps-installed"
#: Not copied into the wheel's build tree: virtualenvs, VCS data, caches and build leftovers.
BUILD_IGNORE = shutil.ignore_patterns(
    ".venv",
    ".git",
    "build",
    "dist",
    "*.egg-info",
    "__pycache__",
    ".mypy_cache",
    ".ruff_cache",
    ".pytest_cache",
    ".hypothesis",
    ".devcluster",
)
#: What the dev cluster needs from the package data (pyproject's [tool.setuptools.package-data]).
TOOLCHAIN_FILES = (
    "build-bins.sh",
    "build-operators.sh",
    "lib.sh",
    "apiserver/go.mod",
    "apiserver/go.sum",
    "etcd/go.mod",
    "etcd/go.sum",
)
#: Passed through to the installed kai-ray besides PATH and HOME: the build script's own knobs,
#: so the installed copy of the script looks where this machine's binaries were built.
TOOLCHAIN_ENV = ("K8S_BIN_CACHE", "K8S_VERSION", "ETCD_VERSION", "KWOK_VERSION", "TMPDIR")


@dataclass(frozen=True)
class Installed:
    venv: Path
    wheel: Path

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def kai_ray(self) -> Path:
        return self.venv / "bin" / "kai-ray"


def run(argv: Sequence[str | Path], timeout: float, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(arg) for arg in argv], capture_output=True, text=True, timeout=timeout, check=False, **kwargs
    )


def must(proc: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    command = " ".join(proc.args)
    assert proc.returncode == 0, (
        f"{command} exited {proc.returncode}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}"
    )
    return proc


def pip_env() -> dict[str, str]:
    """This process's environment (pip's proxy, certificate and cache settings) minus what could
    make pip install into, or import from, anything but the target venv."""
    drop = {"PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONUSERBASE"}
    return {key: value for key, value in os.environ.items() if key not in drop}


def user_env() -> dict[str, str]:
    """What a user's shell has, minus anything pointing into the checkout."""
    path = [
        entry
        for entry in os.environ.get("PATH", "").split(os.pathsep)
        if entry and not Path(entry).resolve().is_relative_to(REPO)
    ]
    env = {"PATH": os.pathsep.join(path), "HOME": str(Path.home()), "LANG": "C.UTF-8"}
    env.update({key: os.environ[key] for key in TOOLCHAIN_ENV if key in os.environ})
    return env


def has_build_requirements() -> bool:
    """Whether this environment has pyproject's build requirements (setuptools>=77, wheel)."""
    try:
        setuptools = importlib.metadata.version("setuptools")
        importlib.metadata.version("wheel")
    except importlib.metadata.PackageNotFoundError:
        return False
    return int(setuptools.split(".")[0]) >= 77


def build_wheel(out: Path) -> Path:
    src = out / "src"
    shutil.copytree(REPO, src, ignore=BUILD_IGNORE, symlinks=True)
    dist = out / "dist"
    # Without the build requirements here (a venv made by `python -m venv` has an older
    # setuptools and no wheel), pip gets them into an isolated build env: what `pip install .`
    # does for a user.
    isolation = ["--no-build-isolation"] if has_build_requirements() else []
    argv = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", *isolation, "-w", dist, src]
    must(run(argv, timeout=300, env=pip_env()))
    (wheel,) = dist.glob("kai_ray-*.whl")
    return wheel


def venv_key() -> str:
    digest = hashlib.sha256((REPO / "pyproject.toml").read_bytes())
    digest.update(sys.version.encode())
    digest.update(os.path.realpath(getattr(sys, "_base_executable", sys.executable)).encode())
    return digest.hexdigest()[:16]


def install(wheel: Path) -> Path:
    """The cached venv with ``wheel`` (re)installed in it; created with its dependencies if needed."""
    venv = VENV_CACHE / venv_key()
    python = venv / "bin" / "python"
    if (venv / DEPS_MARKER).is_file() and python.exists():
        must(
            run(
                [python, "-m", "pip", "install", "--quiet", "--force-reinstall", "--no-deps", wheel],
                timeout=300,
                env=pip_env(),
            )
        )
        return venv
    for stale in VENV_CACHE.iterdir():
        if stale.is_dir():  # an older pyproject.toml's venv, or a half-made one of this key
            shutil.rmtree(stale)
    must(run([sys.executable, "-m", "venv", venv], timeout=300, env=pip_env()))
    must(run([python, "-m", "pip", "install", "--quiet", wheel], timeout=1500, env=pip_env()))
    (venv / DEPS_MARKER).write_text(f"{wheel.name}\n")
    return venv


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    VENV_CACHE.mkdir(parents=True, exist_ok=True)
    wheel = build_wheel(tmp_path_factory.mktemp("wheel"))
    with (VENV_CACHE / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, after the tests
        yield Installed(install(wheel), wheel)


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """An empty working directory away from the checkout (``python -m`` would import from the cwd)."""
    assert not tmp_path.resolve().is_relative_to(REPO)
    return tmp_path


def test_the_wheel_carries_the_toolchain(installed: Installed, workdir: Path) -> None:
    names = set(zipfile.ZipFile(installed.wheel).namelist())
    missing = [name for name in TOOLCHAIN_FILES if f"kai_ray/devcluster/toolchain/{name}" not in names]
    assert missing == [], f"{installed.wheel.name} lacks toolchain files {missing}"

    probe = "import kai_ray, kai_ray.devcluster.binaries as b; print(kai_ray.__file__); print(b.TOOLCHAIN)"
    proc = must(run([installed.python, "-c", probe], timeout=120, cwd=workdir, env=user_env()))
    package, toolchain = (Path(line) for line in proc.stdout.split())
    # Imported from the venv, not from the checkout.
    assert package.is_relative_to(installed.venv) and not package.is_relative_to(REPO), package
    assert toolchain.is_relative_to(installed.venv), toolchain
    assert [name for name in TOOLCHAIN_FILES if not (toolchain / name).is_file()] == []


def test_help_and_simulate_run_from_the_installed_package(installed: Installed, workdir: Path) -> None:
    proc = must(run([installed.kai_ray, "--help"], timeout=120, cwd=workdir, env=user_env()))
    assert "simulate" in proc.stdout and "devcluster" in proc.stdout

    example = workdir / "raycluster"
    shutil.copytree(REPO / "examples" / "workloads" / "raycluster", example)
    proc = must(
        run(
            [installed.kai_ray, "simulate", example, "--output", "json"],
            timeout=300,
            cwd=workdir,
            env=user_env(),
        )
    )
    tasks: dict[str, Any] = json.loads(proc.stdout)["cycles"][-1]["end"]["tasks"]
    finetune = {
        key.rsplit("/", 1)[1]: task["status"]
        for key, task in tasks.items()
        if key.rsplit("/", 1)[1].startswith("llm-finetune-")
    }
    assert len(finetune) == 5 and set(finetune.values()) == {"Allocated"}, finetune


def test_devcluster_up_and_down_from_the_installed_package(installed: Installed, workdir: Path) -> None:
    env = user_env()
    # Where this machine's binaries are (a no-op when built): what the installed copy of the
    # script must find too.
    script = REPO / "kai_ray" / "devcluster" / "toolchain" / "build-bins.sh"
    built = Path(must(run(["bash", script], timeout=1200, env=env)).stdout.split()[-1])

    cluster_dir = workdir / "cluster"
    try:
        up = run(
            [installed.kai_ray, "devcluster", "up", "--dir", cluster_dir, "--nodes", "1"],
            timeout=300,
            cwd=workdir,
            env=env,
        )
        must(up)
        assert f"kubeconfig: {cluster_dir / 'kubeconfig'}" in up.stdout
        state = json.loads((cluster_dir / "state.json").read_text())
        assert Path(state["bin_dir"]) == built
        # kube-controller-manager too: the installed package data builds it as a checkout does.
        assert set(state["processes"]) == {"etcd", "kube-apiserver", "kube-controller-manager", "pod-runner"}
        assert f"controllers: {', '.join(devcluster.CONTROLLERS)}" in up.stdout
        assert len(processes_mentioning(str(cluster_dir))) >= 4

        api = api_for_kubeconfig(cluster_dir / "kubeconfig")
        try:
            ext: Any = client.ApiextensionsV1Api(api)
            served = {crd.metadata.name for crd in ext.list_custom_resource_definition().items}
            assert served == {spec.name for spec in CRDS}
            for spec in CRDS:
                raw = ext.read_custom_resource_definition(spec.name, _preload_content=False)
                crd = yaml.safe_load(raw.data)
                conditions = {c["type"]: c["status"] for c in crd["status"]["conditions"]}
                assert conditions.get("Established") == "True", spec.name
                (version,) = crd["spec"]["versions"]
                assert version["schema"] == crd_manifest(spec)["spec"]["versions"][0]["schema"], spec.name
            core: Any = client.CoreV1Api(api)
            node = core.read_node("gpu-node-0")
            assert {c.type: c.status for c in node.status.conditions}["Ready"] == "True"
        finally:
            api.close()

        down = must(
            run([installed.kai_ray, "devcluster", "down", "--dir", cluster_dir], timeout=120, env=env)
        )
        assert f"stopped {cluster_dir}" in down.stdout
        assert not (cluster_dir / "state.json").exists()
        assert processes_mentioning(str(cluster_dir)) == []
    finally:
        devcluster.stop(cluster_dir)  # a no-op after a successful `down`
