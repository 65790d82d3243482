"""The engine's per-pod shortcuts decide exactly what the long way decides.

Each shortcut skips work whose answer is known (a queue choice no charge or
push has touched since, a capacity check no limit or quota can fail, a
per-task answer given before): the tests run full cycles over random clusters
once with the shortcut and once with it turned off and ask for the same plan,
task by task, or compare each remembered answer with one asked afresh.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager
from typing import ClassVar
from unittest import mock

import numpy as np
import pytest
from builders import cluster, config
from hypothesis import HealthCheck, given, settings
from random_clusters import (
    ALL_ACTIONS,
    JobDraw,
    QueueDraw,
    full_cycle,
    running_cluster,
    scenarios,
    with_arrivals,
)

from kai_ray.cluster.sim.simulator import CycleResult, SimulatedCluster
from kai_ray.engine.cycle import open_session, run_actions
from kai_ray.engine.job_queue import JobQueue
from kai_ray.engine.jobs import Job, PodSet, RequestFloats, SubGroupSet, job_facts, spec_facts, task_request
from kai_ray.engine.node_finder import shape_key
from kai_ray.engine.nodes import NodeState
from kai_ray.engine.plan import Bind, Eviction, TaskState, new_bind, new_eviction, new_task_state
from kai_ray.engine.plugins.base import OrderKey
from kai_ray.engine.plugins.predicates import PredicatesPlugin
from kai_ray.engine.plugins.proportion import ZERO_SHARE_PENALTY, ProportionPlugin
from kai_ray.engine.plugins.topology import TopologyPlugin
from kai_ray.engine.queues import Charge, QueueBook
from kai_ray.engine.reasons import EvictionCause, EvictionReason, PendingCause
from kai_ray.engine.requests import whole_gpu_charge
from kai_ray.engine.session import Session
from kai_ray.engine.statement import Statement
from kai_ray.model.objects import ALLOCATED, PIPELINED, RELEASING, UNLIMITED, TaskStatus
from kai_ray.model.resources import EPSILON
from kai_ray.model.snapshot import compile_snapshot

pytestmark = pytest.mark.unit

JOB_QUEUE_USERS = (
    "kai_ray.engine.actions.allocate.JobQueue",
    "kai_ray.engine.actions.victim_action.JobQueue",
    "kai_ray.engine.solver.JobQueue",
)


class FreshWalkQueue(JobQueue):
    """Walks the whole queue tree on every pop, remembering no queue's choice nor its key."""

    def pop(self) -> Job | None:
        self._known = [None] * len(self._known)
        return super().pop()


class OneByOneQueue(JobQueue):
    """Pushes its first jobs one at a time, as later pushes are, instead of heapifying them."""

    def _push_all(self, jobs: list[Job]) -> None:
        for job in jobs:
            self.push(job)


@contextmanager
def fresh_walks(queue: type[JobQueue] = FreshWalkQueue) -> Iterator[None]:
    with ExitStack() as stack:
        for user in JOB_QUEUE_USERS:
            stack.enter_context(mock.patch(user, queue))
        yield


def cycled(drawn: tuple[list[int], list[QueueDraw], list[JobDraw], list[JobDraw]]) -> CycleResult:
    """A whole cycle over the drawn cluster, its arrivals included."""
    nodes, queues, first, later = drawn
    return full_cycle(with_arrivals(running_cluster(nodes, queues, first), later))


def whole_plan(drawn: tuple[list[int], list[QueueDraw], list[JobDraw], list[JobDraw]]) -> tuple[object, ...]:
    plan = cycled(drawn).plan
    return (plan.binds, plan.pipelined, plan.evictions, plan.pending_reasons, plan.tasks)


def same_plan_the_long_way(
    drawn: tuple[list[int], list[QueueDraw], list[JobDraw], list[JobDraw]],
    long_way: AbstractContextManager[object],
) -> None:
    """The whole plan with the shortcut is the one made inside `long_way`, which turns it off."""
    with long_way:
        expected = whole_plan(drawn)
    assert whole_plan(drawn) == expected


QueueKeyCheck = Callable[[Session, str, Sequence[float], bytes, OrderKey], "bool | None"]


