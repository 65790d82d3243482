"""Short builders for storage objects and the pod fields that name them, as a user writes them."""

from __future__ import annotations

from typing import Any

Obj = dict[str, Any]


def claim(
    name: str,
    ns: str = "team-a",
    storage_class: str | None = None,
    volume: str = "",
    annotations: dict[str, str] | None = None,
) -> Obj:
    """A PersistentVolumeClaim; `storage_class` None leaves `storageClassName` out."""
    spec: Obj = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
    if storage_class is not None:
        spec["storageClassName"] = storage_class
    if volume:
        spec["volumeName"] = volume
    meta: Obj = {"name": name, "namespace": ns, "annotations": dict(annotations or {})}
    status = {"phase": "Bound" if volume else "Pending"}
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": meta,
        "spec": spec,
        "status": status,
    }


def local_volume(name: str, node: str | None, claim_ref: tuple[str, str] | None = None) -> Obj:
    """A PersistentVolume on one node's disk (`node` None: reachable from every node)."""
    spec: Obj = {
        "capacity": {"storage": "10Gi"},
        "accessModes": ["ReadWriteOnce"],
        "storageClassName": "local",
        "local": {"path": "/mnt/disks/ssd1"},
    }
    if node is not None:
        expression = {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}
        spec["nodeAffinity"] = {"required": {"nodeSelectorTerms": [{"matchExpressions": [expression]}]}}
    if claim_ref is not None:
        spec["claimRef"] = {"namespace": claim_ref[0], "name": claim_ref[1]}
    status = {"phase": "Bound" if claim_ref else "Available"}
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name},
        "spec": spec,
        "status": status,
    }


def storage_class(
    name: str,
    mode: str = "Immediate",
    topologies: list[dict[str, list[str]]] | None = None,
    default: bool = False,
    created: str | None = None,
) -> Obj:
    """A StorageClass; `topologies`: one {label: values} per allowed topology term."""
    meta: Obj = {"name": name}
    if default:
        meta["annotations"] = {"storageclass.kubernetes.io/is-default-class": "true"}
    if created is not None:
        meta["creationTimestamp"] = created
    body: Obj = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": meta,
        "provisioner": "example.com/disk",
        "volumeBindingMode": mode,
    }
    if topologies:
        body["allowedTopologies"] = [
            {"matchLabelExpressions": [{"key": key, "values": values} for key, values in term.items()]}
            for term in topologies
        ]
    return body


def config_map(name: str, ns: str = "team-a") -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": ns},
        "data": {"k": "v"},
    }


def claim_volume(name: str, claim_name: str) -> Obj:
    return {"name": name, "persistentVolumeClaim": {"claimName": claim_name}}


def config_map_volume(name: str, config_name: str, optional: bool | None = None) -> Obj:
    source: Obj = {"name": config_name}
    if optional is not None:
        source["optional"] = optional
    return {"name": name, "configMap": source}
