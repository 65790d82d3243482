"""The plugin contract: one base class whose hooks default to "no opinion".

A plugin overrides only the hooks it cares about; the session asks every
enabled plugin, in configured order, and combines answers the way KAI does
(§4): ordering keys are concatenated (first decisive key wins), node scores
are summed, node filters are ANDed, job checks stop at the first failure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import numpy as np

if TYPE_CHECKING:
    from kai_ray.engine.jobs import Job, OrderableJob, PodSet, SubGroupSet, Task
    from kai_ray.engine.reasons import PendingReason
    from kai_ray.engine.session import Session

OrderKey = tuple[float | str, ...]


@dataclass(frozen=True)
class NodeFilter:
    """Which node rows pass, and why the others do not, with counts ("3 fail node affinity/taints")."""

    mask: np.ndarray
    reason: str


@dataclass(frozen=True)
class NodeSubsets:
    """Node sets to try a (sub)group on, in order (KAI's SubsetNodes), and an ordering bonus per row.

    The allocator keeps the first set on which the whole (sub)group fits; `scores` (or None)
    are added to every node score of the (sub)group's tasks and of subgroups below it that
    bring none of their own.
    """

    masks: list[np.ndarray]
    scores: np.ndarray | None = None


class Plugin:
    name: ClassVar[str] = ""

    def __init__(self, session: Session, arguments: dict[str, str]) -> None:
        self.session = session
        self.arguments = arguments

    def on_session_open(self) -> None:
        """Prepare per-session state (fair shares, caches)."""

    def job_order_key(self, job: OrderableJob) -> OrderKey | None:
        """Must read only the job's spec and its pods' statuses (and the plugin's arguments): the
        key of a job whose pods stand as its spec lists them is remembered across sessions
        (`Session.standing_job_order_key`)."""
        return None

    def task_order_key(self, task: Task) -> OrderKey | None:
        """Must read only `task.spec`: the session remembers each task's key for the cycle."""
        return None

    def subgroup_order_key(self, member: SubGroupSet | PodSet) -> OrderKey | None:
        return None

    def queue_order_key(self, queue: str, job: Sequence[float]) -> OrderKey | None:
        """Sort key of a queue whose best pending job would take `job` (fairness vector: cpu,
        memory, GPUs as plain floats, as queue order asks it on every pop)."""
        return None

    def queue_order_key_at(self, row: int, job: Sequence[float]) -> OrderKey:
        """`queue_order_key` of the queue at that row of the session's `QueueBook`, as a whole key
        (a tuple, empty for None): the job queue knows queues by row and, when one plugin orders
        queues, calls this directly for every queue whose accounting changed on every pop. A
        plugin may override it to compute the key without the name."""
        part = self.queue_order_key(self.session.queues.names[row], job)
        return () if part is None else tuple(part)

    def queue_tiebreak(self, left: str, right: str) -> int | None:
        """For orders no key can express: -1 when `left` goes first, 1 when `right` does, else 0/None."""
        return None

    def pre_predicate(self, task: Task) -> str | None:
        """A reason the task fits no node at all, or None."""
        return None

    def node_filter(self, task: Task) -> NodeFilter | None:
        return None

    def node_scores(self, task: Task, rows: np.ndarray) -> np.ndarray | None:
        """Scores of the given node rows. Each row's score must depend only on that row's own
        state (never on other nodes), so cached scores stay valid while other rows change and
        node shards can score their rows independently."""
        return None

    def gpu_score(self, used_fraction: float, whole_device: bool) -> float | None:
        return None

    def job_capacity_problem(self, job: Job, tasks: list[Task]) -> PendingReason | None:
        """Why allocating these tasks would break a queue rule, or None."""
        return None

    def non_preemptible_quota_problem(self, job: Job, tasks: list[Task]) -> PendingReason | None:
        """Why a non-preemptible job may not grow past its queues' deserved quota (§13)."""
        return None

    def splits_nodes(self, job: Job) -> bool:
        """Whether `node_subsets` may have an opinion on some (sub)group of this job."""
        return False

    def node_subsets(
        self, job: Job, group: SubGroupSet | PodSet, tasks: list[Task], node_mask: np.ndarray
    ) -> NodeSubsets | PendingReason | None:
        """Where the group's `tasks` may go within `node_mask`, why nowhere, or None for no opinion."""
        return None

    def node_capacity_problem(self, task: Task, accepted_gpus: float) -> str | None:
        """Like `job_capacity_problem`, for one task with the GPU amount a node would grant."""
        return None
