"""`kai-ray simulate --shard-by node-pool` output: every pool's shard, as one document or per pool.

The JSON is the document `render_json` prints for an unsharded run (same keys, same
rounding), with each cycle's task and node views united over the pools and its counts
added up: pools share no job or node, so nothing is overwritten. A cluster of one pool
therefore prints the very bytes the unsharded run prints. The table gives each pool
its own section, since each pool is its own scheduler with its own queue tree.
"""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console
from rich.rule import Rule

from kai_ray.cluster.sim.simulator import CycleResult
from kai_ray.report.scenario_json import cycles_document
from kai_ray.report.table import render_table

COUNT_KEYS = ("binds", "evictions", "pipelined")


def _united(views: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "tasks": {key: value for view in views for key, value in view["tasks"].items()},
        "nodes": {key: value for view in views for key, value in view["nodes"].items()},
    }


def _added(counts: list[dict[str, int]]) -> dict[str, int]:
    return {key: sum(count[key] for count in counts) for key in COUNT_KEYS}


def pools_document(per_pool: dict[str, list[CycleResult]]) -> dict[str, Any]:
    """The pools' simulations as one `cycles_document`; every pool ran the same number of cycles."""
    documents = [cycles_document(per_pool[pool]) for pool in sorted(per_pool)]
    if not documents:
        return cycles_document([])
    cycles = [
        {
            "start": _united([d["cycles"][index]["start"] for d in documents]),
            "end": _united([d["cycles"][index]["end"] for d in documents]),
            "counts": _added([d["cycles"][index]["counts"] for d in documents]),
        }
        for index in range(len(documents[0]["cycles"]))
    ]
    last = _united(documents)
    return {
        "cycles": cycles,
        "tasks": last["tasks"],
        "nodes": last["nodes"],
        "counts": _added([d["counts"] for d in documents]),
    }


def render_pools_json(per_pool: dict[str, list[CycleResult]]) -> str:
    return json.dumps(pools_document(per_pool), sort_keys=True, indent=1)


def pool_title(pool: str) -> str:
    return f"node pool {pool!r}" if pool else "node pool '' (nodes, queues and PodGroups without the label)"


def render_pools_table(per_pool: dict[str, list[CycleResult]], console: Console) -> None:
    """One section per pool, in pool-name order, each the table an unsharded run prints."""
    for pool in sorted(per_pool):
        console.print(Rule(pool_title(pool)))
        render_table(per_pool[pool], console)
