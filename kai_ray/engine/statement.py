"""Statements: try placements and evictions, then keep them or undo them exactly.

Every operation is recorded as (task, state before, state after); undoing
replays the before-state through the same session primitive, so node
vectors, GPU groups and queue accounting come back bit for bit (§3).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kai_ray.model.objects import ALLOCATED, PIPELINED, RELEASING, TaskStatus

if TYPE_CHECKING:
    from kai_ray.engine.jobs import Task
    from kai_ray.engine.session import Session


Placement = tuple[TaskStatus, int | None, tuple[str, ...]]
"""Where a task stands: its status, node row (None for none) and GPU groups.

Plain tuples, not named ones: two are made per pod placed, and building a named tuple (a
Python-level ``__new__`` plus ``tuple.__new__``'s subclass path) cost several times what the
tuple display costs; together with `Operation` it was a twentieth of a small cluster's cycle.
Readers unpack them."""

Operation = tuple["Task", Placement, str | None]
"""One move a statement made: the task, where it stood before, and the action its placement
was credited to before (`Session.placed_by`): moving it back restores that credit, so a
simulated scenario never renames who placed a task. A plain tuple, as `Placement` is."""


class Statement:
    def __init__(self, session: Session) -> None:
        self.session = session
        self.operations: list[Operation] = []

    def _record(self, task: Task, after: Placement) -> None:
        before = (task.status, task.node, task.groups)
        placed_by = self.session.placed_by.get(task.uid)
        self.session.move_task(task, after)
        self.operations.append((task, before, placed_by))

    def allocate(self, task: Task, node: int, groups: tuple[str, ...] = ()) -> None:
        self._record(task, (ALLOCATED, node, groups))

    def pipeline(self, task: Task, node: int, groups: tuple[str, ...] = ()) -> None:
        """Pipelining a task this statement evicted back to exactly where it was un-evicts it."""
        evicted_here = task.status == RELEASING and any(op[0] is task for op in self.operations)
        if evicted_here and node == task.node and (not task.is_shared_gpu or groups == task.groups):
            self.restore(task)
            return
        self._record(task, (PIPELINED, node, groups))

    def evict(self, task: Task) -> None:
        self._record(task, (RELEASING, task.node, task.groups))

    def restore(self, task: Task) -> None:
        """Put a task back where it was when this statement first touched it (un-evict)."""
        for moved, before, placed_by in self.operations:
            if moved is task:
                self._record(task, before)
                self.session.credit_placement(task, placed_by)
                return

    def checkpoint(self) -> int:
        return len(self.operations)

    def rollback(self, checkpoint: int) -> None:
        while len(self.operations) > checkpoint:
            task, before, placed_by = self.operations.pop()
            self.session.move_task(task, before)
            self.session.credit_placement(task, placed_by)

    def discard(self) -> None:
        self.rollback(0)

    def convert_allocated_to_pipelined(self, tasks: list[Task]) -> None:
        """Gang pipelining (§8.4): nothing of a gang binds while part of it waits."""
        for task in tasks:
            if task.status == ALLOCATED and task.node is not None:
                self.pipeline(task, task.node, task.groups)

    def commit(self) -> None:
        """Keep what was done: nothing is left to undo."""
        self.operations = []
