"""Placing one task: filter nodes, score them, take the best that really fits.

Node filtering and scoring are array expressions over all nodes; only the
shared-GPU device choice walks candidates, because it depends on per-GPU
bookkeeping. Returns a `PendingReason` on failure so a pending job can
always say why; when no node fits, it carries each cause's refused nodes.
"""

from __future__ import annotations

import math
from collections.abc import Generator
from dataclasses import dataclass

import numpy as np

from kai_ray.engine.constraints import Verdict
from kai_ray.engine.explanation import node_refusals
from kai_ray.engine.jobs import RequestFloats, Task
from kai_ray.engine.node_finder import score_rows
from kai_ray.engine.nodes import GpuGroup
from kai_ray.engine.reasons import NodeRefusal, PendingCause, PendingReason
from kai_ray.engine.session import Session
from kai_ray.engine.statement import Statement
from kai_ray.model.objects import BlockerCause
from kai_ray.model.resources import EPSILON, GPU, PODS


@dataclass(frozen=True)
class DeviceChoice:
    groups: tuple[str, ...]
    waits_for_release: bool


def place_task(
    session: Session,
    statement: Statement,
    task: Task,
    node_mask: np.ndarray | None,
    pipeline_only: bool,
    bonus: np.ndarray | None = None,
) -> PendingReason | None:
    """`bonus`: extra score per node row (a topology plugin's ordering inside the chosen domain).

    A pod that a rule reading other pods concerns (`PodConstraints.verdict`) walks the node
    finder's ranking to the first row its rules admit; with preferences, a mask or shared GPUs, the
    rows its rules admit are ANDed into the mask and its preferences added to the bonus, and it is
    ranked by a scan as a masked pod is, the same way by every executor."""
    for plugin in session.hooked["pre_predicate"]:
        reason = plugin.pre_predicate(task)
        if reason:
            return PendingReason(_refused_before_nodes(task), reason)
    domain_mask = node_mask
    verdict = None
    constraints = session.pod_constraints
    if constraints is not None:
        verdict = constraints.verdict(task)
        if verdict is not None and verdict.bonus is not None:
            bonus = verdict.bonus if bonus is None else bonus + verdict.bonus
    walks = verdict is not None and node_mask is None and bonus is None and not task.is_shared_gpu
    if verdict is not None and not walks:
        node_mask = verdict.admits if node_mask is None else node_mask & verdict.admits
    if task.is_shared_gpu:
        ranked = _ranked_rows(session, task, node_mask, bonus)
        first = next(ranked, None)
        if first is None:
            return _no_node_fits(session, task, domain_mask)
        failure = _place_shared(session, statement, task, first, ranked, pipeline_only, verdict)
        return None if failure is None else PendingReason(PendingCause.NO_ROOM, failure)
    if walks and verdict is not None:
        best = _first_admitted(session, task, verdict)
    elif node_mask is None and bonus is None:
        best = session.node_finder.best(task)
    else:
        best = next(_scanned_rows(session, task, node_mask, bonus), None)
    if best is None:
        return _no_node_fits(session, task, domain_mask)
    if session.predicates_enabled:
        reason = _node_capacity_problem(session, task, task.spec.gpu)
        if reason:
            return PendingReason(PendingCause.NO_ROOM, reason)
    if (
        not pipeline_only
        and _starts_now(task.facts.request_floats, session.nodes.idle_rows[best])
        and (verdict is None or verdict.starts_now(best))
    ):
        statement.allocate(task, best)
    else:
        statement.pipeline(task, best)
    return None


def _refused_before_nodes(task: Task) -> PendingCause:
    """The cause of a pre-filter's refusal: a pod whose own fields are refused is an invalid
    object, one waiting for a claim or ConfigMap waits for an object; otherwise it fits no node."""
    causes = {blocker.cause for blocker in task.spec.blockers}
    if BlockerCause.INVALID_CONSTRAINT in causes:
        return PendingCause.INVALID
    return PendingCause.WAITING_FOR_OBJECT if causes else PendingCause.NO_ROOM


def _first_admitted(session: Session, task: Task, verdict: Verdict) -> int | None:
    """The best row the node finder ranks that the pod rules admit: the finder's order is a full
    scan's (score, then row), and the rules usually refuse few rows, so walking its heap and
    asking the rules row by row beats a mask over every row and scoring every row again."""
    ranked = session.node_finder.ordered(task)
    try:
        for row in ranked:
            if verdict.admits_row(row):
                return row
        return None
    finally:
        ranked.close()


