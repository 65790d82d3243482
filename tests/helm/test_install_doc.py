"""docs/install.md, run word for word on a dev cluster (issue 10).

The page's rule, stated at its top: every ```bash block runs, in order, in one shell, from the
repository root; ```console blocks (image builds, steps that need a real cluster) do not.  The
test changes only what the page says it changes: `DEV` (a temporary directory), `PATH` (the
helm and kubectl built from their Go modules come first, so no hand-installed tool is used)
and `KAI_RAY_K8S_BIN_DIR` (the control plane binaries already built).

The blocks check themselves (`kubectl wait` fails when pods do not run, `set -e` stops at the
first failing command); the test adds what the output must show, so a block that printed
nothing useful does not pass.
"""

from __future__ import annotations

import os
import re
import subprocess
import textwrap
from pathlib import Path

import pytest

from kai_ray import devcluster
from kai_ray.devcluster.binaries import build_kubectl

ROOT = devcluster.repo_root()
DOC = ROOT / "docs" / "install.md"
#: A fenced block, possibly indented (inside a list item): its language and its body.
FENCE = re.compile(r"^(?P<indent> *)```(?P<lang>[\w-]*)\n(?P<body>.*?)^(?P=indent)```$", re.M | re.S)
#: The names the page uses.
NAMESPACE, RELEASE = "kai-ray-system", "kai-ray"


def blocks(text: str) -> list[tuple[str, str]]:
    """Every fenced block of the page, in order: (language, dedented body)."""
    return [(m["lang"], textwrap.dedent(m["body"])) for m in FENCE.finditer(text)]


def bash_blocks(text: str) -> list[str]:
    """The blocks the test runs."""
    return [body for lang, body in blocks(text) if lang == "bash"]


def script(text: str) -> str:
    """One bash script of the page's bash blocks: stop at the first failure, trace each command,
    and on any exit stop what the blocks left behind (their background jobs, the dev cluster)."""
    parts = [
        "set -euo pipefail",
        "set -x",
        "trap 'kill $(jobs -p) 2>/dev/null || true; "
        '.venv/bin/kai-ray devcluster down --dir "$DEV" >/dev/null 2>&1 || true\' EXIT',
    ]
    for index, body in enumerate(bash_blocks(text), 1):
        parts += [f"# --- docs/install.md, bash block {index}", body]
    return "\n".join(parts) + "\n"


def test_the_page_has_the_blocks_the_test_relies_on() -> None:
    """The rule (bash runs, console does not) only means something if the install, the
    verification and the uninstall are bash blocks, and no bash block hides in a list."""
    text = DOC.read_text()
    runnable = "\n".join(bash_blocks(text))
    for command in (
        ".venv/bin/kai-ray devcluster up",
        f"helm install {RELEASE} charts/kai-ray --namespace {NAMESPACE}",
        "kubectl -n team-a wait",
        f"helm uninstall {RELEASE} --namespace {NAMESPACE}",
        ".venv/bin/kai-ray devcluster down",
    ):
        assert command in runnable, f"no bash block runs {command!r}"
    assert {lang for lang, _ in blocks(text)} <= {"bash", "console", "text", "yaml"}
    assert "tests/helm/test_install_doc.py" in text, "the page must say that it is run, and how"
    # Every console block is a real-cluster or image step: none of them may be one the test
    # could run, or it would have to be a bash block.
    for lang, body in blocks(text):
        if lang == "console":
            assert body.startswith("$ "), body


def test_fence_parser_sees_indented_blocks() -> None:
    """A bash block inside a list item is still found (and run)."""
    text = "1. step\n\n   ```bash\n   echo hi\n   ```\n\n```console\n$ x\n```\n"
    assert blocks(text) == [("bash", "echo hi\n"), ("console", "$ x\n")]


@pytest.mark.kube
def test_install_doc_runs_word_for_word(helm_bin: Path, tmp_path: Path) -> None:
    """Run the page's bash blocks against a dev cluster they start themselves."""
    kubectl_dir = build_kubectl()
    dev = tmp_path / "dev"
    home = tmp_path / "home"
    home.mkdir()
    env = {
        "PATH": os.pathsep.join([str(helm_bin.parent), str(kubectl_dir), "/usr/bin", "/bin"]),
        # helm and kubectl keep caches and config under HOME: not the user's.
        "HOME": str(home),
        "DEV": str(dev),
        "KAI_RAY_K8S_BIN_DIR": str(devcluster.build_bins()),
        "LANG": "C.UTF-8",
    }
    path = tmp_path / "install-doc.sh"
    path.write_text(script(DOC.read_text()))
    log = tmp_path / "install-doc.log"
    try:
        with log.open("w") as out:
            proc = subprocess.run(
                ["bash", str(path)], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, timeout=540
            )
    finally:
        devcluster.stop(dev)  # a no-op when the page's last block did it
    output = log.read_text()
    tail = "\n".join(output.splitlines()[-60:])
    assert proc.returncode == 0, f"docs/install.md failed (exit {proc.returncode}):\n{tail}"

    # What the blocks printed: the install, the components' endpoints, the scheduled quickstart,
    # and after the uninstall the CRDs and queues that stay.
    assert f"NAME: {RELEASE}" in output and "STATUS: deployed" in output, tail
    for endpoint in ("healthz", "readyz"):
        assert f"http://127.0.0.1:18080/{endpoint} ok" in output, tail
    bound = re.findall(r"^kai_ray_pods_bound_total (\d+)(?:\.0)?$", output, re.M)
    assert bound and int(bound[-1]) >= 6, f"team-a's six pods bound, by the metrics: {bound}\n{tail}"
    assert re.search(r'"nvidia\.com/gpu":"18"', output), f"team-a's allocation (18 GPUs)\n{tail}"
    assert "--no-podgrouper" in output, "the scheduler Deployment's args were printed"
    assert f'release "{RELEASE}" uninstalled' in output, tail
    uninstalled = output.split(f'release "{RELEASE}" uninstalled', 1)[1]
    for kept in ("queues.scheduling.run.ai", "podgroups.scheduling.run.ai", "default-queue", "team-a"):
        assert kept in uninstalled, f"{kept} is gone after helm uninstall\n{tail}"
    # The local components ran as the chart's ServiceAccounts and stopped cleanly on SIGTERM.
    for name in ("serve.log", "podgrouper.log"):
        lines = (dev / name).read_text().splitlines()
        assert lines, name
        errors = [line for line in lines if '"level": "ERROR"' in line or "Traceback" in line]
        assert errors == [], f"{name}:\n" + "\n".join(errors)
