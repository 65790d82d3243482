"""Small builders for the grouping tests: a workload, its pods and their owner references in a line each."""

from __future__ import annotations

from typing import Any

from kai_ray_operators import (
    Forbidden,
    GroupingConfig,
    InMemoryReader,
    KubeObject,
    PodGroupMetadata,
    group_pod,
)

NAMESPACE = "ml"


def kube(
    api_version: str,
    kind: str,
    name: str,
    *,
    uid: str | None = None,
    owner: dict[str, Any] | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    namespace: str = NAMESPACE,
    **body: Any,
) -> dict[str, Any]:
    """An object; `owner` (another object) becomes its single owner reference."""
    metadata: dict[str, Any] = {"name": name, "namespace": namespace, "uid": uid or f"{name}-uid"}
    if labels:
        metadata["labels"] = labels
    if annotations:
        metadata["annotations"] = annotations
    if owner is not None:
        metadata["ownerReferences"] = [reference(owner)]
    return {"apiVersion": api_version, "kind": kind, "metadata": metadata, **body}


def pod(name: str, *, owner: dict[str, Any] | None = None, **kwargs: Any) -> dict[str, Any]:
    return kube("v1", "Pod", name, owner=owner, spec={"schedulerName": "kai-scheduler"}, **kwargs)


def reference(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj["metadata"]
    return {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "name": meta["name"], "uid": meta["uid"]}


def priority_class(name: str, value: int = 100) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": name},
        "value": value,
    }


def group(
    the_pod: dict[str, Any], *objects: dict[str, Any], config: GroupingConfig | None = None
) -> PodGroupMetadata:
    """The full pipeline over `objects` (the pod is readable too); every case here expects a PodGroup."""
    metadata = group_pod(InMemoryReader([the_pod, *objects]), config or GroupingConfig(), the_pod)
    assert metadata is not None, "expected a PodGroup"
    return metadata


def expect(metadata: PodGroupMetadata, **wanted: object) -> None:
    """Assert the listed fields; `owner` stands for the owner's kind."""
    actual = {key: metadata.owner.kind if key == "owner" else getattr(metadata, key) for key in wanted}
    assert actual == wanted


class ForbiddingReader(InMemoryReader):
    """An API server that refuses one kind, as RBAC does for a wrapper CRD the grouper may not read."""

    def __init__(self, objects: list[dict[str, Any]], forbidden_kind: str) -> None:
        super().__init__(objects)
        self.forbidden_kind = forbidden_kind

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> KubeObject:
        if kind == self.forbidden_kind:
            raise Forbidden(f"{kind} {namespace}/{name}", "forbidden")
        return super().get(api_version, kind, namespace, name)
