"""`kai-ray serve --config FILE` takes KAI's scheduler configuration (issue 8, item 10).

The example configuration spreads GPU pods over nodes where the built-in default
packs them: two one-GPU pods land on two nodes with it, on one node without it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kube_serve import Serve, wait_until
from kube_zone import Zone
from kubernetes import client

pytestmark = pytest.mark.kube

SPREAD = Path(__file__).resolve().parents[2] / "examples" / "scheduler-config" / "config.yaml"


def nodes_of(kube_api: Any, namespace: str) -> list[str | None]:
    return [p.spec.node_name for p in client.CoreV1Api(kube_api).list_namespaced_pod(namespace).items]


@pytest.mark.parametrize(("config", "nodes_used"), [((), 1), (("--config", str(SPREAD)), 2)])
def test_the_configuration_file_decides_placement(
    kube_api: Any, zone: Zone, serves: Callable[..., Serve], config: tuple[str, ...], nodes_used: int
) -> None:
    zone.node("n0")
    zone.node("n1")
    queue = zone.queue("q")
    serve = serves(f"{zone.name}-s", zone.name, *config)
    zone.pod("first", queue=queue)
    wait_until(lambda: all(nodes_of(kube_api, zone.name)), 60, f"the first bind\n{serve.tail()}")
    zone.pod("second", queue=queue)
    wait_until(
        lambda: all(nodes_of(kube_api, zone.name)) and len(nodes_of(kube_api, zone.name)) == 2,
        60,
        "the second",
    )
    assert len(set(nodes_of(kube_api, zone.name))) == nodes_used
