"""What a split cycle's plan must satisfy when it is not the local plan (kai_ray/split/cycle.py).

Such a plan places every pending pod; it may evict. `assert_valid` reads the spec's invariants
that placements and evictions can break off the plan's final pod states (§22: 5, 7, 14, 15, 28,
30, 31, and the victim rules of §12-§14); `assert_no_worse` compares it with the local plan on
the objective the design promises: pods placed, then GPUs taken from running pods.
"""

from __future__ import annotations

from collections import defaultdict

from builders import NO_LIMIT
from random_clusters import RACK

from kai_ray.api.config import SchedulerConfig
from kai_ray.engine.cycle import open_session
from kai_ray.engine.plan import Plan
from kai_ray.engine.reasons import EvictionCause
from kai_ray.model.objects import ACTIVE_ALLOCATED, QUEUE_CHARGING, JobSpec, TaskSpec, TaskStatus
from kai_ray.model.snapshot import Snapshot
from kai_ray.split.deal import taken_gpus

TOLERANCE = 1e-9


def objective(snapshot: Snapshot, plan: Plan) -> tuple[int, float]:
    """(pending pods placed, GPUs taken from running pods): victims left releasing, not those
    placed again elsewhere."""
    before = {(job.key, task.name): task for job in snapshot.jobs for task in job.tasks}
    placed = sum(
        1
        for bind in (*plan.binds, *plan.pipelined)
        if before[(bind.job, bind.task)].status == TaskStatus.PENDING
    )
    taken = sum(
        taken_gpus(before[(gone.job, gone.task)])
        for gone in plan.evictions
        if plan.tasks[(gone.job, gone.task)].status == TaskStatus.RELEASING
    )
    return placed, taken


def assert_no_worse(snapshot: Snapshot, split: Plan, local: Plan) -> None:
    pending = sum(t.status == TaskStatus.PENDING for job in snapshot.jobs for t in job.tasks)
    (placed, taken), (local_placed, local_taken) = objective(snapshot, split), objective(snapshot, local)
    assert placed == pending >= local_placed, "a split plan places every pending pod"
    if local_placed == placed:
        assert taken <= local_taken + TOLERANCE, f"took {taken} GPUs from running pods, local {local_taken}"


def assert_valid(snapshot: Snapshot, plan: Plan, config: SchedulerConfig) -> None:
    table = snapshot.nodes
    jobs = {job.key: job for job in snapshot.jobs}
    before = {(job.key, task.name): task for job in snapshot.jobs for task in job.tasks}
    evicted = {(gone.job, gone.task) for gone in plan.evictions}
    placed = [(bind.job, bind.task) for bind in (*plan.binds, *plan.pipelined)]
    assert len(placed) == len(set(placed)), "a pod placed twice"
    for key in placed:
        assert before[key].status == TaskStatus.PENDING or key in evicted, f"{key} was not pending"
    _assert_nodes_hold(snapshot, plan, before)
    _assert_states(snapshot, plan, before)
    for job in snapshot.jobs:
        if any((job.key, t.name) in set(placed) or (job.key, t.name) in evicted for t in job.tasks):
            _assert_gang(job, plan)
        root = job.subgroups.topology
        if root is not None and root.required_level == RACK:
            racks = {
                table.specs[table.index[s.node]].labels[RACK]
                for t in job.tasks
                if (s := plan.tasks[(job.key, t.name)]).node is not None and s.status in ACTIVE_ALLOCATED
            }
            assert len(racks) <= 1, f"{job.key} spans racks {sorted(racks)}"
    _assert_victims(snapshot, plan, jobs, before, config)
    charged: dict[str, float] = defaultdict(float)
    for (job_key, _), state in plan.tasks.items():
        if state.status in QUEUE_CHARGING or state.status in (TaskStatus.ALLOCATED, TaskStatus.PIPELINED):
            for queue in snapshot.ancestry(jobs[job_key].queue):
                charged[queue] += state.accepted_gpus
    for name, queue in snapshot.queues.items():
        if queue.gpu.limit != NO_LIMIT:
            assert charged[name] <= queue.gpu.limit + TOLERANCE, f"queue {name} above its GPU limit"


