"""Entitlement and dominant-resource-share helpers for queue ordering (spec §5.2 rules 4-7, §6.1, §6.3).

Dominant share is measured against what a queue is *entitled* to, not against cluster capacity, so that a
queue with a large quota is not ordered behind a small one merely for holding more GPUs.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import numpy.typing as npt

from kai_ray.fairshare.constants import FAIRNESS_RESOURCES, UNLIMITED

NO_SHARE_PENALTY = 1000.0
"""Multiplier for usage of a resource the queue is entitled to none of: ranks it behind any real ratio."""


def allocatable_share(deserved: float, fair_share: float, limit: float) -> float:
    """What a queue may hold without being "over its share" for one resource (§6.1).

    An unlimited quota makes the limit the only bound, even when the limit is itself unlimited (-1); the
    caller resolves -1 against cluster capacity where it needs a number (see `dominant_share`).
    """
    if deserved == UNLIMITED:
        return limit
    entitled = max(deserved, fair_share)
    return entitled if limit == UNLIMITED else min(limit, entitled)


def dominant_share(
    allocated: Mapping[str, float],
    allocatable: Mapping[str, float],
    cluster_total: Mapping[str, float],
) -> float:
    """max over cpu/memory/gpu of allocated / allocatable share, never below 0 (§5.2 rule 5).

    Missing resources count as 0, matching the CRD default of a quota and limit of 0. Callers fold the
    pending job in, or the victims out, of `allocated` before calling.
    """
    used = _vector(allocated)
    entitled = _vector(allocatable)
    entitled = np.where(entitled == UNLIMITED, _vector(cluster_total), entitled)
    terms = np.divide(used, entitled, out=used * NO_SHARE_PENALTY, where=entitled != 0)
    return max(0.0, float(terms.max()))


def _vector(quantities: Mapping[str, float]) -> npt.NDArray[np.float64]:
    return np.array([quantities.get(resource, 0.0) for resource in FAIRNESS_RESOURCES], dtype=np.float64)
