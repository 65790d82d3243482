"""A service over a small simulated cluster, driven by hand: cycles run only when a test says."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from service_builders import NOW, cluster

from kai_ray.rpc.api import SchedulerService
from kai_ray.rpc.sim_backend import SimBackend


@pytest.fixture
def backend() -> Iterator[SimBackend]:
    sim = SimBackend(cluster(), clock=lambda: NOW)
    sim.run_cycle()
    yield sim
    sim.close()


@pytest.fixture
def service(backend: SimBackend) -> SchedulerService:
    return SchedulerService(backend)
