"""The best node for a pod, without scanning every node for every pod.

Scores of a row depend on that row alone, so for each pod shape we keep the
feasible rows in a heap ordered by (score desc, row asc). When the session
changes a row (a placement, an eviction, a rollback) that row is re-scored
on the next query; rows nobody touched keep their scores. An executor may
hand over only the top of each shape's list plus a bound on everything it
left out; when the heap's best no longer beats that bound we fall back to
an exact scan of all rows, so the answer is always the one a full scan
gives, whichever executor prepared it.
"""

from __future__ import annotations

import functools
import heapq
import struct
from collections.abc import Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from kai_ray.distributed import kernels
from kai_ray.distributed.executor import LocalExecutor
from kai_ray.distributed.kernels import NodeRanking, NodeRows, RankedRows, TaskShape
from kai_ray.engine.jobs import Job, Task
from kai_ray.engine.plugins.base import Plugin
from kai_ray.engine.plugins.predicates import PredicatesPlugin
from kai_ray.engine.plugins.scoring import (
    GpuPackPlugin,
    GpuSharingOrderPlugin,
    GpuSpreadPlugin,
    NodeAvailabilityPlugin,
    NodePlacementPlugin,
    ResourceTypePlugin,
)
from kai_ray.model.objects import TaskSpec
from kai_ray.model.resources import EPSILON, NUM_RESOURCES

if TYPE_CHECKING:
    from kai_ray.engine.session import Session

ShapeKey = tuple[object, ...]
RankKey = tuple[float, int]

KNOWN_NODE_PLUGINS = (
    PredicatesPlugin,
    NodeAvailabilityPlugin,
    GpuSharingOrderPlugin,
    ResourceTypePlugin,
    NodePlacementPlugin,
    GpuPackPlugin,
    GpuSpreadPlugin,
)


def shape_of(task: Task) -> TaskShape:
    return TaskShape(tuple(task.request.tolist()), task.needs_gpu, task.spec)


def shape_key(request: tuple[float, ...], needs_gpu: bool, spec: TaskSpec) -> ShapeKey:
    """What makes pods alike to node kernels: their request, GPU need, node constraints and GPU
    ask. Made from the fields a `TaskShape` holds, without making one (a frozen dataclass). It
    reads only the spec (a task's request is `task_request` of its spec, `jobs.build_job`), so it
    is kept with the spec's facts (`SpecFacts.shape_key`): a scheduler's specs outlive its cycles
    (`convert.live`), and a pod's key is built once, not in every session that places it."""
    return (
        request,
        needs_gpu,
        (
            tuple(sorted(spec.node_selector.items())),
            spec.node_affinity,
            spec.volume_node_affinity,
            spec.tolerations,
        ),
        spec.gpu,
        spec.gpu_memory_mib,
        spec.gpu_devices,
    )


def node_ranking(session: Session) -> NodeRanking | None:
    """The enabled node plugins as a recipe a shard can apply, or None if one cannot be expressed."""
    return _ranking_of(node_plugins(session))


def _ranking_of(node_plugins: list[Plugin]) -> NodeRanking | None:
    if any(not isinstance(p, KNOWN_NODE_PLUGINS) for p in node_plugins):
        return None
    names = {p.name for p in node_plugins}
    placement = next((p for p in node_plugins if isinstance(p, NodePlacementPlugin)), None)
    return NodeRanking(
        predicates="predicates" in names,
        idle_bonus="nodeavailability" in names,
        shared_group_bonus="gpusharingorder" in names,
        cpu_node_bonus="resourcetype" in names,
        gpu_strategy=None if placement is None else placement.arguments.get("gpu", "binpack"),
        cpu_strategy=None if placement is None else placement.arguments.get("cpu", "binpack"),
    )


def node_plugins(session: Session) -> list[Plugin]:
    """The enabled plugins that override a node hook (and so take part in node ranking), in
    configured order: read off the session's lists of plugins per hook, which it keeps anyway
    (each session's node finder asks)."""
    hooked = {id(p) for hook in ("node_scores", "node_filter") for p in session.plugins_with(hook)}
    return [p for p in session.plugins if id(p) in hooked]


