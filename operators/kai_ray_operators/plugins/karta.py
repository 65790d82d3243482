"""Karta: run.ai's declarative description of how to group an unknown workload type (§1.3, §9).

The hub falls back to a Karta when no built-in plugin knows the top owner's
type and exactly one `run.ai/v1alpha1 Karta` is labelled with that type.
Interpreting a Karta's instructions is not implemented yet, so such pods stay
ungrouped with a clear reason rather than being scheduled under a guessed
gang; without Karta objects nothing changes.
"""

from __future__ import annotations

from collections.abc import Sequence

from kai_ray_operators.context import GroupingContext
from kai_ray_operators.errors import ReadError, UnsupportedWorkload
from kai_ray_operators.fields import GroupVersionKind, KubeObject, describe
from kai_ray_operators.metadata import PodGroupMetadata
from kai_ray_operators.reader import ObjectReader

__all__ = ["group_karta", "karta_describes"]

KARTA_API_VERSION = "run.ai/v1alpha1"
GROUP_LABEL, VERSION_LABEL, KIND_LABEL = "run.ai/karta-group", "run.ai/karta-version", "run.ai/karta-kind"


def karta_describes(reader: ObjectReader, gvk: GroupVersionKind) -> bool:
    """Whether exactly one Karta describes this type (none, several, or no Karta CRD: no)."""
    selector = {GROUP_LABEL: gvk.group, VERSION_LABEL: gvk.version, KIND_LABEL: gvk.kind}
    try:
        kartas = reader.list(KARTA_API_VERSION, "Karta", None, selector)
    except ReadError:
        return False
    return len(kartas) == 1


def group_karta(
    context: GroupingContext, top_owner: KubeObject, pod: KubeObject, all_owners: Sequence[KubeObject]
) -> PodGroupMetadata:
    """Plugin `karta`."""
    raise UnsupportedWorkload(
        describe(top_owner),
        f"{GroupVersionKind.of(top_owner)} is described by a Karta; "
        "grouping by Karta instructions is not supported",
    )
