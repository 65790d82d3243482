"""Time-based fair share under `kai-ray serve`: the usage it records outlives the process.

The history is kept in a ConfigMap in the lease namespace (docs/fairshare.md); a restarted or
newly elected scheduler must carry on from it rather than start a new window.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kube_serve import Serve, stop_process, wait_until
from kube_zone import Zone
from kubernetes import client

from kai_ray.cluster.kube.usage_store import DATA_KEY, config_map_name

pytestmark = pytest.mark.kube

CONFIG = """\
actions: "allocate, consolidation, reclaim, preempt, stalegangeviction"
usageDBConfig:
  clientType: embedded
  usageParams:
    windowSize: 1h
    fetchInterval: 1s
    extraParams: {queryResolution: 1s}
"""


def stored(kube_api: Any, namespace: str) -> tuple[str, dict[str, Any]] | None:
    """(resourceVersion, history) of the usage ConfigMap, None while there is none."""
    try:
        found = client.CoreV1Api(kube_api).read_namespaced_config_map(
            config_map_name("kai-scheduler"), namespace
        )
    except client.ApiException as error:
        if error.status == 404:
            return None
        raise
    return found.metadata.resource_version, json.loads(found.data[DATA_KEY])


def holds_gpus(history: dict[str, Any], queue: str) -> bool:
    return any(run["queues"].get(queue, [0, 0, 0])[2] > 0 for run in history["runs"])


def test_a_restarted_serve_carries_on_from_the_recorded_usage(
    kube_api: Any, zone: Zone, serves: Callable[..., Serve], tmp_path: Path
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(CONFIG)
    zone.node("n0")
    queue = zone.queue("q")
    first = serves(f"{zone.name}-a", zone.name, "--config", str(config))
    zone.pod("holder", queue=queue, gpus=2)

    def recorded_and_held() -> bool:
        found = stored(kube_api, zone.name)
        return found is not None and holds_gpus(found[1], queue)

    wait_until(recorded_and_held, 60, f"usage of {queue} in the ConfigMap\n{first.tail()}")
    assert stop_process(first.proc) == 0
    version, before = stored(kube_api, zone.name) or ("", {})
    oldest = before["runs"][0]["start"]
    newest = before["runs"][-1]["end"]

    second = serves(f"{zone.name}-b", zone.name, "--config", str(config))

    def rewritten_later() -> bool:
        found = stored(kube_api, zone.name)
        return found is not None and found[0] != version and found[1]["runs"][-1]["end"] > newest

    wait_until(rewritten_later, 60, f"the restarted serve's write\n{second.tail()}")
    _, after = stored(kube_api, zone.name) or ("", {})
    # Recorded one sample a second since before the restart: the window still starts where the
    # first process began, and the queue's earlier allocation is still in it.
    assert after["runs"][0]["start"] == oldest
    assert holds_gpus(after, queue)
    assert any("run(s) recorded before" in message for message in second.messages()), second.tail()