def queue_keys_checked(
    drawn: tuple[list[int], list[QueueDraw], list[JobDraw], list[JobDraw]], check: QueueKeyCheck
) -> list[bool]:
    """Every queue order key the session hands out in a whole cycle, with what it was asked,
    put to `check`: the cached keys are only as good as each of them. A check answering None
    had nothing to judge in that call and leaves no verdict."""
    asked = Session.queue_order_key
    verdicts: list[bool] = []

    def checked(self: Session, queue: str, job: Sequence[float], job_bytes: bytes) -> OrderKey:
        key = asked(self, queue, job, job_bytes)
        verdict = check(self, queue, job, job_bytes, key)
        if verdict is not None:
            verdicts.append(verdict)
        return key

    with mock.patch.object(Session, "queue_order_key", checked):
        cycled(drawn)
    return verdicts


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios)
def test_remembered_queue_choices_pop_jobs_as_a_fresh_walk_does(
    drawn: tuple[list[int], list[QueueDraw], list[JobDraw], list[JobDraw]],
) -> None:
    same_plan_the_long_way(drawn, fresh_walks())


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios)
def test_jobs_heapified_at_once_pop_as_jobs_pushed_one_by_one(
    drawn: tuple[list[int], list[QueueDraw], list[JobDraw], list[JobDraw]],
) -> None:
    same_plan_the_long_way(drawn, fresh_walks(OneByOneQueue))


class RecordedQueue(JobQueue):
    """A job queue kept in `RecordedQueue.made` once made, to read what it remembered."""

    made: ClassVar[list[JobQueue]] = []

    def _push_all(self, jobs: list[Job]) -> None:
        RecordedQueue.made.append(self)
        super()._push_all(jobs)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios)
def test_tiebreaks_the_job_queue_remembers_by_rows_are_the_sessions_verdicts_asked_afresh(
    drawn: tuple[list[int], list[QueueDraw], list[JobDraw], list[JobDraw]],
) -> None:
    """Each verdict kept under a pair of rows is the one the plugins and ages give those two
    queues now: a pair's int read back as the wrong pair, or in the wrong order, would differ."""
    RecordedQueue.made = []
    with fresh_walks(RecordedQueue):
        cycled(drawn)
    for queue in RecordedQueue.made:
        names = queue._names
        for pair, verdict in queue._verdicts.items():
            row, other = divmod(pair, len(names))
            assert verdict == queue.session._queue_tiebreak(names[row], names[other])


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios)
def test_skipped_capacity_checks_are_the_ones_that_pass(
    drawn: tuple[list[int], list[QueueDraw], list[JobDraw], list[JobDraw]],
) -> None:
    opened = ProportionPlugin.on_session_open

    def every_queue_limited(self: ProportionPlugin) -> None:
        opened(self)
        self._limited = dict.fromkeys(self._limited, True)

    same_plan_the_long_way(drawn, mock.patch.object(ProportionPlugin, "on_session_open", every_queue_limited))


def test_a_limit_on_a_parent_queue_still_stops_a_preemptible_job() -> None:
    """The shortcut looks at the whole chain: a leaf without a limit under a limited parent."""
    state = (
        cluster()
        .node("n0", gpus=8)
        .queue("dept", gpu_limit=2.0)
        .queue("team", parent="dept")
        .job("small", queue="team", gpus=2.0)
        .job("more", queue="team", gpus=1.0, created=1.0)
        .build()
    )
    result = SimulatedCluster(state, config(actions=("allocate",))).run_cycle()
    assert [bind.job for bind in result.plan.binds] == ["small"]
    assert result.plan.pending_reasons["more"].cause == PendingCause.OVER_LIMIT


def test_a_remembered_choice_is_dropped_when_a_charge_alone_changes_the_subtree() -> None:
    """An eviction charges a queue without any push or pop: the parent must choose again."""
    state = (
        cluster()
        .node("n0", gpus=8)
        .queue("dept", gpu_quota=8.0)
        .queue("b", parent="dept", gpu_quota=4.0)
        .queue("c", parent="dept", gpu_quota=4.0, created=1.0)
        .job("in-b", queue="b", gpus=1.0)
        .job("in-c", queue="c", gpus=1.0)
        .build()
    )
    session = open_session(compile_snapshot(state), config())
    queue = JobQueue(session, list(session.jobs))
    rows = session.queues.index
    first = queue._best_among([rows["dept"]])
    assert first is not None and first[0] == rows["b"]  # equal queues: the older one
    session.queues.charge("b", (0.0, 0.0, 3.0), non_preemptible=False)
    again = queue._best_among([rows["dept"]])
    assert again is not None and again[0] == rows["c"]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios)
