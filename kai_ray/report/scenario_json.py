"""The JSON a conformance run prints (FORMAT.md, "Output of kai-ray simulate").

Keys are sorted and numbers rounded so the same input prints the same bytes.
"""

from __future__ import annotations

import json
from typing import Any

from kai_ray.cluster.sim.simulator import ClusterView, CycleResult
from kai_ray.engine.plan import Plan, TaskState

DIGITS = 6


def _task(state: TaskState) -> dict[str, Any]:
    return {
        "status": state.status.value,
        "node": state.node,
        "gpuGroups": list(state.gpu_groups),
        "acceptedGpus": round(state.accepted_gpus, DIGITS),
    }


def _job_name(key: str) -> str:
    """FORMAT.md keys tasks by job name alone (scenario job names are unique), not namespace/name."""
    return key.rpartition("/")[2]


def _view(view: ClusterView) -> dict[str, Any]:
    return {
        "tasks": {f"{_job_name(job)}/{task}": _task(state) for (job, task), state in view.tasks.items()},
        "nodes": {
            name: {"idleGpus": round(gpus.idle, DIGITS), "releasingGpus": round(gpus.releasing, DIGITS)}
            for name, gpus in view.nodes.items()
        },
    }


def _counts(plan: Plan) -> dict[str, int]:
    return {"binds": len(plan.binds), "evictions": len(plan.evictions), "pipelined": len(plan.pipelined)}


def cycles_document(results: list[CycleResult]) -> dict[str, Any]:
    cycles = [{"start": _view(r.start), "end": _view(r.end), "counts": _counts(r.plan)} for r in results]
    totals = {key: sum(c["counts"][key] for c in cycles) for key in ("binds", "evictions", "pipelined")}
    last = cycles[-1]["end"] if cycles else {"tasks": {}, "nodes": {}}
    return {"cycles": cycles, "tasks": last["tasks"], "nodes": last["nodes"], "counts": totals}


def render_json(results: list[CycleResult]) -> str:
    return json.dumps(cycles_document(results), sort_keys=True, indent=1)