def _starts_now(request: RequestFloats, idle: list[float]) -> bool:
    """Whether the request fits the idle vector now. Over plain floats: the same IEEE sums and
    comparisons as the numpy expression, without four numpy calls on a vector of four (asked for
    every pod placed); written out per resource, each comparison an `if`'s test (CPython 3.11
    compares two floats cheaply only when a jump follows, not under `all` nor returned as a
    value). Both vectors are one entry per node resource by construction (cpu, memory, gpu, pods)."""
    cpu, memory, gpus, pods = request
    idle_cpu, idle_memory, idle_gpus, idle_pods = idle
    if (  # noqa: SIM103
        cpu <= idle_cpu + EPSILON
        and memory <= idle_memory + EPSILON
        and gpus <= idle_gpus + EPSILON
        and pods <= idle_pods + EPSILON
    ):
        return True
    return False


def _no_node_fits(session: Session, task: Task, node_mask: np.ndarray | None) -> PendingReason:
    """The message counts what turned each node away, filter after filter, so its counts add up to
    the nodes it names; the refusals count each cause over all nodes (`node_refusals`). What-if
    simulations, where failing is the point, get neither.  A pod no rule reading other pods
    concerns, outside any domain mask, is refused for what its shape meets alone: its words are
    remembered per shape until a node changes (`Session.no_fit_explanations`)."""
    if session.simulating:
        return PendingReason(PendingCause.NO_ROOM, f"pod {task.name}: no node fits")
    constraints = session.pod_constraints
    verdict = None if constraints is None else constraints.verdict(task)
    shape = session.node_finder.key_of(task) if node_mask is None and verdict is None else None
    stamp = len(session.nodes.changed_rows)
    known = None if shape is None else session.no_fit_explanations.get(shape)
    if known is not None and known[0] == stamp:
        return PendingReason(PendingCause.NO_ROOM, f"pod {task.name}: {known[1]}", known[2])
    rules = [] if constraints is None or verdict is None else constraints.refusals(task)
    why_not = "; ".join(_why_no_node_fits(session, task, node_mask, verdict, rules))
    explanation = f"0 of {len(session.nodes.table)} nodes fit ({why_not})"
    refusals = tuple(node_refusals(session, task, rules))
    if shape is not None:
        session.no_fit_explanations[shape] = (stamp, explanation, refusals)
    return PendingReason(PendingCause.NO_ROOM, f"pod {task.name}: {explanation}", refusals)


def _ranked_rows(
    session: Session, task: Task, node_mask: np.ndarray | None, bonus: np.ndarray | None
) -> Generator[int, None, None]:
    """Feasible rows best first: incrementally for the whole cluster, by a scan for a subset or a bonus
    (scoring only the subset's rows: a row's score reads that row alone).

    Callers close the generator when done, which hands popped entries back to the node finder.
    The node finder's own generator is handed over as it is, not wrapped: this is asked per pod.
    """
    if node_mask is None and bonus is None:
        return session.node_finder.ordered(task)
    return _scanned_rows(session, task, node_mask, bonus)


def _scanned_rows(
    session: Session, task: Task, node_mask: np.ndarray | None, bonus: np.ndarray | None
) -> Generator[int, None, None]:
    rows = session.all_rows() if node_mask is None else np.flatnonzero(node_mask)
    feasible, scores = score_rows(session, task, rows)
    count = len(session.nodes.table)
    candidates = np.zeros(count, dtype=bool)
    candidates[rows[feasible]] = True
    totals = np.zeros(count) if bonus is None else bonus.copy()
    totals[rows] += scores
    yield from session.executor.rank(candidates, totals).tolist()


def _node_capacity_problem(session: Session, task: Task, accepted_gpus: float) -> str | None:
    for plugin in session.hooked["node_capacity_problem"]:
        reason = plugin.node_capacity_problem(task, accepted_gpus)
        if reason:
            return reason
    return None


RESOURCE_NAMES = ("CPU", "memory", "GPUs", "pod slots")


def _filtered_nodes(
    session: Session, task: Task, node_mask: np.ndarray | None
) -> tuple[np.ndarray, list[str]]:
    """Rows that pass every node filter, and the filters' words for the rows they turned away."""
    candidates = np.ones(len(session.nodes.table), dtype=bool) if node_mask is None else node_mask.copy()
    why_not: list[str] = []
    for plugin in session.plugins:
        node_filter = plugin.node_filter(task)
        if node_filter is None:
            continue
        if np.any(candidates & ~node_filter.mask):
            why_not.append(node_filter.reason)
        candidates &= node_filter.mask
    return candidates, why_not


