"""Split-cycle replicas that misbehave in one specific way, for the split part fault tests.

Ray ships these classes to its worker processes by value (see `ship_by_value`): the workers
cannot import this test module.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import sys
import threading

import ray
import ray.cloudpickle

from kai_ray.api.config import SchedulerConfig
from kai_ray.fairshare.usage import QueueUsage
from kai_ray.split.part import PartAnswer
from kai_ray.split.replica import Replica, SnapshotDelta


def ship_by_value() -> None:
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])


class FailsOnSecondAnswer(Replica):
    """Part 0's replica answers its first cycle, then fails its second the way `fail` says; a
    replacement actor answers its own first cycle again. The other parts' replicas are sound."""

    def __init__(self, pool_label: str | None) -> None:
        super().__init__(pool_label)
        self.answered = 0

    def fail(self) -> None:
        raise NotImplementedError

    def answer(
        self, token: int, part: int, count: int, config: SchedulerConfig, usage: QueueUsage | None
    ) -> PartAnswer:
        self.answered += 1
        if part == 0 and self.answered == 2:
            self.fail()
        return super().answer(token, part, count, config, usage)


class CrashingReplica(FailsOnSecondAnswer):
    """Its process ends while it computes: a part killed in the middle of a cycle."""

    def fail(self) -> None:
        os._exit(1)


class HangingReplica(FailsOnSecondAnswer):
    """Never answers: a part stuck in the middle of a cycle (until its actor is killed)."""

    def fail(self) -> None:
        threading.Event().wait()


class WrongTokenReplica(Replica):
    """Part 0 computes its answer but names a snapshot version it was never sent."""

    def answer(
        self, token: int, part: int, count: int, config: SchedulerConfig, usage: QueueUsage | None
    ) -> PartAnswer:
        found = super().answer(token, part, count, config, usage)
        return dataclasses.replace(found, token=found.token + 1) if part == 0 else found


class DeafReplica(Replica):
    """Takes in a snapshot sent whole (its first, or a resend after a fault) and ignores every
    delta naming jobs by position, yet reports the delta's version as taken: it then answers from
    the snapshot it still holds."""

    def sync(self, delta: SnapshotDelta) -> int:
        if all(not isinstance(job, int) for job in delta.jobs):
            return super().sync(delta)
        return delta.token


class SyncsOnceReplica(Replica):
    """Takes in its first snapshot, and its process ends on the second it is sent."""

    def __init__(self, pool_label: str | None) -> None:
        super().__init__(pool_label)
        self.synced = 0

    def sync(self, delta: SnapshotDelta) -> int:
        self.synced += 1
        if self.synced == 2:
            os._exit(1)
        return super().sync(delta)


class MisaddressedReplica(Replica):
    """Part 0's actor answers, with the right version, part 1's cycle instead of its own: every
    check of versions passes, only the parts' answers together show it (part 1 answered twice,
    part 0 never). Answers that only swap the parts around are each whole for the part they name,
    and are taken as theirs."""

    def answer(
        self, token: int, part: int, count: int, config: SchedulerConfig, usage: QueueUsage | None
    ) -> PartAnswer:
        return super().answer(token, 1 if part == 0 else part, count, config, usage)


GATE = "kai-ray-test-split-gate"
GATE_TIMEOUT_SECONDS = 30.0


@ray.remote(num_cpus=0)
class Gate:
    """Opened once; every wait returns from then on."""

    def __init__(self) -> None:
        self._opened = asyncio.Event()

    async def open(self) -> None:
        self._opened.set()

    async def wait(self) -> bool:
        await self._opened.wait()
        return True


class GatedReplica(Replica):
    """Answers only once the `GATE` actor is open. Not a fault: the test opens the gate from the
    coordinator's groundwork, so a runner that waited for the answers before doing that work
    would time every part out."""

    def answer(
        self, token: int, part: int, count: int, config: SchedulerConfig, usage: QueueUsage | None
    ) -> PartAnswer:
        ray.get(ray.get_actor(GATE).wait.remote(), timeout=GATE_TIMEOUT_SECONDS)
        return super().answer(token, part, count, config, usage)


class LaterPartsGatedReplica(GatedReplica):
    """Part 0 answers at once, the others once the `GATE` actor is open: the test opens it when
    the coordinator has taken part 0's answer in, so a runner that held the answers back until
    every part had answered would time the later parts out."""

    def answer(
        self, token: int, part: int, count: int, config: SchedulerConfig, usage: QueueUsage | None
    ) -> PartAnswer:
        if part == 0:
            return Replica.answer(self, token, part, count, config, usage)
        return super().answer(token, part, count, config, usage)
