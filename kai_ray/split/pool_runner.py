"""Node-pool sharding: each pool's sub-cluster scheduled whole, in-process or in one Ray task.

KAI schedules node pools independently, one `SchedulingShard` each (see
`kai_ray.model.pools`), so running every action of a cycle over each pool's
sub-cluster on its own, in parallel, gives exactly KAI's decisions. This is
unlike `RayExecutor`, which shards only node ranking inside one cycle.

A runner maps a function over the pools. `LocalPoolRunner` calls it for each pool
in turn; `RayPoolRunner` starts one Ray task per pool and waits for all of them
under one deadline. A pool whose task fails or outlasts the deadline is scheduled
in-process instead (logged, and counted in `fallbacks`): the result is always every
pool's, never a partial one, and the same whichever runner computed it.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from kai_ray.api.config import SchedulerConfig
from kai_ray.api.constants import NODE_POOL_LABEL
from kai_ray.cluster.sim.simulator import CycleResult, SimulatedCluster
from kai_ray.engine.cycle import schedule
from kai_ray.engine.plan import Plan
from kai_ray.model.objects import ClusterState
from kai_ray.model.pools import off_pool_tasks, split_by_pool
from kai_ray.model.snapshot import Problem, compile_snapshot

log = logging.getLogger(__name__)

POOL_TASK_TIMEOUT_SECONDS = 120.0
"""How long all pools' tasks together may take (the first call also starts Ray's workers)."""

In = TypeVar("In")
Out = TypeVar("Out")


class PoolRunner(Protocol):
    """Maps `work` over the pools' inputs; the answer has every pool, in name order."""

    name: str

    def run(self, work: Callable[[In], Out], inputs: dict[str, In]) -> dict[str, Out]: ...


class LocalPoolRunner:
    """Each pool in turn, in this process."""

    name = "local"

    def run(self, work: Callable[[In], Out], inputs: dict[str, In]) -> dict[str, Out]:
        return {pool: work(inputs[pool]) for pool in sorted(inputs)}


def _call(work: Callable[[In], Out], given: In) -> Out:
    return work(given)


class RayPoolRunner:
    """One Ray task per pool, all in flight at once; see the module docstring for failures.

    Ray is imported here, not at module level, so in-process pool sharding never loads it.
    """

    name = "ray"

    def __init__(
        self, address: str | None = None, timeout_seconds: float = POOL_TASK_TIMEOUT_SECONDS
    ) -> None:
        import ray

        from kai_ray.distributed.ray_executor import join_ray

        join_ray(address)
        self._remote_call: Any = ray.remote(_call)
        self.timeout_seconds = timeout_seconds
        self.fallbacks: list[str] = []
        """Pools scheduled in-process because their task failed or timed out, in order."""

    def run(self, work: Callable[[In], Out], inputs: dict[str, In]) -> dict[str, Out]:
        import ray

        pending: dict[str, Any] = {
            pool: self._remote_call.remote(work, inputs[pool]) for pool in sorted(inputs)
        }
        deadline = time.monotonic() + self.timeout_seconds
        results: dict[str, Out] = {}
        for pool, ref in pending.items():
            try:
                results[pool] = ray.get(ref, timeout=max(0.0, deadline - time.monotonic()))
            except ray.exceptions.RayError as error:
                if isinstance(error, ray.exceptions.GetTimeoutError):
                    # Still running: interrupted, not force-killed. Ray's force cancel of a running
                    # task can race with the task's own reply and abort the driver on a failed
                    # check (ray-project/ray#54798); a task that failed has nothing to cancel.
                    with contextlib.suppress(ray.exceptions.RayError, ValueError, TypeError):
                        ray.cancel(ref, force=False)
                log.warning("node pool %r: its Ray task failed (%s); scheduling it in-process", pool, error)
                self.fallbacks.append(pool)
                results[pool] = work(inputs[pool])
        return results


@dataclass(frozen=True)
class PoolCycle:
    """One pool's input to a cycle."""

    state: ClusterState
    config: SchedulerConfig


def schedule_pool(given: PoolCycle) -> Plan:
    """A whole cycle (every configured action) over one pool's sub-cluster."""
    return schedule(compile_snapshot(given.state), given.config)


def merge_plans(plans: dict[str, Plan]) -> Plan:
    """One plan from the pools' plans, concatenated in pool-name order.

    Pools share no job, task or node, so nothing collides; each list keeps its pool's
    own order, which is the order the pool's shard decided in.
    """
    merged = Plan()
    for pool in sorted(plans):
        plan = plans[pool]
        merged.binds.extend(plan.binds)
        merged.pipelined.extend(plan.pipelined)
        merged.evictions.extend(plan.evictions)
        merged.pending_reasons.update(plan.pending_reasons)
        merged.tasks.update(plan.tasks)
        merged.problems.extend(plan.problems)
        merged.started.update(plan.started)
        merged.stale_marks.update(plan.stale_marks)
    return merged


def schedule_pools(
    state: ClusterState,
    config: SchedulerConfig,
    runner: PoolRunner | None = None,
    label_key: str = NODE_POOL_LABEL,
) -> Plan:
    """One cycle of every pool's shard, merged; pods that sit outside their PodGroup's pool
    are reported as problems (`kai_ray.model.pools.off_pool_tasks`)."""
    inputs = {pool: PoolCycle(sub, config) for pool, sub in split_by_pool(state, label_key).items()}
    merged = merge_plans((runner or LocalPoolRunner()).run(schedule_pool, inputs))
    merged.problems.extend(
        Problem("Pod", off.pod, "spec.nodeName", off.describe()) for off in off_pool_tasks(state, label_key)
    )
    return merged


@dataclass(frozen=True)
class PoolSimulation:
    """One pool's input to a multi-cycle simulation."""

    state: ClusterState
    config: SchedulerConfig
    cycles: int


def simulate_pool(given: PoolSimulation) -> list[CycleResult]:
    """`cycles` cycles of one pool on the simulated cluster, its pod lifecycle played between them.

    Pools never touch each other's jobs or nodes, so a pool simulated alone for all its
    cycles goes through the very states it would go through in step with the others.
    """
    return SimulatedCluster(given.state, given.config).run(given.cycles)


def simulate_pools(
    state: ClusterState,
    config: SchedulerConfig,
    cycles: int,
    runner: PoolRunner | None = None,
    label_key: str = NODE_POOL_LABEL,
) -> dict[str, list[CycleResult]]:
    """Every pool's simulation, by pool name ("" first)."""
    inputs = {
        pool: PoolSimulation(sub, config, cycles) for pool, sub in split_by_pool(state, label_key).items()
    }
    return (runner or LocalPoolRunner()).run(simulate_pool, inputs)
