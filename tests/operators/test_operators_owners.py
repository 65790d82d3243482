"""Owner-chain resolution (spec/integrations.md §1.2), including the chains KAI would hang or crash on."""

from __future__ import annotations

from typing import Any

import pytest
from grouping_builders import NAMESPACE, ForbiddingReader, kube, pod, reference
from kai_ray_operators import InMemoryReader, OwnerChainError, resolve_owners

pytestmark = pytest.mark.unit


def _chain() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    deployment = kube("apps/v1", "Deployment", "web")
    replica_set = kube("apps/v1", "ReplicaSet", "web-7d9", owner=deployment)
    return deployment, replica_set, pod("web-7d9-x", owner=replica_set)


def test_a_pod_without_owners_is_its_own_top_owner() -> None:
    bare = {"metadata": {"name": "p", "namespace": NAMESPACE}}
    chain = resolve_owners(InMemoryReader([]), bare)
    assert chain.owners == ()
    assert (chain.top_owner["apiVersion"], chain.top_owner["kind"]) == ("v1", "Pod")


def test_the_chain_runs_from_the_nearest_owner_to_the_top() -> None:
    deployment, replica_set, the_pod = _chain()
    chain = resolve_owners(InMemoryReader([deployment, replica_set]), the_pod)
    assert chain.top_owner == deployment
    assert chain.owners == (replica_set, deployment)


def test_only_the_first_owner_reference_is_followed() -> None:
    deployment, replica_set, the_pod = _chain()
    the_pod["metadata"]["ownerReferences"].append(reference(kube("batch/v1", "Job", "other")))
    assert resolve_owners(InMemoryReader([deployment, replica_set]), the_pod).top_owner == deployment


def test_forbidden_owner_stops_at_the_last_owner_read() -> None:
    deployment, replica_set, the_pod = _chain()
    chain = resolve_owners(ForbiddingReader([deployment, replica_set], "Deployment"), the_pod)
    assert chain.top_owner == replica_set
    assert chain.owners == (replica_set,)


def test_forbidden_first_owner_leaves_the_pod_as_top_owner() -> None:
    deployment, replica_set, the_pod = _chain()
    chain = resolve_owners(ForbiddingReader([deployment, replica_set], "ReplicaSet"), the_pod)
    assert chain.top_owner["metadata"]["name"] == "web-7d9-x"
    assert chain.owners == ()


def test_missing_owner_is_an_error_naming_it() -> None:
    _, replica_set, the_pod = _chain()
    with pytest.raises(OwnerChainError, match="ReplicaSet ml/web-7d9: cannot read its owner Deployment web"):
        resolve_owners(InMemoryReader([replica_set]), the_pod)


def test_replaced_owner_is_an_error() -> None:
    deployment, replica_set, the_pod = _chain()
    deployment["metadata"]["uid"] = "a-new-uid"
    with pytest.raises(OwnerChainError, match="was replaced"):
        resolve_owners(InMemoryReader([deployment, replica_set]), the_pod)


def test_an_owner_with_two_owners_is_an_error() -> None:
    deployment, replica_set, the_pod = _chain()
    replica_set["metadata"]["ownerReferences"].append(reference(deployment))
    with pytest.raises(OwnerChainError, match=r"ReplicaSet ml/web-7d9: metadata\.ownerReferences: has more"):
        resolve_owners(InMemoryReader([deployment, replica_set]), the_pod)


def test_an_owner_reference_cycle_is_an_error_not_a_hang() -> None:
    first = kube("example.com/v1", "Thing", "a")
    second = kube("example.com/v1", "Thing", "b", owner=first)
    first["metadata"]["ownerReferences"] = [reference(second)]
    with pytest.raises(OwnerChainError, match="Pod ml/p: owner references form a cycle at Thing b"):
        resolve_owners(InMemoryReader([first, second]), pod("p", owner=second))


def test_a_malformed_owner_reference_is_an_error() -> None:
    the_pod = pod("p")
    the_pod["metadata"]["ownerReferences"] = [{"kind": "ReplicaSet"}]
    with pytest.raises(OwnerChainError, match="lacks apiVersion, kind or name"):
        resolve_owners(InMemoryReader([]), the_pod)