def _assert_nodes_hold(snapshot: Snapshot, plan: Plan, before: dict[tuple[str, str], TaskSpec]) -> None:
    """A bound pod fits beside everything still on its node, releasing pods included; once they
    are gone, the pipelined pods fit too."""
    table = snapshot.nodes
    now: dict[str, float] = defaultdict(float)
    later: dict[str, float] = defaultdict(float)
    shared_now: dict[str, set[str]] = defaultdict(set)
    shared_later: dict[str, set[str]] = defaultdict(set)
    for key, state in plan.tasks.items():
        if state.node is None or state.status == TaskStatus.PENDING:
            continue
        spec = before[key]
        stays = state.status in ACTIVE_ALLOCATED
        holds_now = state.status != TaskStatus.PIPELINED and (stays or state.status == TaskStatus.RELEASING)
        for held, shared, counts in ((now, shared_now, holds_now), (later, shared_later, stays)):
            if not counts:
                continue
            if spec.is_shared_gpu:
                shared[state.node].update(state.gpu_groups)
            else:
                held[state.node] += spec.gpu
    for bind in plan.binds:
        row = table.index[bind.node]
        assert table.schedulable[row], f"{bind.task} bound on unschedulable {bind.node}"
        gpus = table.allocatable[row, 2]
        assert now[bind.node] + len(shared_now[bind.node]) <= gpus, f"{bind.node} holds more than its GPUs"
    for bind in plan.pipelined:
        gpus = table.allocatable[table.index[bind.node], 2]
        assert later[bind.node] + len(shared_later[bind.node]) <= gpus, f"{bind.node} will hold too much"


def _assert_states(snapshot: Snapshot, plan: Plan, before: dict[tuple[str, str], TaskSpec]) -> None:
    """A victim left releasing stands on the node it ran on with the GPUs it was granted there; a
    running pod the plan did not move stands as it did."""
    table = snapshot.nodes
    moved = {(bind.job, bind.task) for bind in (*plan.binds, *plan.pipelined)}
    for gone in plan.evictions:
        key = (gone.job, gone.task)
        if key not in moved:
            state = plan.tasks[key]
            granted = before[key].accepted_gpus(float(table.gpu_memory[table.index[gone.node]]))
            assert (state.status, state.node, state.accepted_gpus) == (
                TaskStatus.RELEASING,
                gone.node,
                granted,
            ), f"{key} evicted from {gone.node} stands as {state}"
        moved.add(key)
    for key, task in before.items():
        if key not in moved and task.status in ACTIVE_ALLOCATED and task.node in table.index:
            state = plan.tasks[key]
            granted = task.accepted_gpus(float(table.gpu_memory[table.index[task.node]]))
            assert (state.status, state.node, state.accepted_gpus) == (task.status, task.node, granted), (
                f"{key} did not move but stands as {state}"
            )


def _assert_gang(job: JobSpec, plan: Plan) -> None:
    """A job a plan placed or evicted pods of ends with each pod set at its minimum or empty."""
    for pod_set in job.subgroups.all_pod_sets():
        active = sum(
            1
            for t in job.tasks
            if t.subgroup == pod_set.name and plan.tasks[(job.key, t.name)].status in ACTIVE_ALLOCATED
        )
        assert active == 0 or active >= pod_set.min_available, f"{job.key} left below its gang minimum"


def _assert_victims(
    snapshot: Snapshot,
    plan: Plan,
    jobs: dict[str, JobSpec],
    before: dict[tuple[str, str], TaskSpec],
    config: SchedulerConfig,
) -> None:
    """Victims were running preemptible pods; reclaim takes from other queues and leaves the
    reclaimer within its fair share; preemption takes lower priority in the same queue."""
    book = open_session(snapshot, config).queues
    reclaimers: set[str] = set()
    for gone in plan.evictions:
        victim, task = jobs[gone.job], before[(gone.job, gone.task)]
        assert task.status in ACTIVE_ALLOCATED and task.node == gone.node, (
            f"{gone.task} was not running there"
        )
        assert victim.preemptible, f"{gone.job} is not preemptible"
        preemptor = jobs[gone.reason.preemptor] if gone.reason.preemptor else None
        if gone.reason.cause == EvictionCause.RECLAIM:
            assert preemptor is not None and preemptor.queue != victim.queue, f"{gone.job} reclaimed in-queue"
            reclaimers.add(preemptor.queue)
        elif gone.reason.cause == EvictionCause.PREEMPT:
            assert preemptor is not None and preemptor.queue == victim.queue, f"{gone.job} preempted across"
            assert victim.priority < preemptor.priority, f"{gone.job} preempted by a job not above it"
    for queue in reclaimers:
        row = book.index[queue]
        charged = sum(
            state.accepted_gpus
            for (job_key, _), state in plan.tasks.items()
            if jobs[job_key].queue == queue and state.status in ACTIVE_ALLOCATED
        )
        assert charged <= max(book.fair_share[row, 2], 0.0) + TOLERANCE, (
            f"{queue} reclaimed past its fair share"
        )
