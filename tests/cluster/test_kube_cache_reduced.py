"""The cache keeps of claims, volumes, StorageClasses and ConfigMaps only what pods' conversion
reads (a ConfigMap's data never), and a change to nothing it keeps is no change (issue 34)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from storage_builders import claim, config_map, storage_class

from kai_ray.cluster.kube.cache import ClusterCache

pytestmark = pytest.mark.unit


def versioned(obj: dict[str, Any], version: str) -> dict[str, Any]:
    return {**obj, "metadata": {**obj["metadata"], "resourceVersion": version}}


def stored(cache: ClusterCache, kind: str, namespace: str, name: str) -> dict[str, Any]:
    (entry,) = [e for e in cache.entries([kind]).objects[kind] if (e.namespace, e.name) == (namespace, name)]
    data: dict[str, Any] = json.loads(entry.text)
    return data


def test_a_config_map_is_kept_as_its_name_and_a_change_of_its_data_wakes_nobody() -> None:
    cache = ClusterCache(None)
    big = config_map("settings") | {"data": {"script.sh": "x" * 100_000}}
    assert cache.apply_event("ADDED", "ConfigMap", versioned(big, "1"))
    assert stored(cache, "ConfigMap", "team-a", "settings") == {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "settings", "namespace": "team-a", "resourceVersion": "1"},
    }
    generation = cache.generation
    rewritten = big | {"data": {"script.sh": "y"}}
    assert not cache.apply_event("MODIFIED", "ConfigMap", versioned(rewritten, "2"))
    assert cache.generation == generation
    assert cache.changes(generation, ["ConfigMap"]).changed["ConfigMap"] == {}
    assert cache.apply_event("DELETED", "ConfigMap", versioned(rewritten, "3"))  # still followed


def test_a_claim_and_a_class_keep_the_fields_and_annotations_the_conversion_reads() -> None:
    cache = ClusterCache(None)
    notes = {
        "volume.kubernetes.io/selected-node": "n1",
        "kubectl.kubernetes.io/last-applied-configuration": "{...}",
    }
    cache.apply_event("ADDED", "PersistentVolumeClaim", versioned(claim("data", annotations=notes), "1"))
    kept = stored(cache, "PersistentVolumeClaim", "team-a", "data")
    assert kept["metadata"]["annotations"] == {"volume.kubernetes.io/selected-node": "n1"}
    assert kept["spec"] == {} and kept["status"] == {"phase": "Pending"}
    generation = cache.generation
    bound = claim("data", volume="pv-1", annotations=notes)
    assert cache.apply_event("MODIFIED", "PersistentVolumeClaim", versioned(bound, "2"))
    assert cache.generation > generation
    assert stored(cache, "PersistentVolumeClaim", "team-a", "data")["spec"] == {"volumeName": "pv-1"}
    delayed = storage_class("local", "WaitForFirstConsumer", default=True) | {"parameters": {"type": "ssd"}}
    cache.apply_event("ADDED", "StorageClass", versioned(delayed, "3"))
    assert stored(cache, "StorageClass", "", "local") == {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {
            "name": "local",
            "resourceVersion": "3",
            "annotations": {"storageclass.kubernetes.io/is-default-class": "true"},
        },
        "provisioner": "example.com/disk",
        "volumeBindingMode": "WaitForFirstConsumer",
    }
