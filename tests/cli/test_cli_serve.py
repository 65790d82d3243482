"""`kai-ray serve` refuses bad input and unreachable clusters in one clear line (issue 8, item 6).

Run as the real command, because what matters is what an operator sees: the
exit status, and exactly one line on stderr, with no traceback.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from kai_ray.server.process import DEFAULT_METRICS_ADDRESS
from kai_ray.server.serve import ServeOptions

pytestmark = pytest.mark.unit

KAI_RAY = Path(sys.executable).parent / "kai-ray"


def serve(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
    return subprocess.run(
        [str(KAI_RAY), "serve", *args], capture_output=True, text=True, timeout=timeout, env=env, check=False
    )


def one_line(result: subprocess.CompletedProcess[str]) -> str:
    """The single message serve printed; fails if there was more, or a traceback."""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    entry = json.loads(lines[0])
    assert entry["level"] == "ERROR"
    return str(entry["message"])


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def kubeconfig(path: Path, server: str) -> Path:
    body = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": server, "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "c",
    }
    path.write_text(yaml.safe_dump(body))
    return path


def test_a_missing_kubeconfig(tmp_path: Path) -> None:
    result = serve("--kubeconfig", str(tmp_path / "nope"))
    assert result.returncode == 2
    assert one_line(result) == f"kubeconfig {tmp_path / 'nope'}: no such file"


def test_a_kubeconfig_that_is_not_one(tmp_path: Path) -> None:
    broken = tmp_path / "kubeconfig"
    broken.write_text("clusters: [oops\n")
    result = serve("--kubeconfig", str(broken))
    assert result.returncode == 2
    assert one_line(result).startswith(f"kubeconfig {broken}: ")


def test_no_kubeconfig_outside_a_cluster() -> None:
    result = serve()
    assert result.returncode == 2
    assert one_line(result).startswith("no --kubeconfig given and not running in a cluster")


def test_an_unreachable_api_server(tmp_path: Path) -> None:
    port = closed_port()
    result = serve("--kubeconfig", str(kubeconfig(tmp_path / "k", f"https://127.0.0.1:{port}")))
    assert result.returncode == 1
    message = one_line(result)
    assert message.startswith(f"cannot reach the API server at https://127.0.0.1:{port}: ")
    assert "refused" in message.lower()


def test_a_bad_scheduler_config_stops_serve_before_it_connects(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("actions: ''\n")
    result = serve(
        "--kubeconfig", str(kubeconfig(tmp_path / "k", "https://127.0.0.1:9")), "--config", str(config)
    )
    assert result.returncode == 2
    assert one_line(result).startswith(f"{config}: actions")


def test_metrics_listen_on_loopback_unless_told_otherwise() -> None:
    assert DEFAULT_METRICS_ADDRESS == "127.0.0.1:8080"
    assert ServeOptions(kubeconfig=None).metrics_address == DEFAULT_METRICS_ADDRESS


def test_lease_timings_that_do_not_nest_are_refused(tmp_path: Path) -> None:
    result = serve("--kubeconfig", str(tmp_path / "k"), "--renew-deadline", "20")
    assert result.returncode == 2
    assert "retry period < renew deadline < lease duration" in result.stderr
