"""From the cluster cache to a plan: the part of a cycle that reads and decides, and what it keeps.

Apart from the loop that writes (`kai_ray.server.scheduler`) so that the churn benchmark times
exactly the scheduler's reading and deciding, in process, and so that what is remembered between
cycles to make reading and deciding cost what changed (models, compiled jobs, session jobs)
lives in one place.  What a finished cycle saw and decided (`PlannedCycle`) is published from
here too, so its readers (the gRPC API's Kubernetes backend) depend on this room, not on the
loop's process.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from kai_ray.api import ManifestProblem
from kai_ray.api.config import SchedulerConfig
from kai_ray.api.constants import SCHEDULER_NAME
from kai_ray.cluster.kube.cache import ClusterCache
from kai_ray.cluster.kube.snapshot import CacheReader
from kai_ray.collector import collection_paused
from kai_ray.distributed.executor import Executor
from kai_ray.engine.cycle import open_session, run_actions
from kai_ray.engine.job_pool import JobPool
from kai_ray.engine.plan import Plan
from kai_ray.engine.session import Session
from kai_ray.fairshare.usage import QueueUsage
from kai_ray.model.objects import ClusterState
from kai_ray.model.snapshot import SnapshotCompiler

__all__ = ["CycleListener", "CyclePlanner", "PlannedCycle"]


@dataclass(frozen=True)
class PlannedCycle:
    """What one finished cycle saw and decided, for readers outside the loop (the gRPC API's
    Kubernetes backend): the converted state, the engine's end state and the plan.

    Published only after the cycle's writes (BindRequests, binding, status) were sent, so a
    reader that sees the record also finds those writes on their way into the cache.
    """

    number: int
    state: ClusterState
    session: Session
    plan: Plan
    problems: list[ManifestProblem]


CycleListener = Callable[[PlannedCycle], None]


class CyclePlanner:
    """Reads the cache into the engine's input and runs the engine, remembering between reads
    what each object became (validated once per resourceVersion, converted once per change that
    can affect it)."""

    def __init__(
        self, config: SchedulerConfig, executor: Executor | None = None, scheduler_name: str = SCHEDULER_NAME
    ) -> None:
        self.config = config
        self.executor = executor
        self._reader = CacheReader(scheduler_name)
        self._compiler = SnapshotCompiler()
        self._pool: JobPool | None = JobPool()

    def share_sessions(self) -> None:
        """Someone reads each cycle's session after the next cycle started (the gRPC API's
        views): stop reusing jobs, whose tasks a later session would move under that reader."""
        self._pool = None

    def read(self, cache: ClusterCache, now: float) -> tuple[ClusterState, list[ManifestProblem]]:
        """The cluster as the cache holds it, converted; problems returned, never raised."""
        return self._reader.read(cache, now)

    def assume_bound(self, pods: Mapping[tuple[str, str], tuple[str, str]]) -> None:
        """Pods bound by this scheduler itself, (node, uid) each: see `LiveCluster.assume_bound`."""
        self._reader.assume_bound(pods)

    def decide(self, state: ClusterState, usage: QueueUsage | None = None) -> tuple[Session, Plan]:
        """The engine's session and plan for `state`, with the queues' past `usage` (spec §7)."""
        with collection_paused():
            session = open_session(
                self._compiler.compile(state), self.config, self.executor, self._pool, usage
            )
            plan = run_actions(session)
        if self._pool is not None:
            self._pool.keep(session.jobs, session.moved_jobs())
        return session, plan

    def plan(self, cache: ClusterCache, now: float) -> Plan:
        """`read` then `decide`, for a caller with no use for the steps between."""
        state, _ = self.read(cache, now)
        return self.decide(state)[1]
