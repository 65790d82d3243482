"""One local Ray instance for the whole test run."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import ray

from kai_ray.distributed.ray_executor import join_ray


@pytest.fixture(scope="session")
def local_ray() -> Iterator[None]:
    # A local instance, as the CLI starts one: never the cluster a stale /tmp/ray names.
    join_ray(None, num_cpus=2)
    yield
    ray.shutdown()
