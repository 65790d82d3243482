"""Feeding time-based fair share from the scheduler's own cycles (spec §7, kai-ray's `embedded` client).

KAI learns queue usage from Prometheus, which scraped the allocation metrics KAI itself exports at
the end of every session. Recording the same numbers straight from the session (what each queue
holds once the cycle's actions ran, against the capacity the queues divided) gives the same signal
without the round trip, in the simulator and in `serve` alike.
"""

from __future__ import annotations

from collections.abc import Mapping

from kai_ray.api.usage_db import UsageParams
from kai_ray.engine.session import Session
from kai_ray.fairshare.usage import QueueUsage, UsageHistory, UsageWindow, Vector


def usage_window(params: UsageParams) -> UsageWindow:
    """The configured window in the history's terms (one sample per query resolution, as KAI)."""
    return UsageWindow(
        size=params.window_seconds,
        resolution=params.query_resolution_seconds,
        half_life=params.half_life_seconds,
        tumbling_start=params.tumbling_start if params.window_type == "tumbling" else None,
    )


def session_sample(session: Session) -> tuple[Vector, dict[str, Vector]]:
    """Capacity and every queue's allocation (parents include their children, as KAI's metrics do)."""
    cpu, memory, gpu = session.fairness_totals().tolist()
    book = session.queues
    allocated = {name: _triple(book.allocated[row].tolist()) for row, name in enumerate(book.names)}
    return (cpu, memory, gpu), allocated


class UsageRecorder:
    """A usage history fed one sample per cycle, optionally starting from stated past usage.

    Stated usage (fractions of capacity over the window before the first cycle) needs the cluster's
    capacity to become a recorded run, which is only known once a session opened; until then the
    fractions themselves are the usage, which is exactly what the run will add up to.
    """

    def __init__(self, params: UsageParams, stated: Mapping[str, Mapping[str, float]] | None = None) -> None:
        self.history = UsageHistory(usage_window(params))
        self._stated = {name: dict(shares) for name, shares in sorted((stated or {}).items())}

    def usage(self, now: float) -> QueueUsage:
        if self._stated:
            return {name: dict(shares) for name, shares in self._stated.items()}
        return self.history.usage(now)

    def record(self, session: Session) -> None:
        """Add the finished session's allocations at the session's clock."""
        capacity, allocated = session_sample(session)
        if self._stated:
            self.history.seed(session.now, capacity, self._stated)
            self._stated = {}
        self.history.record(session.now, capacity, allocated)


def _triple(values: list[float]) -> Vector:
    return (values[0], values[1], values[2])
