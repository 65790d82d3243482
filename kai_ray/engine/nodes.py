"""Mutable node accounting for a session: idle and releasing vectors, shared GPUs.

Follows KAI's bookkeeping (§1.4, §17): a task on a node takes its request
from Idle, or moves it to Releasing while it is being evicted, or takes it
out of Releasing when it is pipelined. A shared GPU (a "group") holds one
whole device while anything runs on it; its memory is tracked per group.
Pods the session does not schedule (`HeldPod`) are charged the same way once,
at the start, and never released.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from kai_ray.distributed import kernels
from kai_ray.engine.jobs import RequestFloats, Task, spec_facts
from kai_ray.model.objects import OCCUPYING, PIPELINED, RELEASING, HeldPod, TaskSpec, TaskStatus
from kai_ray.model.resources import CPU, EPSILON, GPU, MEMORY, PODS
from kai_ray.model.snapshot import NodeTable


@dataclass
class GpuGroup:
    """One shared physical GPU on a node and the tasks on it (task uid → MiB, status)."""

    memory: float
    members: dict[int, tuple[float, TaskStatus]] = field(default_factory=dict)

    def _mem(self, exclude: frozenset[TaskStatus] = frozenset()) -> float:
        return sum(mem for mem, status in self.members.values() if status not in exclude)

    @property
    def held_memory(self) -> float:
        """Memory that stays taken once releasing tasks are gone (running and pipelined)."""
        return self._mem(exclude=frozenset({RELEASING}))

    @property
    def idle_memory(self) -> float:
        """Memory usable right now; a device only pipelined tasks wait on has none yet."""
        if not self._has_active():
            return 0.0
        return self.memory - self._mem()

    def _has_active(self) -> bool:
        return any(s not in (RELEASING, PIPELINED) for _, s in self.members.values())

    @property
    def free_memory_after_release(self) -> float:
        return self.memory - self.held_memory

    @property
    def fully_releasing(self) -> bool:
        return bool(self.members) and all(s == RELEASING for _, s in self.members.values())

    def device_usage(self) -> tuple[float, float]:
        """(idle, releasing) whole-device deltas this group causes on its node."""
        if not self.members:
            return 0.0, 0.0
        statuses = {s for _, s in self.members.values()}
        if statuses - {RELEASING, PIPELINED}:
            return -1.0, 0.0
        if RELEASING in statuses:
            return -1.0, 0.0 if PIPELINED in statuses else 1.0
        return 0.0, -1.0


class NodeState:
    """Idle/releasing per node row, plus shared GPU groups."""

    def __init__(self, table: NodeTable, held: Sequence[HeldPod] = ()) -> None:
        self.table = table
        self.idle_rows: list[list[float]] = table.allocatable.tolist()
        self.releasing_rows: list[list[float]] = np.zeros_like(table.allocatable).tolist()
        """What each row has idle and releasing as plain floats, the state's own record: placing a
        pod changes a row and reads it several times, and a numpy call on four floats costs more
        than the arithmetic. The arrays (`idle`, `releasing`) catch up with them when read."""
        self.gpu_memory: list[float] = table.gpu_memory.tolist()
        """Each row's GPU memory as a plain float (the table's, converted once): a plan reads it
        for every placed pod, and indexing the array makes a numpy scalar each time."""
        self.groups: list[dict[str, GpuGroup]] = [{} for _ in range(len(table))]
        self._new_group_counter = [0] * len(table)
        # Held pods take negative uids, so they never collide with the session's tasks in a group.
        for offset, pod in enumerate(held):
            spec = pod.task
            if spec.node is not None and spec.status in OCCUPYING:
                row = table.index[spec.node]
                self._charge(row, spec_facts.of(spec).request_floats, spec.status, +1.0)
                if spec.is_shared_gpu:
                    self._apply_groups(-1 - offset, spec, spec.gpu_groups, spec.status, row, +1.0)
        self._idle = np.array(self.idle_rows, dtype=float).reshape(table.allocatable.shape)
        self._releasing = np.array(self.releasing_rows, dtype=float).reshape(table.allocatable.shape)
        self._read_only = _read_only(self._idle), _read_only(self._releasing)
        """Views of the two arrays that refuse writes: a write there would not reach the rows."""
        self.changed_rows: list[int] = []
        """Every row touched, in order: lets cached per-row scores know what went stale."""
        self._caught_up = 0
        """How many of `changed_rows` the arrays have caught up with."""
        self.left_behind: dict[int, int] = {}
        """Task uid → the row an evicted task moved away from, where its share stays releasing."""

    @property
    def idle(self) -> np.ndarray:
        """Per row, what is idle (read only: the rows change in `idle_rows`)."""
        self._catch_up()
        return self._read_only[0]

    @property
    def releasing(self) -> np.ndarray:
        """Per row, what releasing tasks free minus what pipelined ones wait for (read only)."""
        self._catch_up()
        return self._read_only[1]

    def _catch_up(self) -> None:
        """Copy the rows changed since the arrays were last read into them: a row's floats as
        they are, each changed row once however many pods it took."""
        changed = self.changed_rows
        if self._caught_up == len(changed):
            return
        idle, releasing = self._idle, self._releasing
        for row in set(changed[self._caught_up :]):
            idle[row] = self.idle_rows[row]
            releasing[row] = self.releasing_rows[row]
        self._caught_up = len(changed)

    def open_with(self, used: np.ndarray, releasing: np.ndarray) -> None:
        """Book what the snapshot's tasks that share no GPU hold, added up per row (`booking`):
        `used` leaves idle, `releasing` is what releasing tasks free minus what pipelined ones
        wait for.  No row is noted as changed: nothing has ranked a row yet."""
        self._catch_up()
        self._idle -= used
        self._releasing += releasing
        self.idle_rows, self.releasing_rows = self._idle.tolist(), self._releasing.tolist()

    def remove(self, task: Task) -> None:
        self.add(task, -1.0)

    def leave_behind(self, task: Task) -> None:
        """An evicted task moves to another node: what it holds stays releasing where it was.

        The pod still runs on its old node until it is gone, so, as KAI does, that node offers
        its share to pipelined pods only, never as idle, until a later cycle sees the pod go."""
        assert task.node is not None and task.status == RELEASING  # an evicted victim
        self.left_behind[task.uid] = task.node

    def take_back(self, task: Task) -> bool:
        """A task returns to releasing on the node it left behind: already booked there."""
        if task.node is None or task.status != RELEASING:
            return False
        if self.left_behind.get(task.uid) != task.node:
            return False
        del self.left_behind[task.uid]
        return True

    def add(self, task: Task, sign: float = 1.0) -> None:
        """Book what the task holds on its node; a `sign` of -1.0 takes it away (`remove`). One
        method for both, called directly: adding runs once per pod placed, and a call through
        another cost as much as the pod's charge."""
        if task.node is None or task.status not in OCCUPYING:
            return
        row = task.node
        self.changed_rows.append(row)
        self._charge(row, task.facts.request_floats, task.status, sign)
        if task.is_shared_gpu:
            self._apply_groups(task.uid, task.spec, task.groups, task.status, row, sign)

    def _charge(self, row: int, request: RequestFloats, status: TaskStatus, sign: float) -> None:
        # Float by float, in plain Python: the very floats numpy's `idle[row] -= sign * request`
        # gives (one IEEE operation per column either way), without a numpy call per pod placed.
        # Adding takes the request itself (the same floats as 1.0 times it).
        cpu, memory, gpus, pods = request if sign == 1.0 else [sign * wanted for wanted in request]
        if status is RELEASING:
            _give(self.releasing_rows[row], cpu, memory, gpus, pods)
            _take(self.idle_rows[row], cpu, memory, gpus, pods)
        elif status is PIPELINED:
            _take(self.releasing_rows[row], cpu, memory, gpus, pods)
        else:
            # `_take` written out: the branch of every pod allocated.
            idle = self.idle_rows[row]
            idle[CPU] -= cpu
            idle[MEMORY] -= memory
            idle[GPU] -= gpus
            idle[PODS] -= pods

    def _apply_groups(
        self,
        uid: int,
        spec: TaskSpec,
        groups: tuple[str, ...],
        status: TaskStatus,
        row: int,
        sign: float,
    ) -> None:
        node_memory = float(self.table.gpu_memory[row])
        mem = spec.gpu_memory_per_device(node_memory)
        for group_id in groups:
            group = self.groups[row].setdefault(group_id, GpuGroup(node_memory))
            before = group.device_usage()
            if sign > 0:
                group.members[uid] = (mem, status)
            else:
                group.members.pop(uid, None)
            after = group.device_usage()
            self.idle_rows[row][GPU] += after[0] - before[0]
            self.releasing_rows[row][GPU] += after[1] - before[1]
            if not group.members:
                del self.groups[row][group_id]

    def new_group_id(self, row: int) -> str:
        """A group id unused on this node; deterministic so plans repeat exactly."""
        while True:
            self._new_group_counter[row] += 1
            candidate = f"{self.table.names[row]}-gpu-{self._new_group_counter[row]}"
            if candidate not in self.groups[row]:
                return candidate

    def fitting_groups(
        self, row: int, memory: float, *, idle_only: bool = False
    ) -> list[tuple[str, GpuGroup]]:
        """Shared groups in use, not fully releasing, with room for `memory` MiB."""
        found = []
        for group_id in sorted(self.groups[row]):
            group = self.groups[row][group_id]
            if group.fully_releasing:
                continue
            free = group.idle_memory if idle_only else group.free_memory_after_release
            if free + 1e-9 >= memory:
                found.append((group_id, group))
        return found

    def rows_with_groups(self) -> list[int]:
        return [row for row, groups in enumerate(self.groups) if groups]

    def fits(self, task: Task, rows: np.ndarray, *, idle_only: bool) -> np.ndarray:
        """Which of `rows` can hold the task now (idle only) or once releases finish."""
        available = self.idle[rows] if idle_only else self.idle[rows] + self.releasing[rows]
        fits = kernels.fits(task.request, available)
        if not task.is_shared_gpu:
            return fits
        devices = np.floor(available[:, GPU] + EPSILON)
        for position, row in enumerate(rows.tolist()):
            if self.groups[row]:
                memory = task.gpu_memory_per_device(float(self.table.gpu_memory[row]))
                devices[position] += len(self.fitting_groups(row, memory, idle_only=idle_only))
        shared_fit: np.ndarray = fits & (devices >= task.spec.gpu_devices)
        return shared_fit


def _read_only(array: np.ndarray) -> np.ndarray:
    view = array.view()
    view.flags.writeable = False
    return view


def _give(row: list[float], cpu: float, memory: float, gpus: float, pods: float) -> None:
    row[CPU] += cpu
    row[MEMORY] += memory
    row[GPU] += gpus
    row[PODS] += pods


def _take(row: list[float], cpu: float, memory: float, gpus: float, pods: float) -> None:
    row[CPU] -= cpu
    row[MEMORY] -= memory
    row[GPU] -= gpus
    row[PODS] -= pods