def node_rows(session: Session) -> NodeRows:
    """The whole node table as kernels see it."""
    nodes = session.nodes
    has_open_group = np.array(
        [bool(nodes.fitting_groups(row, 0.0)) for row in range(len(nodes.table))], dtype=bool
    )
    return NodeRows(
        rows=session.all_rows(),
        specs=nodes.table.specs,
        allocatable=nodes.table.allocatable,
        idle=nodes.idle,
        releasing=nodes.releasing,
        schedulable=nodes.table.schedulable,
        has_open_group=has_open_group,
        topologies=tuple(session.snapshot.topologies.values()),
    )


RowState = tuple[bool, bytes, bytes, bytes]
"""What a row-local score of a whole-GPU pod reads of a row (`NodeFinder._row_states`)."""

RowScores = dict[RowState, tuple[bool, float]]
"""Row state → (feasible, score) for one pod shape (`_Frontier.scored`)."""

_shared_row_scores: dict[tuple[NodeRanking, bytes], RowScores] = {}
"""(the kernels' recipe, a request's bytes) → that shape's row states, kept across sessions.

A whole-GPU pod's (feasible, score) of a row state is a function of the recipe, the request and
the state alone (`NodeFinder._remembering`), whichever session asks, so what one cycle scored a
later one reads back: a scheduler's cycles see mostly the same rows in the same states, and the
first scan of a shape and the states scored ahead of the first row to fill were a twelfth of a
small cluster's cycle. Bounded by `SHARED_SHAPES` and `SHARED_STATES` (cleared when full)."""

SHARED_SHAPES = 256
"""At most this many shapes' memories are kept across sessions (all dropped when one more comes)."""
SHARED_STATES = 4096
"""At most this many row states are kept per shape (all dropped when one more comes)."""


def shared_row_scores(ranking: NodeRanking, request: bytes) -> RowScores:
    """The memory of row states kept across sessions for pods of this request under this recipe."""
    key = (ranking, request)
    scores = _shared_row_scores.get(key)
    if scores is None:
        if len(_shared_row_scores) >= SHARED_SHAPES:
            _shared_row_scores.clear()
        scores = _shared_row_scores[key] = {}
    return scores


def forget_shared_row_scores() -> None:
    """Drop what sessions remembered of row states (tests that count scoring start from none)."""
    _shared_row_scores.clear()


def _remember(scored: RowScores, state: RowState, answer: tuple[bool, float]) -> None:
    """Keep a state's answer unless one is kept; a memory at its bound starts again empty."""
    if state not in scored:
        if len(scored) >= SHARED_STATES:
            scored.clear()
        scored[state] = answer


@dataclass
class _Frontier:
    heap: list[RankKey]
    current: dict[int, float]
    bound: RankKey | None
    cursor: int
    scored: dict[RowState, tuple[bool, float]] | None = None
    """Row state → (feasible, score) for this shape, when the score is known to read nothing
    else (`NodeFinder._remembering`); None otherwise."""
    passes_filters: list[bool] | None = None
    """Per row, whether the shape passes every node filter: fixed for the session."""