def test_answers_remembered_per_task_are_the_ones_asked_afresh(
    drawn: tuple[list[int], list[QueueDraw], list[JobDraw], list[JobDraw]],
) -> None:
    """The shape keys, queue charges and lone requests kept with each spec's facts, and the
    predicates' size verdicts, after a whole cycle."""
    session = cycled(drawn).session
    predicates = next(p for p in session.plugins if isinstance(p, PredicatesPlugin))
    tasks = {task.uid: task for job in session.jobs for task in job.tasks}
    for task in tasks.values():
        facts = task.facts
        assert facts is spec_facts.of(task.spec)
        assert facts.request_floats == tuple(task_request(task.spec).tolist())
        if facts.shape_key is not None:
            assert facts.shape_key == shape_key(tuple(task.request.tolist()), task.needs_gpu, task.spec)
        if facts.queue_charge is not None:
            assert not task.is_shared_gpu
            spec = task.spec
            assert facts.queue_charge == (float(spec.cpu_millis), float(spec.memory), float(spec.gpu))
        if facts.lone_request is not None:
            assert not task.is_shared_gpu
            summed = np.zeros(3)
            summed += task.request[:3]
            assert facts.lone_request == (tuple(summed.tolist()), summed.tobytes())
    for request, too_big in predicates._too_big.items():
        vector = np.frombuffer(request)
        assert too_big == bool((vector > predicates._max_allocatable + 1e-9).any())
    assert set(predicates._too_big) <= {task.request.tobytes() for task in tasks.values()}


def spelled_out_queue_key(session: Session, queue: str, job: np.ndarray) -> tuple[object, ...]:
    """§5.2 rules 1-6 over the book's numpy vectors, read afresh: what the plugin's plain-float
    pass over the terms it settled at opening must give, bit for bit."""
    book = session.queues
    row = book.index[queue]
    used, share = book.allocated[row], book.allocatable_share(row)
    after = used + job
    deserved = book.deserved[row]
    bound = np.where(share == UNLIMITED, session.fairness_totals(), share)

    def dominant(vector: np.ndarray) -> float:
        return max(
            value * ZERO_SHARE_PENALTY if limit == 0 else value / limit
            for value, limit in zip(vector.tolist(), bound.tolist(), strict=True)
        )

    return (
        bool((book.fair_share[row] < used).all()),
        not bool(((deserved == UNLIMITED) | (after <= deserved + EPSILON)).all()),
        -book.specs[row].priority,
        bool(((share == 0) & (after > 0)).any()),
        dominant(after),
        dominant(used),
    )


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios)
def test_queue_order_keys_are_the_spelled_out_rules(
    drawn: tuple[list[int], list[QueueDraw], list[JobDraw], list[JobDraw]],
) -> None:
    """After a whole cycle, for every queue and every job's request (and none)."""
    session = cycled(drawn).session
    proportion = next(p for p in session.plugins if isinstance(p, ProportionPlugin))
    requests = [np.zeros(3)] + [
        session.fairness_request(job.tasks, session.min_gpu_memory) for job in session.jobs
    ]
    for queue in session.queues.names:
        for request in requests:
            assert proportion.queue_order_key(queue, request.tolist()) == spelled_out_queue_key(
                session, queue, request
            )


def test_queue_order_keys_rank_queue_priorities_as_the_spelled_out_rules() -> None:
    """The random clusters' queues share one priority: here they differ, parents too."""
    state = (
        cluster()
        .node("n0", gpus=8)
        .queue("dept", priority=50)
        .queue("high", parent="dept", priority=125, gpu_quota=2.0)
        .queue("low", parent="dept", priority=75, gpu_quota=2.0, created=1.0)
        .job("in-high", queue="high", gpus=1.0)
        .job("in-low", queue="low", gpus=2.0)
        .build()
    )
    session = open_session(compile_snapshot(state), config())
    proportion = keys_spelled_out(session, [np.zeros(3), np.array([0.0, 0.0, 1.0])])
    nothing = [0.0, 0.0, 0.0]
    assert proportion.queue_order_key("high", nothing) < proportion.queue_order_key("low", nothing)


