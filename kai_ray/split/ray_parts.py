"""Split-cycle parts as long-lived Ray actors, each with its own replica of the cluster.

Every call has a deadline. A part whose actor died, did not answer in time, or answered from
another snapshot version than the one it was sent is computed in-process by the driver from its
own copy (the same pure function, so the plan is the same), counted in `faults`, and a dead or
stuck actor is replaced by a new one that is sent the whole snapshot on the next cycle. A cycle
therefore always completes with every part, and never with a part computed from stale state.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import time
from collections.abc import Iterator
from typing import Any

import ray

from kai_ray.api.config import SchedulerConfig
from kai_ray.distributed.ray_executor import RAY_START_TIMEOUT_SECONDS, join_ray
from kai_ray.distributed.shard_faults import ShardFault
from kai_ray.fairshare.usage import QueueUsage
from kai_ray.model.snapshot import Snapshot
from kai_ray.split.cycle import Meanwhile
from kai_ray.split.part import PartAnswer
from kai_ray.split.replica import Replica, SnapshotFeed, SplitLayout

log = logging.getLogger(__name__)

PART_TIMEOUT_SECONDS = 12.0
"""How long a part may take to answer a cycle once its actor runs: inside the 15 s leader lease."""
SYNC_TIMEOUT_SECONDS = 120.0
"""How long a replica may take to take in a snapshot (the first one is the whole cluster)."""


class RayParts:
    """`count` replica actors; `replica_class` is the seam fault tests put a faulty replica in."""

    name = "ray"

    def __init__(
        self,
        count: int,
        address: str | None = None,
        *,
        pool_label: str | None = None,
        replica_class: type[Replica] = Replica,
        timeout: float = PART_TIMEOUT_SECONDS,
    ) -> None:
        if count < 1:
            raise ValueError(f"parts must be at least 1, got {count}")
        join_ray(address)
        self.count = count
        self.timeout = timeout
        self._pool_label = pool_label
        self._remote: Any = ray.remote(num_cpus=0)(replica_class)
        self._actors: list[Any] = [self._remote.remote(pool_label) for _ in range(count)]
        self._feeds = [SnapshotFeed() for _ in range(count)]
        self._tokens = [0] * count
        self._synced = [False] * count
        """Whether each actor holds what its feed last sent: an actor that does not is not asked."""
        self._started = False
        self._local = Replica(pool_label)
        self.faults: collections.Counter[ShardFault] = collections.Counter()
        self.parts_answered = 0
        """Parts answered by their actors: tests tell a working path from a silent fallback by it."""

    def prepare(self, snapshot: Snapshot) -> int:
        calls: dict[int, Any] = {}
        for index, feed in enumerate(self._feeds):
            delta = feed.delta(snapshot)
            if delta is not None:
                calls[index] = self._actors[index].sync.remote(delta)
        for index, ref in calls.items():
            try:
                self._tokens[index] = ray.get(ref, timeout=SYNC_TIMEOUT_SECONDS)
                ray.get(self._actors[index].settle.remote(), timeout=SYNC_TIMEOUT_SECONDS)
                self._synced[index] = True
            except ray.exceptions.RayError as error:
                self._fault(index, _fault_of(error), error)
        self._local.hold(snapshot, self._feeds[0].token)
        return self._feeds[0].token

    def answers(
        self, token: int, count: int, config: SchedulerConfig, usage: QueueUsage | None, meanwhile: Meanwhile
    ) -> Iterator[PartAnswer]:
        """Each actor's answer as it comes in (`ray.wait`), then every part that faulted computed
        in-process, in part order."""
        if count != self.count:
            raise ValueError(f"{self.count} part actors cannot answer a cycle of {count} parts")
        waiting = {
            actor.answer.remote(self._tokens[index], index, count, config, usage): index
            for index, actor in enumerate(self._actors)
            if self._synced[index]
        }
        meanwhile()
        deadline = time.monotonic() + (self.timeout if self._started else RAY_START_TIMEOUT_SECONDS)
        answered: set[int] = set()
        while waiting:
            ready, _ = ray.wait(list(waiting), num_returns=1, timeout=max(0.0, deadline - time.monotonic()))
            if not ready:
                break
            index = waiting.pop(ready[0])
            answer = self._answer_of(index, ready[0], deadline)
            if answer is not None:
                answered.add(index)
                self.parts_answered += 1
                yield answer
        for index in waiting.values():
            self._fault(index, ShardFault.TIMEOUT, None)
        self._started = True
        for index in range(count):
            if index not in answered:
                yield self._local.answer(self._local.token, index, count, config, usage)

    def _answer_of(self, index: int, ref: Any, deadline: float) -> PartAnswer | None:
        """The answer `ref` holds, or None (a fault, counted) when it holds none from this version."""
        try:
            answer: PartAnswer = ray.get(ref, timeout=max(0.0, deadline - time.monotonic()))
        except ray.exceptions.RayError as error:
            self._fault(index, _fault_of(error), error)
            return None
        if answer.token != self._feeds[index].token:
            self._fault(index, ShardFault.STALE, None)
            return None
        return answer

    def layout(self, count: int) -> SplitLayout:
        return self._local.layout(count)

    def close(self) -> None:
        for actor in self._actors:
            with contextlib.suppress(ray.exceptions.RayError):
                ray.kill(actor)

    def _fault(self, index: int, fault: ShardFault, error: Exception | None) -> None:
        """Count and log one part's fault; start a new actor for a dead or stuck one. Either way
        the replica is sent the whole snapshot next time."""
        self.faults[fault] += 1
        log.warning("split part %d: %s (%s); computing it in-process", index, fault.value, error or "")
        if fault in (ShardFault.DIED, ShardFault.TIMEOUT):
            with contextlib.suppress(ray.exceptions.RayError):
                ray.kill(self._actors[index])
            self._actors[index] = self._remote.remote(self._pool_label)
            self._started = False
        self._feeds[index].forget()
        self._synced[index] = False


def _fault_of(error: Exception) -> ShardFault:
    return ShardFault.TIMEOUT if isinstance(error, ray.exceptions.GetTimeoutError) else ShardFault.DIED
