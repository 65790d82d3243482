"""One scheduling cycle: snapshot in, plan out (the engine's whole public contract)."""

from __future__ import annotations

import time
from collections.abc import Callable

from kai_ray.api.config import SchedulerConfig
from kai_ray.collector import collection_paused
from kai_ray.distributed.executor import Executor
from kai_ray.engine.actions.allocate import allocate
from kai_ray.engine.actions.consolidation import consolidation
from kai_ray.engine.actions.preempt import preempt
from kai_ray.engine.actions.reclaim import reclaim
from kai_ray.engine.actions.stale_gang import stale_gang_eviction
from kai_ray.engine.job_pool import JobPool
from kai_ray.engine.plan import Plan, build_plan
from kai_ray.engine.session import Session
from kai_ray.fairshare.usage import QueueUsage
from kai_ray.model.snapshot import Snapshot

Action = Callable[[Session], None]

ACTIONS: dict[str, Action] = {
    "allocate": allocate,
    "consolidation": consolidation,
    "reclaim": reclaim,
    "preempt": preempt,
    "stalegangeviction": stale_gang_eviction,
}


def open_session(
    snapshot: Snapshot,
    config: SchedulerConfig,
    executor: Executor | None = None,
    pool: JobPool | None = None,
    usage: QueueUsage | None = None,
) -> Session:
    """A session over `snapshot`; `usage` is the queues' normalised history (§7), None for none."""
    return Session(snapshot, config, executor, pool, usage)


def run_actions(session: Session) -> Plan:
    """Run the configured actions in order; their durations land in `session.action_seconds`."""
    for name in session.config.actions:
        action = ACTIONS.get(name)
        if action is not None:
            session.current_action = name
            started = time.perf_counter()
            action(session)
            session.action_seconds[name] = time.perf_counter() - started
    return build_plan(session)


def schedule(snapshot: Snapshot, config: SchedulerConfig, executor: Executor | None = None) -> Plan:
    with collection_paused():
        return run_actions(open_session(snapshot, config, executor))
