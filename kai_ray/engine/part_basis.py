"""What a session over one part of a cluster must know about the rest of it (split cycles).

A split cycle (`kai_ray.split`) deals a cluster's nodes and jobs to parts and opens one session
per part. Queue order, fair shares, limits and quotas are about the whole cluster, so each part's
session starts from the whole cluster's numbers: the capacity queues divide, the GPU memory
bounds a pending pod's share is counted with, and what every other part's jobs already hold and
ask of each queue. Given those, a part's session ranks queues as one over the whole cluster
would at the start of the cycle; only what other parts place during the cycle stays unseen,
which the split cycle's acceptance step settles.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class PartBasis:
    totals: np.ndarray
    """(cpu, memory, gpu) the whole cluster's queues divide (`Session.fairness_totals`)."""
    min_gpu_memory: float
    max_gpu_memory: float
    allocated: np.ndarray
    """Per queue row (queues in name order) × (cpu, memory, gpu): what the other parts' jobs hold."""
    allocated_non_preemptible: np.ndarray
    requested: np.ndarray
    """What the other parts' jobs hold or ask for, placed or pending."""
