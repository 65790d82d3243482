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
from kai_ray.engine.jobs import Task, task_request
from kai_ray.model.objects import OCCUPYING, PIPELINED, RELEASING, HeldPod, TaskSpec, TaskStatus
from kai_ray.model.resources import EPSILON, GPU
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
        self.idle = table.allocatable.copy()
        self.releasing = np.zeros_like(self.idle)
        self.idle_rows: list[np.ndarray] = list(self.idle)
        self.releasing_rows: list[np.ndarray] = list(self.releasing)
        """Each row of `idle` and `releasing` as a view made once (the arrays change only in
        place): placing a pod reads or changes a row several times, and indexing the array
        makes a new view each time."""
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
                self._charge(row, task_request(spec), spec.status, +1.0)
                if spec.is_shared_gpu:
                    self._apply_groups(-1 - offset, spec, spec.gpu_groups, spec.status, row, +1.0)
        self.changed_rows: list[int] = []
        """Every row touched, in order: lets cached per-row scores know what went stale."""
        self.left_behind: dict[int, int] = {}
        """Task uid → the row an evicted task moved away from, where its share stays releasing."""

    def add(self, task: Task) -> None:
        self._apply(task, +1.0)

    def open_with(self, used: np.ndarray, releasing: np.ndarray) -> None:
        """Book what the snapshot's tasks that share no GPU hold, added up per row (`booking`):
        `used` leaves idle, `releasing` is what releasing tasks free minus what pipelined ones
        wait for.  No row is noted as changed: nothing has ranked a row yet."""
        self.idle -= used
        self.releasing += releasing

    def remove(self, task: Task) -> None:
        self._apply(task, -1.0)

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

    def _apply(self, task: Task, sign: float) -> None:
        if task.node is None or task.status not in OCCUPYING:
            return
        row = task.node
        self.changed_rows.append(row)
        self._charge(row, task.request, task.status, sign)
        if task.is_shared_gpu:
            self._apply_groups(task.uid, task.spec, task.groups, task.status, row, sign)

    def _charge(self, row: int, request: np.ndarray, status: TaskStatus, sign: float) -> None:
        # Adding takes the request itself (the same floats as 1.0 times it), without a new array;
        # a row changes in place through its view: the same ufunc as `self.idle[row] -= delta`,
        # without that statement's write of the row back onto itself. This runs for every pod placed.
        delta = request if sign == 1.0 else sign * request
        if status == RELEASING:
            releasing, idle = self.releasing_rows[row], self.idle_rows[row]
            releasing += delta
            idle -= delta
        elif status == PIPELINED:
            releasing = self.releasing_rows[row]
            releasing -= delta
        else:
            idle = self.idle_rows[row]
            idle -= delta

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
            self.idle[row, GPU] += after[0] - before[0]
            self.releasing[row, GPU] += after[1] - before[1]
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
