"""KAI-compatible queue fair share: quota-first division, priority buckets, weights, DRF helpers.

Kept free of our other packages so the arithmetic can be checked number-for-number against the spec's
worked examples without building a snapshot.
"""

from kai_ray.fairshare.constants import FAIRNESS_RESOURCES, UNLIMITED
from kai_ray.fairshare.division import QueueDemand, divide
from kai_ray.fairshare.drf import allocatable_share, dominant_share
from kai_ray.fairshare.tree import QueueNode, fair_shares

__all__ = [
    "FAIRNESS_RESOURCES",
    "UNLIMITED",
    "QueueDemand",
    "QueueNode",
    "allocatable_share",
    "divide",
    "dominant_share",
    "fair_shares",
]