def _why_no_node_fits(
    session: Session,
    task: Task,
    node_mask: np.ndarray | None,
    verdict: Verdict | None,
    rules: list[NodeRefusal],
) -> list[str]:
    """Only worked out for a failure, so placing a pod never pays for explaining one. `verdict`
    and `rules`: the pod rules' verdict and refusals, worked out once for the message and the
    typed refusals both."""
    candidates, why_not = _filtered_nodes(session, task, node_mask)
    if verdict is not None:
        why_not.extend(str(refusal) for refusal in rules)
        candidates &= verdict.admits
    short = candidates & ~session.fits_with_releasing(task)
    if short.any():
        why_not.append(f"{int(np.count_nonzero(short))} lack free {_missing_resources(session, task, short)}")
    return why_not


def _missing_resources(session: Session, task: Task, rows: np.ndarray) -> str:
    available = session.nodes.idle[rows] + session.nodes.releasing[rows]
    missing = [
        name for d, name in enumerate(RESOURCE_NAMES) if np.any(task.request[d] > available[:, d] + EPSILON)
    ]
    if task.is_shared_gpu:
        missing.append("shared GPU memory")
    return " and ".join(missing) or "resources"


def _place_shared(
    session: Session,
    statement: Statement,
    task: Task,
    first: int,
    rest: Generator[int, None, None],
    pipeline_only: bool,
    verdict: Verdict | None = None,
) -> str | None:
    """Walk rows best first until one has GPUs the task can share (§17)."""
    row = first
    choice = choose_devices(session, task, row)
    while isinstance(choice, str):
        next_row = next(rest, None)
        if next_row is None:
            return choice
        row, choice = next_row, choose_devices(session, task, next_row)
    rest.close()
    non_gpu_idle = np.delete(task.request <= session.nodes.idle[row] + EPSILON, GPU).all()
    waits = verdict is not None and not verdict.starts_now(row)
    if choice.waits_for_release or not non_gpu_idle or pipeline_only or waits:
        statement.pipeline(task, row, choice.groups)
    else:
        statement.allocate(task, row, choice.groups)
    return None


def choose_devices(session: Session, task: Task, row: int) -> DeviceChoice | str:
    """Pick the shared GPUs (existing groups or fresh whole devices) for a task on a node."""
    nodes = session.nodes
    node_memory = float(nodes.table.gpu_memory[row])
    memory = task.gpu_memory_per_device(node_memory)
    if session.predicates_enabled:
        reason = _node_capacity_problem(session, task, task.accepted_gpus(node_memory))
        if reason:
            return reason
    open_groups = {gid: group for gid, group in nodes.fitting_groups(row, memory)}
    idle_whole = math.floor(nodes.idle[row, GPU] + EPSILON)
    releasing_whole = math.floor(nodes.idle[row, GPU] + nodes.releasing[row, GPU] + EPSILON) - idle_whole
    chosen: list[str] = []
    waits = False
    new_groups = 0
    for _ in range(task.spec.gpu_devices):
        best_group = _best_group(session, open_groups, node_memory)
        whole_score = _gpu_score(session, 0.0, whole_device=True)
        use_whole = idle_whole + releasing_whole > 0 and (best_group is None or whole_score > best_group[0])
        if use_whole:
            group_id = nodes.new_group_id(row)
            waits |= idle_whole == 0
            if idle_whole > 0:
                idle_whole -= 1
            else:
                releasing_whole -= 1
            new_groups += 1
        elif best_group is not None:
            group_id = best_group[1]
            waits |= open_groups.pop(group_id).idle_memory + EPSILON < memory
        else:
            return f"pod {task.name}: node {nodes.table.names[row]} has too few GPUs to share"
        chosen.append(group_id)
    free_pods = nodes.idle[row, PODS] + nodes.releasing[row, PODS]
    if session.predicates_enabled and new_groups and free_pods + EPSILON < 1 + new_groups:
        return f"pod {task.name}: node {nodes.table.names[row]} has no pod slot for a GPU reservation pod"
    return DeviceChoice(tuple(chosen), waits)


def _best_group(
    session: Session, groups: dict[str, GpuGroup], node_memory: float
) -> tuple[float, str] | None:
    best: tuple[float, str] | None = None
    for group_id in sorted(groups):
        group = groups[group_id]
        used = (node_memory - group.idle_memory) / node_memory if node_memory else 0.0
        score = _gpu_score(session, used, whole_device=False)
        if best is None or score > best[0]:
            best = (score, group_id)
    return best


def _gpu_score(session: Session, used_fraction: float, *, whole_device: bool) -> float:
    total = 0.0
    for plugin in session.plugins:
        score = plugin.gpu_score(used_fraction, whole_device)
        if score is not None:
            total += score
    return total
