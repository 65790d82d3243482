"""A real Ray cluster of two node processes on this machine, for `--ray-address` tests.

Each node is its own `ray start --block` in its own session, so stopping it ends exactly the
processes it started (never `ray stop`: other Ray instances on the machine are not ours). The
cluster uses token authentication with a token of its own, handed to every process that joins it
through `RAY_AUTH_TOKEN_PATH`: a head started while `~/.ray/auth_token` exists turns token
authentication on, and a worker node or driver without the token is then refused
(`InvalidAuthToken`). Nothing is read from or written to the user's own Ray files.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kai_ray.devcluster.processes import Launcher, free_ports, terminate, wait_until, write_private

BIN = Path(sys.executable).parent
RAY = BIN / "ray"
KAI_RAY = BIN / "kai-ray"
LOOPBACK = "127.0.0.1"
START_TIMEOUT_SECONDS = 180.0
"""Two `ray start`s on a loaded 2-core machine take a while; a cold CI machine more."""
QUERY_TIMEOUT_SECONDS = 120.0
STOP_GRACE_SECONDS = 5.0
"""A worker node stops on SIGTERM in a second or two; the head's GCS server was seen to ignore it
for 25 s and more, and a test cluster has nothing to save, so it is then killed."""
OBJECT_STORE_BYTES = 100 * 1024 * 1024
"""Small: the tests move kilobytes, and the default (30% of RAM) is shared memory others need."""

_VIEW = """
import json, sys
import ray
from ray._private.state import state

ray.init(address=sys.argv[1], log_to_driver=False, logging_level="ERROR")
nodes = [node["NodeID"] for node in ray.nodes() if node["Alive"]]
actors = [
    {"class": actor["ActorClassName"], "job": actor["JobID"], "node": actor["Address"]["NodeID"]}
    for actor in state.actor_table(None).values()
]
print(json.dumps({"nodes": nodes, "actors": actors}))
"""
"""Run inside the cluster's environment: the alive nodes and every actor the cluster has seen
(the GCS actor table; Ray's public state API needs the dashboard, which these nodes do not run)."""


@dataclass
class ClusterView:
    nodes: list[str]
    """IDs of the alive nodes."""
    actors: list[dict[str, str]]
    """Every actor the cluster has seen, alive or not: its class, job (driver) and node IDs."""


@dataclass
class MultiNodeRay:
    """A started cluster: its address, and the environment a process needs to join it."""

    root: Path
    ray_temp: Path
    """Ray's own temp dirs: short (a unix socket path may not exceed 107 bytes, a pytest tmp dir
    leaves too little of that), moved under `root` with their logs once the nodes are stopped."""
    address: str
    env: dict[str, str]
    launcher: Launcher

    def run(self, args: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
        """A command joined to this cluster (by environment); fails the test with its output on error."""
        try:
            done = subprocess.run(
                args,
                env=self.env,
                capture_output=True,
                text=True,
                timeout=timeout,
                cwd=self.root,
                check=False,
            )
        except subprocess.TimeoutExpired as error:
            raise AssertionError(f"{args} did not finish in {timeout}s; stderr: {error.stderr!r}") from error
        assert done.returncode == 0, f"{args} exited {done.returncode}:\n{done.stderr[-4000:]}"
        return done

    def view(self) -> ClusterView:
        done = self.run([sys.executable, "-c", _VIEW, self.address], QUERY_TIMEOUT_SECONDS)
        document: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
        return ClusterView(nodes=document["nodes"], actors=document["actors"])

    def check_alive(self) -> None:
        for name in self.launcher.state["processes"]:
            self.launcher.check_alive(name)

    def stop(self) -> None:
        """Worker node first, then the head: SIGTERM each `ray start`'s process group, then SIGKILL."""
        for name in reversed(list(self.launcher.state["processes"])):
            info = self.launcher.state["processes"][name]
            terminate(int(info["pid"]), info["start_time"], STOP_GRACE_SECONDS)
        shutil.move(self.ray_temp, self.root / "ray")


def _environment(token_path: Path) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key not in ("RAY_ADDRESS", "RAY_AUTH_TOKEN")}
    env.update(
        RAY_AUTH_MODE="token",
        RAY_AUTH_TOKEN_PATH=str(token_path),
        RAY_USAGE_STATS_ENABLED="0",
        RAY_worker_niceness="0",  # as kai-ray's own local instance runs its parts (docs/sharding.md)
    )
    return env


def _node_argv(ray_temp: Path, name: str, ports: list[int], role: list[str]) -> list[str]:
    """`ray start` for one node; ports Ray would otherwise take at fixed defaults are chosen free."""
    client_port, agent_port = ports
    return [
        *(str(RAY), "start", "--block", "--node-ip-address", LOOPBACK, "--num-cpus", "1"),
        *("--temp-dir", str(ray_temp / name), "--object-store-memory", str(OBJECT_STORE_BYTES)),
        *("--dashboard-agent-listen-port", str(agent_port), "--ray-client-server-port", str(client_port)),
        "--disable-usage-stats",
        *role,
    ]


def _listening(port: int) -> bool | None:
    with contextlib.suppress(OSError), socket.create_connection((LOOPBACK, port), timeout=1.0):
        return True
    return None


def start_cluster(root: Path) -> MultiNodeRay:
    """A head and one worker node, returned once the cluster reports both alive."""
    token_path = root / "auth_token"
    write_private(token_path, secrets.token_hex(32))
    env = _environment(token_path)
    head_port, *ports = free_ports(5)
    launcher = Launcher(root, {"processes": {}}, die_with_parent=True)
    ray_temp = Path(tempfile.mkdtemp(prefix="kai-ray-"))
    cluster = MultiNodeRay(root, ray_temp, f"{LOOPBACK}:{head_port}", env, launcher)
    try:
        head = ["--head", "--port", str(head_port), "--include-dashboard", "false"]
        launcher.launch("head", _node_argv(ray_temp, "head", ports[:2], head), env)
        wait_until(
            "the Ray head's port", lambda: _listening(head_port), START_TIMEOUT_SECONDS, cluster.check_alive
        )
        launcher.launch(
            "worker", _node_argv(ray_temp, "worker", ports[2:], ["--address", cluster.address]), env
        )
        wait_until(
            "both Ray nodes alive",
            lambda: True if len(cluster.view().nodes) == 2 else None,
            START_TIMEOUT_SECONDS,
            check=cluster.check_alive,
        )
    except BaseException:
        cluster.stop()
        raise
    return cluster