def test_queue_order_keys_of_queues_entitled_to_none_are_the_spelled_out_rules() -> None:
    """Queues entitled to none of a resource divide its share by a zero bound (penalised instead)
    and use what they may not; quotas of every resource bound whether a queue is starved: the
    terms' paths the random clusters do not reach, each resource on a queue of its own."""
    builder = cluster().node("n0", gpus=8).queue("dept")
    builder.queue("none", parent="dept", gpu_limit=0.0, cpu_quota=4000.0, memory_quota=1000.0)
    builder.queue("some", parent="dept", gpu_quota=2.0, memory_quota=1000.0, created=1.0)
    builder.queue("no-cpu", parent="dept", cpu_limit=0.0, created=2.0)
    builder.queue("no-memory", parent="dept", memory_limit=0.0, created=2.0)
    builder.queue("tight", parent="dept", cpu_quota=4000.0, memory_quota=1000.0, created=3.0)
    session = open_session(compile_snapshot(builder.job("in-some", queue="some", gpus=2.0).build()), config())
    session.queues.charge("none", (1000.0, 1.0, 1.0), non_preemptible=False)
    session.queues.charge("no-cpu", (1.0, 0.0, 0.0), non_preemptible=False)
    session.queues.charge("no-memory", (0.0, 5.0, 0.0), non_preemptible=False)
    session.queues.charge("tight", (1000.0, 1.0, 0.0), non_preemptible=False)  # within its quotas
    session.queues.charge("some", (1e12, 1e15, 0.0), non_preemptible=False)  # over in all but GPUs
    requests = [np.zeros(3), np.array([0.0, 0.0, 1.0]), np.array([5000.0, 0.0, 0.0])]
    terms = keys_spelled_out(session, requests)._order_terms[session.queues.index["none"]]
    assert terms[6] is not None and terms[10]  # entitled to none of a resource, a zero bound


def keys_spelled_out(session: Session, requests: list[np.ndarray]) -> ProportionPlugin:
    """The session's proportion plugin, once its queue order key of every queue and request is
    checked against the spelled-out rules."""
    proportion = next(p for p in session.plugins if isinstance(p, ProportionPlugin))
    for queue in session.queues.names:
        for request in requests:
            key = proportion.queue_order_key(queue, request.tolist())
            assert key == spelled_out_queue_key(session, queue, request)
    return proportion


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios)
def test_request_bytes_the_job_queue_hands_queue_order_are_the_requests_own(
    drawn: tuple[list[int], list[QueueDraw], list[JobDraw], list[JobDraw]],
) -> None:
    """The job queue keeps each request's bytes with its floats; a stale copy would read another
    job's cached key, and bytes other than the floats' array's would key them apart from the
    victims' requests."""

    def own_bytes(_s: Session, _q: str, job: Sequence[float], sent: bytes, _k: OrderKey) -> bool:
        return sent == np.array(job).tobytes()

    handed = queue_keys_checked(drawn, own_bytes)
    assert handed and all(handed)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios)
def test_queue_order_keys_the_session_keeps_are_the_keys_computed_afresh(
    drawn: tuple[list[int], list[QueueDraw], list[JobDraw], list[JobDraw]],
) -> None:
    """The session keeps, per queue and request, the key of the queue's latest version only:
    every key it hands back, kept or not, is the one the plugins give now."""

    def fresh(session: Session, queue: str, job: Sequence[float], _bytes: bytes, key: OrderKey) -> bool:
        return key == session.queue_key_at(session.queues.index[queue], job)

    compared = queue_keys_checked(drawn, fresh)
    assert compared and all(compared)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios)
