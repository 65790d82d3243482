"""A scheduling session: the mutable world one cycle works on.

The session owns the state every action shares (tasks, node accounting,
queue accounting) and the single primitive that changes it, `move_task`.
Plugins hold only their own state; the session asks them through the hooks
of `Plugin` and combines their answers.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Callable, Iterable, Iterator, Sequence

import numpy as np

from kai_ray.api.config import SchedulerConfig
from kai_ray.distributed.executor import Executor, LocalExecutor
from kai_ray.engine.constraints import PodConstraints, needs_pod_constraints
from kai_ray.engine.job_pool import JobPool
from kai_ray.engine.jobs import Job, OrderableJob, PodSet, SubGroupSet, Task
from kai_ray.engine.node_finder import NodeFinder, ShapeKey
from kai_ray.engine.nodes import NodeState
from kai_ray.engine.part_basis import PartBasis
from kai_ray.engine.plugins.base import OrderKey, Plugin
from kai_ray.engine.plugins.hooks import HookLists
from kai_ray.engine.plugins.registry import plugin_class
from kai_ray.engine.queues import Charge, QueueBook
from kai_ray.engine.reasons import EvictionReason, NodeRefusal, PendingReason, StaleMark, main_cause
from kai_ray.engine.requests import (
    REQUEST_BYTES,
    FairnessFloats,
    cluster_fairness_totals,
    gpu_memory_bounds,
    lone_request,
    lone_request_floats,
    summed_request,
    whole_gpu_charge,
)
from kai_ray.engine.statement import Placement
from kai_ray.fairshare.usage import QueueUsage
from kai_ray.model.objects import (
    ALLOCATED,
    PENDING,
    PIPELINED,
    QUEUE_CHARGING,
    RELEASING,
    TaskStatus,
)
from kai_ray.model.resources import GPU
from kai_ray.model.snapshot import Snapshot

log = logging.getLogger(__name__)


_JOB_ORDER_SIGNATURES: dict[object, object] = {}
"""Each signature of job-ordering plugins seen, itself (`Session._job_order_signature`): a few
per process, one per scheduler configuration."""


class Session:
    def __init__(
        self,
        snapshot: Snapshot,
        config: SchedulerConfig,
        executor: Executor | None = None,
        pool: JobPool | None = None,
        usage: QueueUsage | None = None,
        basis: PartBasis | None = None,
    ) -> None:
        self.snapshot = snapshot
        self.basis = basis
        """The rest of the cluster when this session schedules one part of it (`PartBasis`)."""
        self.config = config
        self.executor: Executor = executor or LocalExecutor()
        self.now = snapshot.now
        self.nodes = NodeState(snapshot.nodes, snapshot.held)
        self._all_rows = np.arange(len(snapshot.nodes))
        self.queues = QueueBook(snapshot, usage)
        self.jobs: list[Job] = []
        self._reasons: dict[str, dict[str, PendingReason]] = {}
        self.current_action = ""
        self.eviction_reasons: dict[int, EvictionReason] = {}
        self.action_seconds: dict[str, float] = {}
        """How long each action took, for metrics; never read by a decision."""
        self.placed_by: dict[int, str] = {}
        """Task uid → the action that placed it (bound or pipelined) this cycle."""
        self.stale_since: dict[str, float] = {}
        self.stale_marks: dict[str, StaleMark] = {}
        """Job key → when it fell below its minimum, or None when it no longer is, for the jobs
        whose stale mark this cycle changed (`stale_gang_eviction`)."""
        self._charges: dict[int, Charge] = {}
        """Task uid → what it charges its queue, for tasks placed in this session."""
        self._charged_at_open: frozenset[int] = frozenset()
        """Tasks the snapshot's placements charge (computed again when one moves, not stored)."""
        self._discharged: set[int] = set()
        """Those of them that moved since: their charge left with them."""
        self._queue_keys: dict[str, dict[bytes, tuple[int, OrderKey]]] = {}
        """Queue → request bytes → (the queue's version, its order key then): see `queue_order_key`."""
        self._task_keys: dict[int, OrderKey] = {}
        self._tiebreaks: dict[tuple[str, str], int] = {}
        self.hooked: dict[str, list[Plugin]] = HookLists(self)
        """Hook name → `plugins_with(hook)`, as a mapping: the per-pod path reads it by subscript,
        without a method call (it asks several hooks per job and per pod)."""
        self.job_move_counts: dict[Job, int] = {}
        """Job → how many times a task of it moved this session, for the jobs that moved: what a
        job's remembered gang tasks depend on changed. Read as a mapping, without a method call:
        gang collection asks it twice per job placed."""
        self.placed_at_open: dict[int, tuple[TaskStatus, int | None]] = {}
        """Task uid → (status, node row) when the session opened, for each task that moved."""
        self._pending: dict[Job, int] = {}
        """Job → how many of its tasks are pending, for the jobs that have one: what most actions
        start from, without scanning every job."""
        self._position: dict[Job, int] = {}
        self.gang_tasks: dict[Job, tuple[int, list[Task]]] = {}
        """Job → (its `job_move_counts` then, the tasks `gang.tasks_to_allocate` found): see there."""
        self.simulating = False
        self.no_fit_explanations: dict[ShapeKey, tuple[int, str, tuple[NodeRefusal, ...]]] = {}
        """Pod shape → (`nodes.changed_rows` length then, why no node fits, its refusals): while
        no node changed, a pod alike to one that found no node is refused for the same reasons,
        and a burst of 20,000 alike pods was explained one by one (issue 35)."""
        self._constraints: PodConstraints | None = None
        """The pod index and its rules, once a placement asked (`pod_constraints`)."""
        self._constraints_known = False
        self._in_session = False
        self._plugins_open = False
        self.min_gpu_memory, self.max_gpu_memory = (
            gpu_memory_bounds(snapshot.nodes)
            if basis is None
            else (basis.min_gpu_memory, basis.max_gpu_memory)
        )
        self._build_jobs(pool)
        self.plugins = self._build_plugins()
        self._in_session = True
        for plugin in self.plugins:
            plugin.on_session_open()
        self._plugins_open = True

    # ------------------------------------------------------------------ set-up
    def _build_jobs(self, pool: JobPool | None) -> None:
        """The session's jobs (from `pool` when given: see `JobPool`), with what the snapshot's
        placements hold booked on nodes and queues.

        Booked as sums per node and queue row rather than one numpy call per task, which was
        most of a session's opening with tens of thousands of running pods: each task counts as
        `move_task`'s booking and `add_request` would count it, from the job's `JobBooking`,
        which a kept job brings along; the pool turns the last session's sums into this one's
        with the jobs that came and went whenever that gives the same floats
        (`booking.reopen_jobs`).
        """
        pool = pool or JobPool()
        self.jobs = pool.jobs_for(self.snapshot.jobs, self.snapshot.nodes)
        opening = pool.opening(self.jobs, self.snapshot.queues, self.min_gpu_memory, self.queues.chains)
        for task in opening.shared():
            self.nodes.add(task)  # its GPU groups are booked one by one
        self.nodes.open_with(opening.sums.used, opening.sums.releasing)
        self.queues.open_with(opening.sums)
        if self.basis is not None:
            self.queues.add_outside(self.basis)
        self._charged_at_open = opening.charged
        self._pending = dict(opening.pending)
        self._position = opening.positions

    def _build_plugins(self) -> list[Plugin]:
        plugins = []
        for spec in self.config.plugins:
            cls = plugin_class(spec.name)
            if cls is None:
                log.warning("unknown plugin %r skipped", spec.name)
                continue
            if cls is Plugin:
                continue
            plugins.append(cls(self, dict(spec.arguments)))
        return plugins

    def plugins_with(self, hook: str) -> list[Plugin]:
        """The enabled plugins, in configured order, whose class overrides `hook`.

        The others answer None (or no score) by contract (`Plugin`), so asking only these gives
        the same combined answer; the placement path asks several hooks per pod, and most of
        the fourteen default plugins implement one or two.
        """
        return self.hooked[hook]

    def has_plugin(self, name: str) -> bool:
        return any(p.name == name for p in self.plugins)

    # ------------------------------------------------------------------ the one primitive
    def move_task(self, task: Task, placement: Placement) -> None:
        self.placed_at_open.setdefault(task.uid, (task.status, task.node))
        status, node, groups = placement
        if task.node is not None:
            # A pending task holds nothing on a node and charges no queue (nothing to remove):
            # what every pod placed moves from.
            moves_away = (
                task.status is RELEASING
                and status is PIPELINED
                and node != task.node
                and task.uid not in self.nodes.left_behind
            )
            self._remove(task, task.node, leave_behind=moves_away)
        was_pending = task.status is PENDING
        task.status, task.node, task.groups = status, node, groups
        job = task.job
        # Booked where it now stands, in place (one call fewer per pod placed). Only a releasing
        # task can be taken back (`NodeState.take_back`): asked first, as for every pod placed
        # the answer is no.
        if status is not RELEASING or not self.nodes.take_back(task):
            self.nodes.add(task)
        # Queue-charging statuses asked first, without a call: the answer for every pod allocated.
        if node is not None and (status in QUEUE_CHARGING or self._pipelining_charges(task)):
            if task.is_shared_gpu:
                charge = self.placed_charge(task, node)
            else:
                # `whole_gpu_charge`, kept with the spec's facts after the first ask.
                facts = task.facts
                known = facts.queue_charge
                if known is None:
                    known = facts.queue_charge = whole_gpu_charge(task.spec)
                charge = known
            self._charges[task.uid] = charge
            job_spec = job.spec  # the spec's fields, not `Job`'s properties: once per pod placed
            self.queues.charge(job_spec.queue, charge, not job_spec.preemptible)
        self.job_move_counts[job] = self.job_move_counts.get(job, 0) + 1
        pending = self._pending.get(job, 0) - was_pending + (status is PENDING)
        if pending:
            self._pending[job] = pending
        else:
            self._pending.pop(job, None)
        if status is ALLOCATED or status is PIPELINED:
            self.placed_by[task.uid] = self.current_action
        if self._constraints is not None:
            self._constraints.moved(task)

    @property
    def pod_constraints(self) -> PodConstraints | None:
        """The rules that read what other pods hold, None when no pod of the snapshot has one.
        Built from the session's state on the first ask and kept current by `move_task` after."""
        if not self._constraints_known:
            self._constraints_known = True
            if needs_pod_constraints(self):
                self._constraints = PodConstraints(self)
        return self._constraints

    def credit_placement(self, task: Task, action: str | None) -> None:
        """Credit the task's placement to `action` (None: to no action of this session)."""
        if action is None:
            self.placed_by.pop(task.uid, None)
        else:
            self.placed_by[task.uid] = action

    def has_pending_tasks(self, job: Job) -> bool:
        """Whether a task of the job is pending: the count `move_task` keeps (as
        `jobs_with_pending_tasks` reads it), without a pass over the job's tasks; asked after
        every job the allocate action places."""
        return job in self._pending

    def jobs_with_pending_tasks(self) -> list[Job]:
        """In session order, as a scan of `jobs` would find them."""
        return sorted(self._pending, key=self._position.__getitem__)

    def moved_jobs(self) -> set[Job]:
        """Jobs a task of which moved this session (even if a rollback put it back)."""
        return set(self.job_move_counts)

    def _remove(self, task: Task, node: int, *, leave_behind: bool) -> None:
        """`node`: the task's row (a task on none holds nothing)."""
        if leave_behind:
            self.nodes.leave_behind(task)
        else:
            self.nodes.remove(task)
        uid = task.uid
        charge = self._charges.pop(uid, None)
        at_open = uid in self._charged_at_open and uid not in self._discharged
        if charge is None and at_open:
            # Booked at open, never moved since: charged where it still is.
            self._discharged.add(uid)
            charge = self.placed_charge(task, node)
        if charge is not None:
            self.queues.charge(task.job.queue, charge, not task.job.spec.preemptible, sign=-1.0)

    def _pipelining_charges(self, task: Task) -> bool:
        """Whether a task in a status that charges no queue by itself (`QUEUE_CHARGING`) charges it
        by being pipelined: pipelining charges the queue in-session; a pod already pipelined in
        the snapshot does not."""
        if task.status != PIPELINED or not self._in_session:
            return False
        spec = task.spec
        as_in_snapshot = spec.status == PIPELINED and task.node == self.snapshot.nodes.index.get(
            spec.node or ""
        )
        return not as_in_snapshot

    # ------------------------------------------------------------------ resource views
    @functools.cached_property
    def _fairness_totals(self) -> np.ndarray:
        return cluster_fairness_totals(self.snapshot) if self.basis is None else self.basis.totals

    def fairness_totals(self) -> np.ndarray:
        """Cluster capacity queues divide (§6.1): allocatable of the ready nodes, less what
        other schedulers' pods hold on them."""
        return self._fairness_totals

    def placed_fairness(self, task: Task, node: int) -> np.ndarray:
        return np.array(self.placed_charge(task, node))

    def placed_charge(self, task: Task, node: int) -> Charge:
        """What the task on `node` charges its queue, as the floats of `placed_fairness`'s array:
        the queue book keeps its rows in plain floats."""
        spec = task.spec
        gpus = spec.accepted_gpus(float(self.snapshot.nodes.gpu_memory[node]))
        return float(spec.cpu_millis), float(spec.memory), float(gpus)

    def fairness_request(self, tasks: Sequence[Task], gpu_memory: float) -> np.ndarray:
        """What the tasks ask of their queue, with shared GPUs counted on that GPU memory.

        A lone task that shares no GPU (the next attempt of most jobs, asked once per pod placed)
        asks the same on any GPU memory: its request is made once per spec (read-only)."""
        if len(tasks) == 1:
            request = lone_request.of(tasks[0].spec)
            if request is not None:
                return request
        return np.array(summed_request(tasks, gpu_memory))

    def fairness_request_floats(self, tasks: Sequence[Task], gpu_memory: float) -> FairnessFloats:
        """`fairness_request` as floats with its array's bytes, without the array: what queue
        order reads (the floats) and keys its cache by (the bytes), asked once per pod placed.
        A lone task that shares no GPU has them made once per spec, as its array is."""
        if len(tasks) == 1 and not tasks[0].is_shared_gpu:
            # `lone_request_floats` (None only for a spec that shares a GPU), kept with the
            # spec's facts after the first ask.
            facts = tasks[0].facts
            request = facts.lone_request
            if request is None:
                request = facts.lone_request = lone_request_floats(tasks[0].spec)
            if request is not None:
                return request
        floats = summed_request(tasks, gpu_memory)
        return floats, REQUEST_BYTES.pack(*floats)

    def free_gpus(self) -> np.ndarray:
        """Whole GPUs per node that are idle or on their way to being idle."""
        free: np.ndarray = self.nodes.idle[:, GPU] + self.nodes.releasing[:, GPU]
        return free

    def all_rows(self) -> np.ndarray:
        return self._all_rows

    def fits_idle(self, task: Task, rows: np.ndarray | None = None) -> np.ndarray:
        """Rows where the task could start right now, without waiting for releases."""
        return self.nodes.fits(task, self._all_rows if rows is None else rows, idle_only=True)

    def fits_with_releasing(self, task: Task, rows: np.ndarray | None = None) -> np.ndarray:
        return self.nodes.fits(task, self._all_rows if rows is None else rows, idle_only=False)

    # ------------------------------------------------------------------ ordering
    def job_order_key(self, job: OrderableJob) -> OrderKey:
        key: list[float | str] = []
        for plugin in self.hooked["job_order_key"]:
            part = plugin.job_order_key(job)
            if part is not None:
                key.extend(part)
        return (*key, job.spec.created, job.spec.key)

    def standing_job_order_key(self, job: Job) -> OrderKey:
        """`job_order_key`, remembered per spec (`JobFacts`) for a job none of whose tasks moved
        this session: its pods then stand as its spec lists them, and ordering plugins read only
        the spec and its pods' statuses (`Plugin.job_order_key`), so the key is the one any
        session with the same ordering plugins computes. Every action that queues jobs orders
        all of them, and most pending jobs wait, unchanged, through many cycles."""
        if job in self.job_move_counts:
            return self.job_order_key(job)
        facts = job.facts
        known = facts.standing_order_key
        signature = self._job_order_signature
        if known is not None and known[0] is signature:
            return known[1]
        key = self.job_order_key(job)
        facts.standing_order_key = (signature, key)
        return key

    @functools.cached_property
    def _job_order_signature(self) -> object:
        """The plugins that order jobs, by class and arguments, as one object per distinct
        signature (`_JOB_ORDER_SIGNATURES`), so a remembered key is matched by identity."""
        signature = tuple(
            (type(plugin), tuple(sorted(plugin.arguments.items()))) for plugin in self.hooked["job_order_key"]
        )
        return _JOB_ORDER_SIGNATURES.setdefault(signature, signature)

    def task_order_key(self, task: Task) -> OrderKey:
        """Remembered per task: it reads only the task's spec (`Plugin.task_order_key`), and gang
        collection sorts the same pending tasks many times per action."""
        cached = self._task_keys.get(task.uid)
        if cached is not None:
            return cached
        key: list[float | str] = []
        for plugin in self.plugins_with("task_order_key"):
            part = plugin.task_order_key(task)
            if part is not None:
                key.extend(part)
        order = (*key, task.spec.created, task.name)
        self._task_keys[task.uid] = order
        return order

    def sorted_tasks(self, tasks: Iterable[Task]) -> list[Task]:
        return sorted(tasks, key=self.task_order_key)

    def sorted_members(self, node: SubGroupSet) -> list[SubGroupSet | PodSet]:
        """Ordered by the plugins' subgroup keys; a lone member (most jobs) needs no keys."""
        members = node.members
        if len(members) < 2:
            return members

        def key(member: SubGroupSet | PodSet) -> OrderKey:
            parts: list[float | str] = []
            for plugin in self.plugins_with("subgroup_order_key"):
                part = plugin.subgroup_order_key(member)
                if part is not None:
                    parts.extend(part)
            return (*parts, member.name)

        return sorted(members, key=key)

    def queue_order_key(self, queue: str, job: Sequence[float], job_bytes: bytes) -> OrderKey:
        """Cached until the queue's accounting changes or the job vector differs. `job`: the
        job's fairness vector as floats; `job_bytes`: its array's bytes (what the cache keys it
        by; the job queue keeps them with each request, `fairness_request_floats`).

        Only the key of a request's latest version is kept: versions only grow, so an older one
        is never asked again, and replacing it keeps the cache from growing with every charge."""
        book = self.queues
        row = book.index[queue]
        version = book.versions[row]
        by_request = self._queue_keys.get(queue)
        if by_request is None:
            by_request = self._queue_keys[queue] = {}
        known = by_request.get(job_bytes)
        if known is not None and known[0] == version:
            return known[1]
        key = self.queue_key_at(row, job)
        by_request[job_bytes] = (version, key)
        return key

    @functools.cached_property
    def queue_key_at(self) -> Callable[[int, Sequence[float]], OrderKey]:
        """`queue_order_key` computed afresh (neither looked up nor kept), by the queue's row in
        the `QueueBook`: for a caller that knows the cache cannot hold it. Where one plugin
        orders queues (the default set), its own `Plugin.queue_order_key_at`, bound: the job
        queue calls it for every queue whose accounting changed on every pop (see
        `JobQueue._best_among`), and the session's dispatch and the name's lookup were a fifth of a
        key. Made on first use, after the plugins are open."""
        plugins = self.hooked["queue_order_key"]
        if len(plugins) == 1:
            return plugins[0].queue_order_key_at
        return self._joined_queue_order_key_at

    def _joined_queue_order_key_at(self, row: int, job: Sequence[float]) -> OrderKey:
        """The plugins' keys concatenated in plugin order (empty where none orders queues)."""
        key: list[float | str] = []
        for plugin in self.hooked["queue_order_key"]:
            key.extend(plugin.queue_order_key_at(row, job))
        return tuple(key)

    def queue_tiebreak(self, left: str, right: str) -> int:
        """Plugins' partial orders, then the older queue first (never 0 for distinct queues).

        Remembered for the session once it is open: the plugins' orders read only what opening
        settled (entitlements), and the job queue asks again on every pop."""
        pair = (left, right)
        verdict = self._tiebreaks.get(pair)
        if verdict is None:
            verdict = self._queue_tiebreak(left, right)
            if self._plugins_open:
                self._tiebreaks[pair] = verdict
        return verdict

    def _queue_tiebreak(self, left: str, right: str) -> int:
        """Asks only the plugins that order queues partially (`hooked`): the others say None,
        and a call of each was most of a verdict (a session asks a few, each pop's first ties)."""
        for plugin in self.hooked["queue_tiebreak"]:
            verdict = plugin.queue_tiebreak(left, right)
            if verdict:
                return verdict
        lspec, rspec = self.snapshot.queues[left], self.snapshot.queues[right]
        return -1 if (lspec.created, lspec.name) < (rspec.created, rspec.name) else 1

    @functools.cached_property
    def node_finder(self) -> NodeFinder:
        """Built on first use, after the plugins are open (it reads which ones score nodes)."""
        return NodeFinder(self)

    @functools.cached_property
    def predicates_enabled(self) -> bool:
        return self.has_plugin("predicates")

    @functools.cached_property
    def _preemptible_positions(self) -> dict[str, dict[int, list[int]]]:
        """Queue → priority → positions in `jobs` of its preemptible jobs.  Jobs never change
        queue, priority or preemptibility within a session, so this is built once."""
        by_queue: dict[str, dict[int, list[int]]] = {}
        for position, job in enumerate(self.jobs):
            if job.spec.preemptible:
                by_queue.setdefault(job.queue, {}).setdefault(job.spec.priority, []).append(position)
        return by_queue

    @functools.cached_property
    def lowest_preemptible_priority(self) -> dict[str, int]:
        """Queue → the lowest priority among its preemptible jobs, for the queues that have one:
        whether a victim search could find anyone at all, asked before ordering every pending job."""
        return {queue: min(by_priority) for queue, by_priority in self._preemptible_positions.items()}

    def preemptible_jobs(
        self, *, in_queue: str | None = None, below_priority: int | None = None
    ) -> list[Job]:
        """Preemptible jobs, in session order, optionally only one queue's and only those of a
        priority strictly below `below_priority`.

        Why: a victim search used to test every job of the cluster for every pending job, which
        is pending × jobs calls; the victim rules of every action start with "preemptible" (and
        preempt's with "same queue, lower priority"), so the search can start from this smaller
        set and decide exactly as before.
        """
        queues = (
            [self._preemptible_positions.get(in_queue, {})]
            if in_queue is not None
            else list(self._preemptible_positions.values())
        )
        positions = [
            position
            for by_priority in queues
            for priority, members in by_priority.items()
            if below_priority is None or priority < below_priority
            for position in members
        ]
        return [self.jobs[position] for position in sorted(positions)]

    def note_reason(self, job: Job, reason: PendingReason) -> None:
        """The first reason each action had for not placing a job; what-if simulations keep quiet."""
        if not self.simulating:
            self._reasons.setdefault(job.key, {}).setdefault(self.current_action, reason)

    def job_reason(self, job: Job) -> PendingReason | None:
        """Why the job still waits, action by action ("allocate: ...; reclaim: ..."), or once when
        every action gave the same reason.

        The cause is the most telling one any action gave (see `main_cause`); the node refusals
        are the first action's that has any (the victim actions' searches are what-ifs, which
        explain nothing per node).
        """
        by_action = self._reasons.get(job.key)
        if not by_action:
            return None
        if len(by_action) == 1:
            return next(iter(by_action.values()))
        messages = {reason.message for reason in by_action.values()}
        if len(messages) == 1:
            # Every action said the same (a gang short of pods is short for all of them): once.
            message = messages.pop()
        else:
            message = "; ".join(f"{action}: {reason.message}" for action, reason in by_action.items())
        refusals = next((reason.refusals for reason in by_action.values() if reason.refusals), ())
        return PendingReason(main_cause(r.cause for r in by_action.values()), message, refusals)

    @contextlib.contextmanager
    def what_if(self) -> Iterator[None]:
        """Inside, failures are expected and cheap: nothing is recorded or explained."""
        previous, self.simulating = self.simulating, True
        try:
            yield
        finally:
            self.simulating = previous
