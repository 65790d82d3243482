"""A pod's volumes and ConfigMaps → the nodes it may use and the objects it waits for.

kube-scheduler's VolumeBinding and KAI's ConfigMap predicate, resolved once per conversion of the
pod rather than per node, into `TaskSpec.volume_node_affinity`, `blockers` and `delayed_claims`:

- a claim bound to a volume (`spec.volumeName`) restricts the pod to that volume's required node
  affinity (none: any node); a volume that does not exist: PersistentVolumeMissing;
- an unbound claim of a `WaitForFirstConsumer` class restricts it to the class's
  `allowedTopologies` (none: any node) and is a delayed claim: the node chosen is written on the
  claim (`volume.kubernetes.io/selected-node`) before the pod is bound, so its provisioner
  provisions there.  A claim that already carries that annotation restricts the pod to that node;
- an unbound claim of an `Immediate` class, or of no class when no class is the default, waits
  for the PersistentVolume controller to bind it: PersistentVolumeClaimUnbound;
- a claim that does not exist or is being deleted: PersistentVolumeClaimMissing.  A generic
  ephemeral volume's claim is `<pod>-<volume>`, which its controller makes;
- an unbound claim naming a StorageClass that does not exist is bad input: the pod is refused
  (`Invalid`, naming the volume) until the class exists;
- a ConfigMap that a volume, a projected volume or the environment of a container needs (not
  optional) and that does not exist: ConfigMapMissing.

Only pods this scheduler places go through here: a pod held on its node (another scheduler's, or
one that cannot be read) occupies it whatever its volumes say.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace

from kai_ray.api import ConfigMap, ManifestSet, PersistentVolume, PersistentVolumeClaim, Pod, StorageClass
from kai_ray.api.constants import SELECTED_NODE_ANNOTATION
from kai_ray.api.core import NodeSelector, PodSpec
from kai_ray.api.references import Volume
from kai_ray.convert.common import Invalid, epoch
from kai_ray.convert.constraints import node_selector_term
from kai_ray.model.objects import (
    AffinityRequirement,
    Blocker,
    BlockerCause,
    NodeSelectorTerm,
    NodeSelectorTerms,
    TaskSpec,
)

__all__ = [
    "NO_STORAGE",
    "ClaimUse",
    "PodReferences",
    "StorageObjects",
    "VolumeNeeds",
    "default_class",
    "pod_references",
    "selected_node_terms",
    "storage_from_manifests",
    "volume_needs",
    "with_volume_needs",
]

Key = tuple[str, str]
"""(namespace, name); the namespace is "" for cluster-scoped kinds."""

WAIT_FOR_FIRST_CONSUMER = "WaitForFirstConsumer"


@dataclass(frozen=True)
class StorageObjects:
    """What a pod's volumes are resolved against.  `default` is the class of claims that name
    none (`default_class`); the mappings may be a live reader's own tables, read, never changed."""

    claims: Mapping[Key, PersistentVolumeClaim] = field(default_factory=dict)
    volumes: Mapping[str, PersistentVolume] = field(default_factory=dict)
    classes: Mapping[str, StorageClass] = field(default_factory=dict)
    config_maps: Collection[Key] = frozenset()
    default: StorageClass | None = None


NO_STORAGE = StorageObjects()
"""No claims, volumes, classes or ConfigMaps: every reference is missing."""


def default_class(classes: Iterable[StorageClass]) -> StorageClass | None:
    """The class a claim naming none gets: of those marked default, the newest, then the first by
    name (as Kubernetes chooses among several)."""
    marked = [c for c in classes if c.is_default]
    if not marked:
        return None
    return min(marked, key=lambda c: (-(epoch(c.metadata.creation_timestamp) or 0.0), c.metadata.name))


def storage_from_manifests(loaded: ManifestSet) -> StorageObjects:
    classes = {m.obj.metadata.name: m.obj for m in loaded.of_type(StorageClass)}
    return StorageObjects(
        claims={_key(m.obj): m.obj for m in loaded.of_type(PersistentVolumeClaim)},
        volumes={m.obj.metadata.name: m.obj for m in loaded.of_type(PersistentVolume)},
        classes=classes,
        config_maps=frozenset(_key(m.obj) for m in loaded.of_type(ConfigMap)),
        default=default_class(classes.values()),
    )


def _key(obj: PersistentVolumeClaim | ConfigMap) -> Key:
    return obj.metadata.namespace or "", obj.metadata.name


@dataclass(frozen=True)
class ClaimUse:
    """A claim a pod's volume stands for, with the volume's field path (for problems)."""

    name: str
    path: str


@dataclass(frozen=True)
class PodReferences:
    """The claims and required ConfigMaps a pod names, all in its own namespace."""

    claims: tuple[ClaimUse, ...] = ()
    config_maps: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.claims or self.config_maps)


NO_REFERENCES = PodReferences()


def pod_references(pod: Pod) -> PodReferences:
    """What the pod's volumes and containers name, each claim and ConfigMap once, in the order
    they are written."""
    spec = pod.spec
    containers = [*spec.init_containers, *spec.containers]
    if not spec.volumes and not any(c.env or c.env_from for c in containers):
        return NO_REFERENCES
    claims: dict[str, ClaimUse] = {}
    for index, volume in enumerate(spec.volumes):
        use = _claim_use(pod.metadata.name, volume, f"spec.volumes[{index}]")
        if use is not None:
            claims.setdefault(use.name, use)
    return PodReferences(tuple(claims.values()), tuple(dict.fromkeys(_config_maps(spec))))


