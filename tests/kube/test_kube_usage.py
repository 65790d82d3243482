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
import yaml
from kube_serve import Serve, stop_process, wait_until
from kube_zone import Zone
from kubernetes import client
from test_kube_rbac import ACCOUNT, MANIFEST, applied_rbac

from kai_ray import devcluster
from kai_ray.cluster.kube.usage_store import DATA_KEY, config_map_name
from kai_ray.devcluster import DevCluster

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


def test_without_configmap_rights_serve_says_the_usage_stays_in_memory_and_schedules(
    kube_cluster: DevCluster, kube_api: Any, zone: Zone, serves: Callable[..., Serve], tmp_path: Path
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(CONFIG)
    zone.node("n0")
    queue = zone.queue("q")
    without_configmaps = tmp_path / "rbac.yaml"
    documents = list(yaml.safe_load_all(MANIFEST.read_text()))
    for document in documents:
        if document["kind"] == "Role":
            document["rules"] = [r for r in document["rules"] if "configmaps" not in r["resources"]]
    without_configmaps.write_text(yaml.safe_dump_all(documents))
    with applied_rbac(kube_api, zone.name, without_configmaps):
        kubeconfig = devcluster.service_account_kubeconfig(
            kube_cluster, kube_api, zone.name, ACCOUNT, tmp_path / "sa"
        )
        serve = serves(f"{zone.name}-s", zone.name, "--config", str(config), kubeconfig=kubeconfig)
        zone.pod("p", queue=queue)

        def bound() -> bool:
            found = client.CoreV1Api(kube_api).read_namespaced_pod("p", zone.name)
            return bool(found.spec.node_name)

        wait_until(bound, 60, f"the pod bound\n{serve.tail()}")
        warnings = [m for m in serve.messages() if m.startswith("recorded queue usage cannot be kept")]
        assert warnings == [
            f"recorded queue usage cannot be kept in namespace {zone.name} (missing get configmaps,"
            " create configmaps, update configmaps): a restart forgets it"
        ]
        assert any(
            m.startswith(f"usage history {zone.name}/kai-scheduler-queue-usage cannot be read (HTTP 403")
            and m.endswith("recording in memory only")
            for m in serve.messages()
        ), serve.tail()
        assert stored(kube_api, zone.name) is None
