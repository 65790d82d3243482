"""The `kai-ray bench` table for shape runs: one row per executor, then where each cycle's time went.

Kept apart from the CLI so the compare mode's rows, ratios and projections are drawn by one
function whether one executor ran or three.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.table import Table

from kai_ray.bench.projection import PROJECTED_WORKERS
from kai_ray.bench.runner import BenchResult


def render_results(shape: str, results: Sequence[BenchResult], console: Console) -> None:
    """The results table, the time split with its projection, and each run's notes."""
    compared = any(r.ratio_to_local is not None for r in results)
    table = Table(title=f"kai-ray bench {shape}")
    columns = ["executor", "shards", "cycles", "median cycle s"]
    columns += ["x local"] if compared else []
    columns += ["pods placed", "evictions", "pods/s", "peak RSS MB"]
    for column in columns:
        table.add_column(column, justify="right")
    for r in results:
        cells = [r.executor, str(r.shards), str(len(r.runs)), f"{r.median_cycle_seconds:.3f}"]
        cells += [f"{r.ratio_to_local:.2f}" if r.ratio_to_local is not None else ""] if compared else []
        cells += [str(r.pods_placed), str(r.evictions), f"{r.pods_per_second:.0f}", f"{r.peak_rss_mb:.0f}"]
        table.add_row(*cells)
    console.print(table)
    if any(r.time_split is not None for r in results):
        console.print(_split_table(results))
    for r in results:
        _notes(r, console)


def _split_table(results: Sequence[BenchResult]) -> Table:
    """Medians per cycle, in seconds, and the cycle projected for each worker count."""
    table = Table(title="time split per cycle (medians, s) and projected cycle for K workers")
    columns = ["executor", "shards", "driver serial", "shard compute", "merge", "transfer"]
    columns += [f"K={k}" for k in PROJECTED_WORKERS]
    for column in columns:
        table.add_column(column, justify="right")
    for r in results:
        split = r.time_split
        if split is None:
            continue
        compute = "/".join(f"{s:.3f}" for s in split.shard_seconds) or "-"
        projected = r.projection.cycle_seconds if r.projection else {}
        table.add_row(
            r.executor,
            str(r.shards),
            f"{split.driver_serial_seconds:.3f}",
            compute,
            f"{split.merge_seconds:.3f}",
            f"{split.transfer_seconds:.3f}",
            *(f"{projected[k]:.3f}" if k in projected else "" for k in PROJECTED_WORKERS),
        )
    return table


def _notes(result: BenchResult, console: Console) -> None:
    for line in _note_lines(result):
        console.print(line, soft_wrap=True)


def _note_lines(result: BenchResult) -> list[str]:
    """One line per kind of detail the run has: CPU split, KAI's figure, projection, sharding."""
    label = result.executor if result.executor == "local" else f"{result.executor} x{result.shards}"
    lines = []
    if result.cpu_seconds is not None:
        cpu = result.cpu_seconds
        over = "one snapshot, compiled once" if result.same_snapshot else "a shape built afresh each cycle"
        lines.append(
            f"{label} CPU per cycle (medians, ms; {over}): opening {cpu['opening'] * 1000:.3f}, "
            f"actions + plan {cpu['actions_and_plan'] * 1000:.3f}, whole {cpu['cycle'] * 1000:.3f}"
        )
    if result.against_kai is not None:
        kai = result.against_kai
        lines.append(
            f"{label} against KAI's benchmark ({kai['kai_seconds_per_op'] * 1000:g} ms per op, its session "
            f"build and Execute; target {kai['target_seconds'] * 1000:g} ms): actions + plan "
            f"x{kai['actions_and_plan_ratio']:.2f}, whole cycle x{kai['whole_cycle_ratio']:.2f}"
        )
    if result.projection is not None:
        lines.append(f"{label} projection: {result.projection.basis}")
    if result.sharding is not None:
        split = ", ".join(f"{key} {value:.3f}" for key, value in result.sharding.items())
        lines.append(f"{label} sharded batches (medians): {split}")
    if result.split_cycles is not None:
        steps = ", ".join(f"{key} {value:.3f}" for key, value in result.split_cycles.items())
        lines.append(f"{label} split cycle (medians; prepare_s is outside the cycle): {steps}")
    if result.full_rebuild is not None:
        rebuilt = result.full_rebuild
        lines.append(
            f"rebuilt from the cache every cycle: median {rebuilt['median_cycle_seconds']:.3f} s "
            f"(kept models: x{rebuilt['ratio']:.2f} of that); watch events per cycle: "
            f"{rebuilt['event_seconds']:.3f} s"
        )
    return lines