class NodeFinder:
    def __init__(self, session: Session) -> None:
        self.session = session
        self._frontiers: dict[ShapeKey, _Frontier] = {}
        self._node_plugins = node_plugins(session)
        classes = [type(p) for p in self._node_plugins]
        self._plain_plugins = all(cls in KNOWN_NODE_PLUGINS for cls in classes)
        """Whether every plugin that scores or filters nodes is one of ours as it is (not a
        subclass), whose score of a whole-GPU pod reads only the row's allocatable, idle and
        releasing vectors and a node filter fixed for the session."""
        self._allocatable: list[bytes] | None = None
        """Each row's allocatable vector as bytes, part of the row states `_remembering` keys on."""
        self._scores_ahead = self._plain_plugins and len(set(classes)) == len(classes)
        """Whether row states may be scored ahead with the kernels' recipe (`_scored_ahead`): it
        scores a row as the node plugins do (what lets a shard rank rows for the engine) when each
        is plainly ours and listed once (one listed twice counts its scores twice)."""

    @functools.cached_property
    def _ranking(self) -> NodeRanking | None:
        """The kernels' recipe for scoring ahead, built on the first miss that needs it."""
        return _ranking_of(self._node_plugins) if self._scores_ahead else None

    def prepare(self, jobs: list[Job]) -> None:
        """Let the executor rank rows for every pod shape of the jobs' pending pods, in one round.

        Not asked of the local executor, which declines every batch (`LocalExecutor`): what
        asking takes would go unused, the plugins' ranking recipe, the list of pending pods and
        the node table (a pass over every row's GPU groups)."""
        if type(self.session.executor) is LocalExecutor:
            return
        ranking = node_ranking(self.session)
        if ranking is None:
            return
        counts: dict[ShapeKey, tuple[TaskShape, int]] = {}
        first: dict[ShapeKey, Task] = {}
        for task in [task for job in jobs for task in job.pending_tasks()]:
            if task.is_shared_gpu:
                continue
            key = self.key_of(task)
            previous = counts.get(key)
            if previous is None:
                counts[key] = (shape_of(task), 1)
                first[key] = task
            else:
                counts[key] = (previous[0], previous[1] + 1)
        if not counts:
            return
        keys = sorted(counts, key=repr)
        shapes = [counts[k][0] for k in keys]
        answers = self.session.executor.rank_shapes(
            node_rows(self.session), ranking, shapes, [counts[k][1] for k in keys]
        )
        if answers is None:
            return
        cursor = len(self.session.nodes.changed_rows)
        for key, answer in zip(keys, answers, strict=True):
            self._frontiers[key] = self._remembering(_frontier_from(answer, cursor), first[key])

    def key_of(self, task: Task) -> ShapeKey:
        """The spec's shape key, kept with its facts (`SpecFacts`) after the first ask: building it
        again for each query (sorting its node selector) cost a twentieth of a small cluster's
        cycle."""
        facts = task.facts
        key = facts.shape_key
        if key is None:
            key = facts.shape_key = shape_key(facts.request_floats, task.needs_gpu, task.spec)
        return key

    def best(self, task: Task) -> int | None:
        """The best feasible row for the task, or None when no row fits: the first row `ordered`
        gives, without a generator (asked once per pod that shares no GPU). `key_of` and
        `_refreshed` are written out: two calls fewer per pod, each its remembered answer's cost."""
        key = task.facts.shape_key
        if key is None:
            key = self.key_of(task)
        frontier = self._frontiers.get(key)
        if frontier is None:
            frontier = self._exact(task, key)
        self._refresh(task, frontier)
        frontier = self._settled(task, key, frontier)
        return frontier.heap[0][1] if frontier.heap else None

    def ordered(self, task: Task) -> Generator[int, None, None]:
        """Feasible rows best first, produced lazily; the heap is left as it was found."""
        key = self.key_of(task)
        frontier = self._refreshed(task, key)
        taken: list[RankKey] = []
        yielded: set[int] = set()
        try:
            while True:
                settled = self._settled(task, key, frontier)
                if settled is not frontier:
                    for entry in taken:
                        heapq.heappush(frontier.heap, entry)
                    taken, frontier = [], settled
                if not frontier.heap:
                    return
                entry = heapq.heappop(frontier.heap)
                taken.append(entry)
                if entry[1] not in yielded:
                    yielded.add(entry[1])
                    yield entry[1]
        finally:
            for entry in taken:
                heapq.heappush(frontier.heap, entry)

    def _refreshed(self, task: Task, key: ShapeKey) -> _Frontier:
        """The shape's frontier with the rows changed since it last looked re-scored."""
        frontier = self._frontiers.get(key)
        if frontier is None:
            frontier = self._exact(task, key)
        self._refresh(task, frontier)
        return frontier

    def _settled(self, task: Task, key: ShapeKey, frontier: _Frontier) -> _Frontier:
        """The frontier with outdated entries dropped from its top, or an exact one in its place
        once its best no longer beats what the executor left out (`bound`)."""
        while True:
            heap, current = frontier.heap, frontier.current
            while heap and current.get(heap[0][1]) != heap[0][0]:
                heapq.heappop(heap)
            if frontier.bound is None or (heap and heap[0] <= frontier.bound):
                return frontier
            frontier = self._exact(task, key)

    def _exact(self, task: Task, key: ShapeKey) -> _Frontier:
        """Every row scored: on a small table whose row states the memory all holds (a cycle like
        the last), read back from it, which gives the very floats scanning gives; otherwise by a
        scan, whose answers a small table's memory keeps."""
        session = self.session
        frontier = self._remembering(_Frontier([], {}, None, len(session.nodes.changed_rows)), task)
        rows = session.all_rows()
        small = frontier.scored is not None and len(rows) < SMALL_CHANGE
        answers = self._all_recalled(frontier) if small else None
        if answers is None:
            feasible, scores = score_rows(session, task, rows)
            answers = list(zip(rows.tolist(), feasible.tolist(), scores.tolist(), strict=True))
            if small:
                assert frontier.scored is not None
                for state, (_, ok, value) in zip(self._row_states(frontier), answers, strict=True):
                    _remember(frontier.scored, state, (ok, value))
        frontier.heap = [(-value, row) for row, ok, value in answers if ok]
        heapq.heapify(frontier.heap)
        frontier.current = {row: rank for rank, row in frontier.heap}
        self._frontiers[key] = frontier
        return frontier

    def _row_states(self, frontier: _Frontier) -> list[RowState]:
        """Every row's state as the memory keys it (`_remembering`)."""
        assert frontier.passes_filters is not None and self._allocatable is not None
        nodes = self.session.nodes
        return [
            (passes, allocatable, idle.tobytes(), releasing.tobytes())
            for passes, allocatable, idle, releasing in zip(
                frontier.passes_filters, self._allocatable, nodes.idle, nodes.releasing, strict=True
            )
        ]

    def _all_recalled(self, frontier: _Frontier) -> list[tuple[int, bool, float]] | None:
        """(row, feasible, score) of every row from the memory, or None if it lacks a row's state."""
        assert frontier.scored is not None
        answers = []
        for row, state in enumerate(self._row_states(frontier)):
            known = frontier.scored.get(state)
            if known is None:
                return None
            answers.append((row, *known))
        return answers

    def _remembering(self, frontier: _Frontier, task: Task) -> _Frontier:
        """Give the frontier a memory of row states when its shape's scores read nothing else.

        A whole-GPU pod's score from our own node plugins reads, of a row, its allocatable,
        idle and releasing vectors and whether it passes the node filters (no shared-GPU group:
        those plugins have no opinion on such a pod); so rows in the same state score the
        same, bit for bit. On a cluster of alike nodes most placements leave a row in a state
        some row was in before, and re-scoring it (a dozen numpy calls on one row) was a third
        of a placement.
        """
        if not (self._plain_plugins and task.needs_gpu and not task.is_shared_gpu):
            return frontier
        if self._allocatable is None:
            self._allocatable = [row.tobytes() for row in self.session.nodes.table.allocatable]
        passes = np.ones(len(self.session.nodes.table), dtype=bool)
        for plugin in self.session.plugins_with("node_filter"):
            node_filter = plugin.node_filter(task)
            if node_filter is not None:
                passes &= node_filter.mask
        frontier.scored = (
            {} if self._ranking is None else shared_row_scores(self._ranking, task.request.tobytes())
        )
        frontier.passes_filters = passes.tolist()
        return frontier

    def _refresh(self, task: Task, frontier: _Frontier) -> None:
        changed = self.session.nodes.changed_rows
        if frontier.cursor == len(changed):
            return
        fresh = changed[frontier.cursor :]
        frontier.cursor = len(changed)
        if frontier.scored is not None and len(fresh) < SMALL_CHANGE:
            # One changed row (the pod just placed) is its own sorted set, without building one:
            # this runs per pod shape per placement.
            distinct = fresh if len(fresh) == 1 else sorted(set(fresh))
            answers = self._recalled(task, frontier, distinct)
        else:
            rows = _distinct_sorted(fresh)
            feasible, scores = score_rows(self.session, task, rows)
            answers = list(zip(rows.tolist(), feasible.tolist(), scores.tolist(), strict=True))
        for row, ok, value in answers:
            if ok:
                frontier.current[row] = -value
                heapq.heappush(frontier.heap, (-value, row))
            else:
                frontier.current.pop(row, None)

    def _recalled(self, task: Task, frontier: _Frontier, rows: list[int]) -> list[tuple[int, bool, float]]:
        """(row, feasible, score) of a few rows, each scored once per row state (`_remembering`)."""
        assert frontier.scored is not None and frontier.passes_filters is not None
        assert self._allocatable is not None
        nodes = self.session.nodes
        answers = []
        for row in rows:
            state = (
                frontier.passes_filters[row],
                self._allocatable[row],
                _row_bytes(*nodes.idle_rows[row]),
                _row_bytes(*nodes.releasing_rows[row]),
            )
            known = frontier.scored.get(state)
            if known is None:
                known = self._scored_ahead(task, frontier, row)
                _remember(frontier.scored, state, known)
            answers.append((row, *known))
        return answers

    def _scored_ahead(self, task: Task, frontier: _Frontier, row: int) -> tuple[bool, float]:
        """(feasible, score) of the row as it is; with the kernels' recipe, the states pods of
        this shape allocated on it one after another would leave it in are scored in the same
        pass and remembered too.

        On alike nodes the first row to fill goes through the states every other row will, and
        scoring them one placement at a time was a numpy pass on one row (a dozen calls) for
        each. A successor is built with the very float subtraction allocating a pod books
        (`NodeState._charge`), so a row that reaches it finds the score scoring it then gives;
        one never reached is never looked up.
        """
        assert frontier.scored is not None and frontier.passes_filters is not None
        assert self._allocatable is not None
        if self._ranking is None:
            feasible, scores = score_rows(self.session, task, np.array([row], dtype=np.int64))
            return bool(feasible[0]), float(scores[0])
        nodes = self.session.nodes
        request = task.request.tolist()
        releasing = nodes.releasing_rows[row]
        idle = nodes.idle_rows[row]
        states = [idle]
        while len(states) <= LOOK_AHEAD and _holds(request, idle, releasing):
            idle = [free - wanted for free, wanted in zip(idle, request, strict=True)]
            states.append(idle)
        count = len(states)
        ahead = NodeRows(
            rows=np.arange(count),
            specs=[nodes.table.specs[row]] * count,
            allocatable=np.repeat(nodes.table.allocatable[row : row + 1], count, axis=0),
            idle=np.array(states),
            releasing=np.array([releasing] * count),
            schedulable=np.ones(count, dtype=bool),
            has_open_group=np.zeros(count, dtype=bool),
        )
        passes = frontier.passes_filters[row]
        feasible_ahead = (kernels.fits(task.request, ahead.idle + ahead.releasing) & passes).tolist()
        scores = kernels.score(self._ranking, shape_of(task), ahead, kernels.fits(task.request, ahead.idle))
        answers = list(zip(feasible_ahead, scores.tolist(), strict=True))
        allocatable, releasing_bytes = self._allocatable[row], ahead.releasing[0].tobytes()
        for state, answer in zip(ahead.idle[1:], answers[1:], strict=True):
            _remember(frontier.scored, (passes, allocatable, state.tobytes(), releasing_bytes), answer)
        return answers[0]


