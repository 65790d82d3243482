"""docs/grpc.md's promises, run: its Python client example against a real server, and the flags
and methods it names exist."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kai_ray.cli import app
from kai_ray.rpc.api import SchedulerService
from kai_ray.rpc.sim_backend import SimBackend
from kai_ray.rpc.transport import start_grpc_server
from kai_ray.v1 import scheduler_pb2 as pb

pytestmark = pytest.mark.grpc

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "grpc" / "client_example.py"
DOC = ROOT / "docs" / "grpc.md"


@pytest.fixture
def address() -> Iterator[str]:
    """`kai-ray serve --sim-nodes 4` as the doc starts it, in-process and on a free port."""
    backend = SimBackend.from_nodes(4, 8)
    backend.start()
    try:
        with start_grpc_server(SchedulerService(backend), "127.0.0.1:0") as server:
            yield f"127.0.0.1:{server.port}"
    finally:
        backend.close()


def test_the_client_example_runs_against_a_real_server(address: str) -> None:
    result = subprocess.run(
        [sys.executable, str(EXAMPLE), "--server", address],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "submitted ml/finetune: PENDING"
    # ADDED when a cycle bound it before the watch began, MODIFIED when it did after.
    assert "  MODIFIED: RUNNING" in lines or "  ADDED: RUNNING" in lines
    assert re.search(r"^ml/finetune runs on node-\d: 8 GPUs$", result.stdout, re.M)
    assert "ml/too-big: NoRoom: allocate: gang needs 5 more pods together, only 3 fit" in result.stdout
    assert "  gang: 5 must start together, 0 bound, 3 would fit now" in lines
    assert "  1 of 4 nodes: insufficient nvidia.com/gpu (the pod asks 8) [NodeResourcesFit]" in lines
    assert "  to free: nvidia.com/gpu 16" in lines
    assert "queue default-queue: fair share 32 GPUs, allocated 8, requested 48; 1 running, 1 pending" in lines
    assert lines[-1] == "again: ALREADY_EXISTS, field 'name': workload ml/finetune already exists"


def test_the_doc_names_only_flags_and_methods_that_exist() -> None:
    text = DOC.read_text()
    serve_help = CliRunner().invoke(app, ["serve", "--help"], env={"COLUMNS": "200"}).output
    for flag in ("--sim-nodes", "--sim", "--grpc-address", "--token-file"):
        assert flag in text and flag in serve_help, flag
    for flag in ("--tls-cert", "--tls-key", "--tls-client-ca"):
        assert flag in text and flag in serve_help, flag
    bench_help = CliRunner().invoke(app, ["bench", "--help"], env={"COLUMNS": "200"}).output
    assert "--grpc" in bench_help and "kai-ray bench --grpc" in text
    methods = set(pb.DESCRIPTOR.services_by_name["Scheduler"].methods_by_name)
    called = set(re.findall(r"kai_ray\.v1\.Scheduler/(\w+)", text))
    assert {"ListQueues", "SubmitWorkload", "GetWorkload", "Explain"} <= called <= methods
    assert "examples/grpc/client_example.py" in text
