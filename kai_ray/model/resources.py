"""The resource index shared by node vectors and task requests.

KAI keeps one vector layout (cpu, memory, gpu, pods) for nodes and tasks; we
do the same so fit checks are a single array comparison.
"""

from __future__ import annotations

CPU = 0
MEMORY = 1
GPU = 2
PODS = 3
NUM_RESOURCES = 4

FAIRNESS_RESOURCES = ("cpu", "memory", "gpu")
"""The resources queues are fair over; the column order of every queue-accounting array."""

EPSILON = 1e-9
"""Slack for float comparisons of fractional GPUs and summed quotas."""
