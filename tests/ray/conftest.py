"""One local Ray instance for the whole test run."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import ray

from kai_ray.distributed.ray_executor import LOCAL_RAY


@pytest.fixture(scope="session")
def local_ray() -> Iterator[None]:
    # "local": never the cluster a stale /tmp/ray/ray_current_cluster names.
    ray.init(
        address=LOCAL_RAY, num_cpus=2, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True
    )
    yield
    ray.shutdown()