def test_fairness_requests_made_once_per_lone_spec_are_the_summed_ones(
    drawn: tuple[list[int], list[QueueDraw], list[JobDraw], list[JobDraw]],
) -> None:
    """A lone task's request, made once per spec, is the very floats summing it afresh gives on
    either GPU memory the session asks about; a gang's request is summed afresh. The floats and
    bytes queue order is handed are the array's, made once per spec or afresh alike."""
    session = cycled(drawn).session
    for job in session.jobs:
        groups = [[task] for task in job.tasks] + [job.tasks]
        for tasks in groups:
            for gpu_memory in (session.min_gpu_memory, session.max_gpu_memory):
                request = session.fairness_request(tasks, gpu_memory)
                fresh = np.zeros(3)
                for task in tasks:  # a numpy running sum, as the request's docstring says
                    fresh += [task.spec.cpu_millis, task.spec.memory, task.spec.accepted_gpus(gpu_memory)]
                assert request.tobytes() == fresh.tobytes()
                floats, packed = session.fairness_request_floats(tasks, gpu_memory)
                assert np.array(floats).tobytes() == packed == fresh.tobytes()
                assert all(type(value) is float for value in floats)
                if len(tasks) == 1 and not tasks[0].is_shared_gpu:
                    assert not request.flags.writeable


def numpy_charge(
    book: QueueBook, queue: str, vector: Charge, non_preemptible: bool, sign: float = 1.0
) -> None:
    """A queue charge the long way: each row of the chain as a numpy array, `sign * vector` added
    to it in place."""
    delta = sign * np.array(vector)
    books = (book.allocated_rows, book._protected_rows) if non_preemptible else (book.allocated_rows,)
    for row in book.chains[queue]:
        book.versions[row] += 1
        for rows in books:
            summed = np.array(rows[row])
            summed += delta
            rows[row] = summed.tolist()
    book._arrays = None


def numpy_node_charge(
    nodes: NodeState, row: int, request: RequestFloats, status: TaskStatus, sign: float
) -> None:
    """A node charge the long way: the row's idle and releasing as numpy arrays, `sign * request`
    added to or taken from them in place, as the task's status books it."""
    delta = sign * np.array(request)
    idle, releasing = np.array(nodes.idle_rows[row]), np.array(nodes.releasing_rows[row])
    if status == RELEASING:
        releasing += delta
        idle -= delta
    elif status == PIPELINED:
        releasing -= delta
    else:
        idle -= delta
    nodes.idle_rows[row], nodes.releasing_rows[row] = idle.tolist(), releasing.tolist()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios)
def test_rows_in_plain_floats_hold_what_numpy_charges_add_up_to(
    drawn: tuple[list[int], list[QueueDraw], list[JobDraw], list[JobDraw]],
) -> None:
    """Node and queue rows are charged float by float: after a whole cycle (charges, their
    reversals, evictions) they hold the very floats numpy's in-place adds give, the plan is the
    same, and the arrays made from the rows when read hold the rows' floats."""
    with (
        mock.patch.object(QueueBook, "charge", numpy_charge),
        mock.patch.object(NodeState, "_charge", numpy_node_charge),
    ):
        long_way = cycled(drawn)
    result = cycled(drawn)
    assert result.plan == long_way.plan
    book, numpy_book = result.session.queues, long_way.session.queues
    assert book.allocated.tobytes() == numpy_book.allocated.tobytes()
    assert book.allocated_non_preemptible.tobytes() == numpy_book.allocated_non_preemptible.tobytes()
    nodes, numpy_nodes = result.session.nodes, long_way.session.nodes
    assert np.array(nodes.idle_rows).tobytes() == np.array(numpy_nodes.idle_rows).tobytes()
    assert np.array(nodes.releasing_rows).tobytes() == np.array(numpy_nodes.releasing_rows).tobytes()
    assert nodes.idle.tobytes() == np.array(nodes.idle_rows).tobytes()
    assert nodes.releasing.tobytes() == np.array(nodes.releasing_rows).tobytes()
    rows = [*book.allocated_rows, *nodes.idle_rows, *nodes.releasing_rows]
    assert all(type(value) is float for row in rows for value in row)


def walked_topology(group: SubGroupSet | PodSet) -> bool:
    """Whether a (sub)group of the job's own tree names a topology, walked afresh."""
    if group.topology is not None and group.topology.topology:
        return True
    return isinstance(group, SubGroupSet) and any(walked_topology(m) for m in group.members)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios)