_row_bytes = struct.Struct(f"{NUM_RESOURCES}d").pack
"""A row's floats as the bytes of their float64 array (native order, as `tobytes` gives), without
making the array: the key a row state is remembered under."""

LOOK_AHEAD = 8
"""At most this many successor states of a row are scored along with it (`_scored_ahead`): a
pod of one GPU on a node of eight goes through eight."""


def _holds(request: list[float], idle: list[float], releasing: list[float]) -> bool:
    """Whether a row in this state has room for another pod of the request (only where scoring
    ahead stops: the states' feasibility itself comes from the kernels)."""
    return all(
        [
            wanted <= free + freed + EPSILON
            for wanted, free, freed in zip(request, idle, releasing, strict=True)
        ]
    )


SMALL_CHANGE = 32
"""Below this many changed rows a Python set sorts them faster than `np.unique`."""


def _distinct_sorted(rows: list[int]) -> np.ndarray:
    """The rows sorted and without repeats, as `np.unique` gives them; between two queries of
    one pod shape usually a placement or two changed a row, where numpy's fixed cost dominates."""
    if len(rows) < SMALL_CHANGE:
        return np.array(sorted(set(rows)), dtype=np.int64)
    return np.unique(np.array(rows, dtype=np.int64))


def _frontier_from(answer: RankedRows, cursor: int) -> _Frontier:
    heap = [
        (-float(value), int(row))
        for row, value in zip(answer.rows.tolist(), answer.scores.tolist(), strict=True)
    ]
    heapq.heapify(heap)
    return _Frontier(heap, {row: key for key, row in heap}, answer.bound, cursor)


def score_rows(session: Session, task: Task, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(feasible, summed score) of the rows for the task, from the enabled plugins."""
    feasible = session.fits_with_releasing(task, rows)
    for plugin in session.plugins_with("node_filter"):
        node_filter = plugin.node_filter(task)
        if node_filter is not None:
            feasible = feasible & node_filter.mask[rows]
    total = np.zeros(len(rows))
    for plugin in session.plugins_with("node_scores"):
        scores = plugin.node_scores(task, rows)
        if scores is not None:
            total += scores
    return feasible, total
