"""The embedded simulated cluster: runs cycles and plays the pod lifecycle.

Between cycles it does what a cluster (or KAI's integration harness) would:
bound pods start running, pipelined pods go back to waiting, evicted pods
are deleted and recreated as pending (unless their job is being deleted).
A pod bound with delayed claims (`TaskSpec.delayed_claims`) selects its node
for them, as `serve` writes `volume.kubernetes.io/selected-node` on each: from
then on every pod naming such a claim, a recreated one too, is held to that node.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from kai_ray.api.config import SchedulerConfig
from kai_ray.collector import collection_paused
from kai_ray.convert.volumes import selected_node_terms
from kai_ray.distributed.executor import Executor
from kai_ray.engine.cycle import open_session, run_actions
from kai_ray.engine.plan import Plan, TaskState, task_state
from kai_ray.engine.session import Session
from kai_ray.engine.usage import UsageRecorder
from kai_ray.model.objects import QUEUE_CHARGING, ClusterState, JobSpec, TaskStatus
from kai_ray.model.resources import GPU
from kai_ray.model.snapshot import compile_snapshot

STARTED_AGO_SECONDS = 60.0
"""A job running at a cycle's start counts as started one minute ago (FORMAT.md)."""


@dataclass(frozen=True)
class NodeGpus:
    idle: float
    releasing: float


@dataclass
class ClusterView:
    tasks: dict[tuple[str, str], TaskState] = field(default_factory=dict)
    nodes: dict[str, NodeGpus] = field(default_factory=dict)


@dataclass
class CycleResult:
    start: ClusterView
    end: ClusterView
    plan: Plan
    session: Session


class SimulatedCluster:
    """`usage` feeds time-based fair share (None: off, as without KAI's usageDBConfig); the clock
    moves `clock_step` seconds between cycles, so recorded usage ages and decays."""

    def __init__(
        self,
        state: ClusterState,
        config: SchedulerConfig,
        executor: Executor | None = None,
        usage: UsageRecorder | None = None,
        clock_step: float = 0.0,
    ) -> None:
        self.state = state
        self.config = config
        self.executor = executor
        self.usage = usage
        self.clock_step = clock_step

    def run_cycle(self) -> CycleResult:
        usage = None if self.usage is None else self.usage.usage(self.state.now)
        with collection_paused():  # until the plan is applied: see `kai_ray.collector`
            session = open_session(compile_snapshot(self.state), self.config, self.executor, usage=usage)
            start = _view(session)
            plan = run_actions(session)
            end = _view(session)
            if self.usage is not None:
                self.usage.record(session)
            self._apply(plan, session)
        return CycleResult(start, end, plan, session)

    def run(self, cycles: int) -> list[CycleResult]:
        results = []
        for index in range(cycles):
            if index:
                self.state.now += self.clock_step
                self.advance()
            results.append(self.run_cycle())
        return results

    def _apply(self, plan: Plan, session: Session) -> None:
        jobs = {job.key: job for job in self.state.jobs}
        for job in session.jobs:
            jobs[job.key].last_start = job.last_start
        for job_spec in self.state.jobs:
            for task in job_spec.tasks:
                state = plan.tasks.get((job_spec.key, task.name))
                if state is None or state.status == task.status:
                    continue
                task.status = TaskStatus.BINDING if state.status == TaskStatus.ALLOCATED else state.status
                task.node = state.node
                task.gpu_groups = state.gpu_groups
        self._select_nodes(plan, jobs)

    def _select_nodes(self, plan: Plan, jobs: dict[str, JobSpec]) -> None:
        """Each delayed claim of a pod bound this cycle is selected for the pod's node (see the
        module docstring).  Tasks that gain the restriction are replaced, not changed in place:
        the engine remembers what it derived from a task by the task object."""
        selected: dict[tuple[str, str], str] = {}
        for bind in plan.binds:
            job = jobs[bind.job]
            for task in job.tasks:
                if task.name == bind.task:
                    selected.update(((job.namespace, claim), bind.node) for claim in task.delayed_claims)
        if not selected:
            return
        for job in self.state.jobs:
            for index, task in enumerate(job.tasks):
                terms = [
                    selected_node_terms(node)
                    for c in task.delayed_claims
                    if (node := selected.get((job.namespace, c)))
                ]
                added = tuple(t for t in dict.fromkeys(terms) if t not in task.volume_node_affinity)
                if added:
                    job.tasks[index] = replace(
                        task, volume_node_affinity=(*task.volume_node_affinity, *added)
                    )

    def advance(self) -> None:
        """The between-cycle update of KAI's integration harness (FORMAT.md, Cycles)."""
        for job in self.state.jobs:
            for task in job.tasks:
                if task.status == TaskStatus.BINDING:
                    task.status = TaskStatus.RUNNING
                elif task.status == TaskStatus.PIPELINED or (
                    task.status == TaskStatus.RELEASING and not job.deleting
                ):
                    task.status, task.node, task.gpu_groups = TaskStatus.PENDING, None, ()
            running = any(t.status in QUEUE_CHARGING for t in job.tasks)
            job.last_start = self.state.now - STARTED_AGO_SECONDS if running else None
            job.stale_since = None


def _view(session: Session) -> ClusterView:
    view = ClusterView()
    for job in session.jobs:
        for task in job.tasks:
            view.tasks[(job.key, task.name)] = task_state(session, task)
    table = session.nodes.table
    for row, name in enumerate(table.names):
        view.nodes[name] = NodeGpus(
            float(session.nodes.idle[row, GPU]), float(session.nodes.releasing[row, GPU])
        )
    return view
