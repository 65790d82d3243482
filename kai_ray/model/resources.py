"""The resource index shared by node vectors and task requests.

KAI keeps one vector layout (cpu, memory, gpu, pods) for nodes and tasks; we
do the same so fit checks are a single array comparison.
"""

from __future__ import annotations

import numpy as np

CPU = 0
MEMORY = 1
GPU = 2
PODS = 3
NUM_RESOURCES = 4

FAIRNESS_RESOURCES = ("cpu", "memory", "gpu")
"""The resources queues are fair over, in the order of `fairness_vector`."""

EPSILON = 1e-9
"""Slack for float comparisons of fractional GPUs and summed quotas."""


def fairness_vector(cpu: float, memory: float, gpu: float) -> np.ndarray:
    return np.array([cpu, memory, gpu], dtype=np.float64)
