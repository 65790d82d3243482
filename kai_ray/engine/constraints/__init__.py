"""Placement rules that read what other pods hold: inter-pod affinity, topology spread, host ports
and extended resources (`PodConstraints`, over a `PodIndex` kept current as pods move)."""

from kai_ray.engine.constraints.checker import (
    PodConstraints,
    Verdict,
    needs_pod_constraints,
    snapshot_has_pod_constraints,
)

__all__ = ["PodConstraints", "Verdict", "needs_pod_constraints", "snapshot_has_pod_constraints"]
