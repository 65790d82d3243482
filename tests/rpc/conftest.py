"""Fixtures of the transport tests: a `FakeService` behind kai-ray's gRPC server, and a channel to it.

A test module that needs another server (tokens, TLS) defines its own ``server``."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import pytest
from fake_scheduler import FakeService

from kai_ray.rpc.transport import RunningServer, start_grpc_server
from kai_ray.v1 import scheduler_pb2 as pb


@pytest.fixture
def service() -> FakeService:
    fake = FakeService()
    fake.add("watch", "hello", "team-a", pb.RUNNING)  # so that every watch starts with an event
    return fake


@pytest.fixture
def server(service: FakeService) -> Iterator[RunningServer]:
    with start_grpc_server(service, "127.0.0.1:0") as running:
        yield running


@pytest.fixture
def channel(server: RunningServer) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(f"127.0.0.1:{server.port}") as opened:
        yield opened
