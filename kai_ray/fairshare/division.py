"""KAI's fair-share division of one resource over one sibling set (spec §6.2, §7).

The algorithm is reproduced as KAI runs it rather than as its docs describe it: the flooring of surplus
shares, the unit-by-unit hand-out of remainders and the leak of a higher bucket's rounding remainder into
a lower bucket all change which queue counts as over its fair share, and therefore who may reclaim from
whom. A "cleaner" proportional split would make different scheduling decisions than KAI.

Iteration and summation follow (creation, name) order. KAI iterates a Go map here, so its float sums are
unordered; a fixed order is the deterministic choice among the orders KAI could take.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from kai_ray.fairshare.constants import UNLIMITED

_MAX_REMAINDER_GRANT = 1.0
"""Phase 3 hands out whole units so that surplus shares stay integral, as KAI's users expect."""


@dataclass(frozen=True)
class QueueDemand:
    """One queue's inputs to the division of a single resource.

    `deserved` and `limit` use -1 for "unlimited"; `usage` is the normalised history U of §7 (0 = none).
    `created` and `name` only break ties, so callers need not pre-sort.
    """

    name: str
    deserved: float
    limit: float
    over_quota_weight: float
    priority: int
    request: float
    created: float = 0.0
    usage: float = 0.0

    @property
    def requestable(self) -> float:
        """The most phases 1-2 may grant: there is no point reserving share a queue cannot ask for or use."""
        return self.request if self.limit == UNLIMITED else min(self.limit, self.request)


@dataclass
class _Bucket:
    """Queues of one priority plus the fractional remainders their last surplus rounds floored away."""

    queues: list[QueueDemand]
    remainders: dict[str, float]


def divide(total: float, queues: Sequence[QueueDemand], k_value: float = 1.0) -> dict[str, float]:
    """Fair share per queue name.

    `k_value` <= 0 is treated as 0 (history has no effect), matching how KAI sanitises the setting.
    """
    ordered = _in_tie_break_order(queues)
    shares = {queue.name: 0.0 for queue in ordered}
    remaining = _grant_deserved(total, ordered, shares)
    if remaining <= 0:
        return shares
    buckets = _priority_buckets(ordered)
    k = max(0.0, k_value)
    for bucket in buckets:
        remaining = _rounds_up_to_fair_share(remaining, bucket, shares, k)
    _hand_out_remainders(remaining, buckets, shares)
    return shares


def _in_tie_break_order(queues: Sequence[QueueDemand]) -> list[QueueDemand]:
    """Fixes one iteration order so equal inputs give bit-identical outputs whatever the caller's order."""
    names = [queue.name for queue in queues]
    if len(set(names)) != len(names):
        raise ValueError(f"queue names must be unique within a sibling set: {sorted(names)}")
    return sorted(queues, key=lambda queue: (queue.created, queue.name))


def _grant_deserved(total: float, queues: list[QueueDemand], shares: dict[str, float]) -> float:
    """Phase 1: quota comes first and ignores priority; over-committed quotas are honoured, not scaled."""
    remaining = total
    for queue in queues:
        deserved = total if queue.deserved == UNLIMITED else queue.deserved
        grant = min(deserved, queue.requestable)
        shares[queue.name] = float(grant)
        remaining -= grant
    return remaining


def _priority_buckets(queues: list[QueueDemand]) -> list[_Bucket]:
    """Surplus is served strictly by descending queue priority."""
    by_priority: dict[int, list[QueueDemand]] = {}
    for queue in queues:
        by_priority.setdefault(queue.priority, []).append(queue)
    return [_Bucket(by_priority[priority], {}) for priority in sorted(by_priority, reverse=True)]


def _rounds_up_to_fair_share(available: float, bucket: _Bucket, shares: dict[str, float], k: float) -> float:
    """Phase 2 for one bucket; returns what is left for lower buckets (including floored remainders).

    A new round only starts when some queue needed less than its share, because only then did capacity
    go unclaimed that the still-unsatisfied queues could use.
    """
    while available > 0:
        weights = _surplus_weights(bucket.queues, shares, k)
        weight_sum = sum(weights.values())
        if weight_sum == 0:
            break
        round_amount = available
        share_exceeded_need = False
        for queue in bucket.queues:
            if queue.name not in weights:
                continue
            share = round_amount * (weights[queue.name] / weight_sum)
            need = queue.requestable - shares[queue.name]
            granted = _grant_surplus(queue.name, share, need, bucket.remainders)
            shares[queue.name] += granted
            available -= granted
            share_exceeded_need = share_exceeded_need or need < share
        if not share_exceeded_need:
            break
    return available


def _surplus_weights(queues: list[QueueDemand], shares: dict[str, float], k: float) -> dict[str, float]:
    """P_q of §7 for every unsatisfied queue that has a weight; empty when none still wants more.

    Requestable already folds in the limit, so "requestable above share" also implies "limit above share".
    Weightless queues are excluded outright, so no history value can buy them surplus.
    """
    unsatisfied = [queue for queue in queues if queue.requestable - shares[queue.name] > 0]
    weight_total = sum(queue.over_quota_weight for queue in unsatisfied)
    if weight_total == 0:
        return {}
    return {
        queue.name: _history_adjusted_weight(queue, weight_total, k)
        for queue in unsatisfied
        if queue.over_quota_weight > 0
    }


def _history_adjusted_weight(queue: QueueDemand, weight_total: float, k: float) -> float:
    """Shrinks the weight of queues that used more than their weight's fraction of the resource lately."""
    normalised = queue.over_quota_weight / weight_total
    return max(0.0, normalised + k * (normalised - queue.usage))


def _grant_surplus(name: str, share: float, need: float, remainders: dict[str, float]) -> float:
    """Gives the whole need if it fits, else the whole units of the share, remembering the fraction.

    A zero fraction leaves an earlier remainder of the queue untouched (KAI only records positive ones).
    """
    if need <= share:
        remainders.pop(name, None)
        return need
    granted = float(math.floor(share))
    if share - granted > 0:
        remainders[name] = share - granted
    return granted


def _hand_out_remainders(remaining: float, buckets: list[_Bucket], shares: dict[str, float]) -> None:
    """Phase 3: floored fractions are returned one unit at a time, biggest fraction first, by bucket.

    Demand is deliberately not re-checked (KAI does not), so a queue can end < 1 unit above its request.
    """
    for bucket in buckets:
        for name in _largest_remainder_first(bucket):
            if remaining <= 0:
                return
            granted = min(_MAX_REMAINDER_GRANT, remaining)
            shares[name] += granted
            remaining -= granted


def _largest_remainder_first(bucket: _Bucket) -> list[str]:
    """Ties go to the older queue, then the smaller name, so the outcome never depends on input order."""
    holders = [queue for queue in bucket.queues if queue.name in bucket.remainders]
    holders.sort(key=lambda queue: (-bucket.remainders[queue.name], queue.created, queue.name))
    return [queue.name for queue in holders]