def _claim_use(pod: str, volume: Volume, path: str) -> ClaimUse | None:
    if volume.persistent_volume_claim is not None:
        return ClaimUse(volume.persistent_volume_claim.claim_name, f"{path}.persistentVolumeClaim")
    if volume.ephemeral is not None:
        return ClaimUse(f"{pod}-{volume.name}", f"{path}.ephemeral")
    return None


def _config_maps(spec: PodSpec) -> Iterator[str]:
    """KAI's ConfigMap predicate: volumes, projected volumes, `envFrom` and `env[].valueFrom` of
    every container, init containers included; optional references never block."""
    for volume in spec.volumes:
        references = [volume.config_map]
        if volume.projected is not None:
            references += [source.config_map for source in volume.projected.sources]
        yield from (ref.name for ref in references if ref is not None and ref.required)
    for container in [*spec.init_containers, *spec.containers]:
        for source in container.env_from:
            if source.config_map_ref is not None and source.config_map_ref.required:
                yield source.config_map_ref.name
        for variable in container.env:
            ref = variable.value_from.config_map_key_ref if variable.value_from else None
            if ref is not None and ref.required:
                yield ref.name


@dataclass(frozen=True)
class VolumeNeeds:
    """What a pod's references come to: see the module docstring."""

    node_affinity: tuple[NodeSelectorTerms, ...] = ()
    blockers: tuple[Blocker, ...] = ()
    delayed_claims: tuple[str, ...] = ()


NO_NEEDS = VolumeNeeds()


def with_volume_needs(task: TaskSpec, pod: Pod, storage: StorageObjects) -> TaskSpec:
    """The task with its volumes' needs; the very task when it has none (most pods)."""
    needs = volume_needs(pod, storage)
    if needs == NO_NEEDS:
        return task
    return replace(
        task,
        volume_node_affinity=needs.node_affinity,
        blockers=(*task.blockers, *needs.blockers),
        delayed_claims=needs.delayed_claims,
    )


def volume_needs(pod: Pod, storage: StorageObjects) -> VolumeNeeds:
    """Raises `Invalid` for an unbound claim whose StorageClass does not exist."""
    references = pod_references(pod)
    if not references:
        return NO_NEEDS
    namespace = pod.metadata.namespace or ""
    claims = [_claim_needs(namespace, use, storage) for use in references.claims]
    missing = tuple(
        Blocker(BlockerCause.CONFIG_MAP_MISSING, f"configmap {namespace}/{name} not found")
        for name in references.config_maps
        if (namespace, name) not in storage.config_maps
    )
    return VolumeNeeds(
        tuple(terms for needs in claims for terms in needs.node_affinity),
        (*(blocker for needs in claims for blocker in needs.blockers), *missing),
        tuple(name for needs in claims for name in needs.delayed_claims),
    )


def _claim_needs(namespace: str, use: ClaimUse, storage: StorageObjects) -> VolumeNeeds:
    who = f"persistentvolumeclaim {namespace}/{use.name}"
    claim = storage.claims.get((namespace, use.name))
    if claim is None or claim.metadata.deletion_timestamp is not None:
        state = "not found" if claim is None else "is being deleted"
        return _blocked(BlockerCause.CLAIM_MISSING, f"{who} {state}")
    bound_to = claim.spec.volume_name
    if bound_to:
        volume = storage.volumes.get(bound_to)
        if volume is None:
            return _blocked(
                BlockerCause.VOLUME_MISSING, f"persistentvolume {bound_to} not found ({who} is bound to it)"
            )
        required = volume.spec.node_affinity.required if volume.spec.node_affinity else None
        return NO_NEEDS if required is None else VolumeNeeds(node_affinity=(_selector(required),))
    storage_class = _class_of(claim, storage, use, who)
    if storage_class is None or storage_class.volume_binding_mode != WAIT_FOR_FIRST_CONSUMER:
        return _blocked(BlockerCause.CLAIM_UNBOUND, f"{who} is not bound yet (waiting for its volume)")
    selected = claim.metadata.annotations.get(SELECTED_NODE_ANNOTATION)
    if selected:
        return VolumeNeeds(node_affinity=(selected_node_terms(selected),), delayed_claims=(use.name,))
    topologies = tuple(
        NodeSelectorTerm(
            expressions=tuple(
                AffinityRequirement(e.key, "In", tuple(e.values)) for e in term.match_label_expressions
            )
        )
        for term in storage_class.allowed_topologies
    )
    return VolumeNeeds(node_affinity=(topologies,) if topologies else (), delayed_claims=(use.name,))


def selected_node_terms(node: str) -> NodeSelectorTerms:
    """Where a claim selected for `node` holds its pods: that node alone."""
    return (NodeSelectorTerm(fields=(AffinityRequirement("metadata.name", "In", (node,)),)),)


def _blocked(cause: BlockerCause, message: str) -> VolumeNeeds:
    return VolumeNeeds(blockers=(Blocker(cause, message),))


def _class_of(
    claim: PersistentVolumeClaim, storage: StorageObjects, use: ClaimUse, who: str
) -> StorageClass | None:
    """The claim's class; None for a claim of no class (explicitly "", or none named and no
    default)."""
    name = claim.class_name
    if name is None:
        return storage.default
    if not name:
        return None
    found = storage.classes.get(name)
    if found is None:
        raise Invalid(use.path, f"{who} names storageClassName {name!r}, which does not exist")
    return found


def _selector(selector: NodeSelector) -> NodeSelectorTerms:
    """A volume's required node selector as the model states one (the API server validated it)."""
    return tuple(node_selector_term(term) for term in selector.node_selector_terms)