def test_answers_remembered_per_spec_are_the_ones_asked_afresh(
    drawn: tuple[list[int], list[QueueDraw], list[JobDraw], list[JobDraw]],
) -> None:
    """After a whole cycle: the topology plugin's verdict per tree spec is the walk of each job's
    tree, a whole-GPU pod's remembered queue charge is what placing it on any row charges, a
    group of one pod set is ready as its members count says, and a task shares GPUs and asks for
    the floats of its request array as its spec says."""
    session = cycled(drawn).session
    topology = next(p for p in session.plugins if isinstance(p, TopologyPlugin))
    rows = range(len(session.nodes.table))
    for job in session.jobs:
        assert topology.splits_nodes(job) == walked_topology(job.root)
        root = job.root
        assert root.ready() == (len([m for m in root.members if m.ready()]) >= root.min_members())
        for task in job.tasks:
            assert task.is_shared_gpu == task.spec.is_shared_gpu
            assert np.array(task.facts.request_floats).tobytes() == task.request.tobytes()
            assert all(type(value) is float for value in task.facts.request_floats)
            if task.is_shared_gpu:
                continue
            charge = whole_gpu_charge(task.spec)
            assert all(type(value) is float for value in charge)
            for row in rows:
                fresh = session.placed_fairness(task, row)
                assert np.array(charge).tobytes() == fresh.tobytes()


def test_the_plan_records_made_the_short_way_are_those_their_classes_make() -> None:
    """`new_bind`, `new_task_state` and `new_eviction` fill the very fields the named tuples'
    own constructors do, in their order, of their type."""
    reason = EvictionReason(EvictionCause.RECLAIM, "reclaimed for ns/other", "ns/other")
    bind = new_bind("ns/job", "job-0", "n1", ("n1-gpu-1",), 0.5, "reclaim")
    state = new_task_state(ALLOCATED, "n1", (), 1.0)
    eviction = new_eviction("ns/job", "job-1", "n2", reason)
    pairs: list[tuple[Bind | TaskState | Eviction, Bind | TaskState | Eviction]] = [
        (bind, Bind("ns/job", "job-0", "n1", ("n1-gpu-1",), 0.5, "reclaim")),
        (state, TaskState(ALLOCATED, "n1", (), 1.0)),
        (eviction, Eviction("ns/job", "job-1", "n2", reason)),
    ]
    for made, spelled in pairs:
        assert type(made) is type(spelled)
        assert made == spelled and repr(made) == repr(spelled) and hash(made) == hash(spelled)
        assert made._asdict() == spelled._asdict()
    assert bind.action == "reclaim" and state.node == "n1" and eviction.reason is reason


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios)
def test_statuses_are_members_as_the_identity_comparisons_need(
    drawn: tuple[list[int], list[QueueDraw], list[JobDraw], list[JobDraw]],
) -> None:
    """The per-pod paths compare statuses with `is` (`model.objects`): every status a task holds,
    or held when the session opened, must be the enum's member itself, never a string equal to
    one."""
    session = cycled(drawn).session
    for job in session.jobs:
        for task in job.tasks:
            assert task.status is TaskStatus(task.status)
            assert task.spec.status is TaskStatus(task.spec.status)
    for status, _ in session.placed_at_open.values():
        assert status is TaskStatus(status)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios)
def test_job_order_keys_remembered_per_spec_are_the_keys_asked_afresh(
    drawn: tuple[list[int], list[QueueDraw], list[JobDraw], list[JobDraw]],
) -> None:
    """A whole cycle leaves each queued job's key with its spec; a later session over the same
    specs, moved or not, hands out for every job the key its plugins give now."""
    nodes, queues, first, later = drawn
    snapshot = compile_snapshot(with_arrivals(running_cluster(nodes, queues, first), later))
    cfg = config(actions=ALL_ACTIONS)
    run_actions(open_session(snapshot, cfg))
    again = open_session(snapshot, cfg)
    remembered = [job for job in again.jobs if job_facts.of(job.spec).standing_order_key is not None]
    assert len(remembered) == len(again.jobs_with_pending_tasks())
    for job in again.jobs:
        assert again.standing_job_order_key(job) == again.job_order_key(job)
    run_actions(again)
    for job in again.jobs:
        assert again.standing_job_order_key(job) == again.job_order_key(job)


def test_a_remembered_job_order_key_is_not_read_after_a_move_nor_under_other_plugins() -> None:
    """An elastic job at its minimum ranks before one above it; once its waiting pod is placed,
    or without the elastic plugin, its key is another, and the session must give that one."""
    state = (
        cluster()
        .node("n1", gpus=4)
        .queue("q", gpu_quota=4)
        .job("grown", queue="q", pods=1, gpus=1, min_member=1, status=TaskStatus.RUNNING, node="n1")
        .task()
        .build()
    )
    snapshot = compile_snapshot(state)
    session = open_session(snapshot, config())
    at_minimum = session.standing_job_order_key(session.jobs[0])
    assert job_facts.of(snapshot.jobs[0]).standing_order_key == (session._job_order_signature, at_minimum)
    moved = open_session(snapshot, config())
    waiting = next(task for task in moved.jobs[0].tasks if task.status is TaskStatus.PENDING)
    Statement(moved).allocate(waiting, 0)
    assert moved.standing_job_order_key(moved.jobs[0]) == moved.job_order_key(moved.jobs[0]) != at_minimum
    without_elastic = open_session(snapshot, config(drop=["elastic"]))
    job = without_elastic.jobs[0]
    assert without_elastic.standing_job_order_key(job) == without_elastic.job_order_key(job) != at_minimum


class Forgetful(dict[object, object]):
    """A memo that keeps nothing: every answer is worked out afresh."""

    def __setitem__(self, key: object, value: object) -> None:
        return None


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios)
def test_no_fit_explanations_remembered_per_shape_are_the_ones_worked_out_afresh(
    drawn: tuple[list[int], list[QueueDraw], list[JobDraw], list[JobDraw]],
) -> None:
    opened = Session.__init__

    def forgetting(self: Session, *args: object, **kwargs: object) -> None:
        opened(self, *args, **kwargs)  # type: ignore[arg-type]
        self.no_fit_explanations = Forgetful()  # type: ignore[assignment]

    same_plan_the_long_way(drawn, mock.patch.object(Session, "__init__", forgetting))


def test_a_no_fit_explanation_is_worked_out_again_once_a_node_changed() -> None:
    """Two alike pods that fit nowhere, a pod placed between them: the second's words say what
    the placement took (the GPU), the first's do not."""
    state = (
        cluster()
        .node("n1", gpus=1, cpu_millis=8000)
        .node("n2", gpus=1, cpu_millis=8000)
        .queue("q")
        .job("held-1", queue="q", cpu_millis=4000, status=TaskStatus.RUNNING, node="n1")
        .job("held-2", queue="q", cpu_millis=4000, status=TaskStatus.RUNNING, node="n2")
        .job("a", queue="q", gpus=1, cpu_millis=8000)
        .job("b", queue="q", gpus=1, cpu_millis=1000, created=1.0)
        .job("c", queue="q", gpus=1, cpu_millis=8000, created=2.0)
        .build()
    )
    plan = SimulatedCluster(state, config(actions=("allocate",))).run_cycle().plan
    assert [bind.job for bind in plan.binds] == ["b"]
    assert "2 lack free CPU)" in plan.pending_reasons["a"].message
    assert "2 lack free CPU and GPUs)" in plan.pending_reasons["c"].message
    assert plan.pending_reasons["c"].message.startswith("pod c-0: ")


VICTIM_CHECKS = (
    "kai_ray.engine.actions.preempt._victims_possible",
    "kai_ray.engine.actions.reclaim._victims_possible",
    "kai_ray.engine.actions.consolidation._victims_possible",
)


@contextmanager
def every_search_run() -> Iterator[None]:
    with ExitStack() as stack:
        for check in VICTIM_CHECKS:
            stack.enter_context(mock.patch(check, lambda session, jobs: True))
        yield


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios)
def test_victim_searches_skipped_as_hopeless_are_ones_that_find_nothing(
    drawn: tuple[list[int], list[QueueDraw], list[JobDraw], list[JobDraw]],
) -> None:
    """With every action's search run in queue order whatever its check says, the plan (binds,
    evictions, every pending reason) is the same."""
    same_plan_the_long_way(drawn, every_search_run())
