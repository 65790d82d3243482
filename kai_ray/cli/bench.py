"""`kai-ray bench`: benchmark shapes in process, on a dev cluster (`--kube`) or over gRPC (`--grpc`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from kai_ray.api.constants import NODE_POOL_LABEL, QUEUE_LABEL
from kai_ray.bench.emit import write_scenario
from kai_ray.bench.render import render_results
from kai_ray.bench.runner import BenchResult, run_compare, run_shape, run_split_compare, run_split_shape
from kai_ray.bench.shapes import SHAPES, build_shape
from kai_ray.cli.app import fail
from kai_ray.cli.options import (
    BindModeOption,
    ExecutorName,
    ExecutorOption,
    RayAddressOption,
    ShardBy,
    ShardByOption,
    ShardsOption,
    executor_for,
    grouper_factory,
)
from kai_ray.cluster.kube.bind_mode import BindMode
from kai_ray.report.table import terminal_console
from kai_ray.split.cycle import LocalParts, SplitCycles


def bench(
    shape: Annotated[
        str | None,
        typer.Option(
            "--shape",
            help=f"Shape name: {', '.join([*SHAPES, 'churn-NxP'])} (N nodes, J jobs, P pods each), "
            "e.g. fill-500x4000.",
            show_default=False,
        ),
    ] = None,
    repeat: Annotated[int, typer.Option("--repeat", min=1, help="Cycles to time.")] = 3,
    json_file: Annotated[Path | None, typer.Option("--json", help="Also write the result here.")] = None,
    emit_scenario: Annotated[
        Path | None,
        typer.Option("--emit-scenario", help="Write the shape as a conformance scenario and exit untimed."),
    ] = None,
    executor: ExecutorOption = ExecutorName.LOCAL,
    shards: ShardsOption = 2,
    ray_address: RayAddressOption = None,
    compare: Annotated[
        bool,
        typer.Option(
            "--compare",
            help="Time the local executor and Ray with 1 and --shards shards on the same shape, their "
            "cycles taking turns; prints each median over the local one and a projection fitted on both "
            "Ray runs.",
        ),
    ] = False,
    kube: Annotated[
        bool,
        typer.Option(
            "--kube", help="End to end on a dev cluster (API server, etcd, kwok) instead of a shape."
        ),
    ] = False,
    grpc: Annotated[
        bool,
        typer.Option(
            "--grpc",
            help="The gRPC API on the simulated cluster: submits/s, Explain latency, cycle time.",
        ),
    ] = False,
    nodes: Annotated[int, typer.Option("--nodes", min=1, help="With --kube or --grpc: 8-GPU nodes.")] = 500,
    pods: Annotated[
        int,
        typer.Option(
            "--pods", min=1, help="With --kube: one-GPU pods; with --grpc: pods, in gangs of 4 × 2 GPUs."
        ),
    ] = 4000,
    clients: Annotated[
        int, typer.Option("--clients", min=1, help="With --grpc: concurrent clients (threads, own channels).")
    ] = 8,
    timeout: Annotated[
        float, typer.Option("--timeout", min=1, help="With --kube: give up after this many seconds.")
    ] = 600.0,
    bind_mode: BindModeOption = BindMode.BIND_REQUEST,
    shard_by: ShardByOption = ShardBy.NONE,
    same_snapshot: Annotated[
        bool,
        typer.Option(
            "--same-snapshot",
            help="Time every cycle over one snapshot compiled once (a served scheduler's steady "
            "state: unchanged pods keep their specs) instead of a shape built afresh for each.",
        ),
    ] = False,
) -> None:
    """Time scheduling cycles on a generated cluster shape, or end to end with --kube or --grpc."""
    if grpc:
        from kai_ray.bench import grpc_bench

        try:
            grpc_result = grpc_bench.run_grpc_bench(
                nodes, pods, clients=clients, repeat=repeat, progress=lambda line: typer.echo(line, err=True)
            )
        except ValueError as exc:
            fail([str(exc)])
        grpc_bench.render(grpc_result, terminal_console())
        if json_file is not None:
            json_file.write_text(json.dumps(grpc_result.as_json(), indent=2) + "\n")
        if grpc_result.errors:
            raise typer.Exit(code=1)
        return
    if kube:
        from kai_ray.bench import burst as burst_bench
        from kai_ray.bench import kube as kube_bench
        from kai_ray.devcluster import DevClusterError

        burst = burst_bench.burst_sizes(shape) if shape is not None else None
        if burst is not None:
            try:
                burst_result = burst_bench.run_burst_bench(
                    *burst, progress=lambda line: typer.echo(line, err=True)
                )
            except (TimeoutError, DevClusterError) as exc:
                fail([str(exc)])
            burst_bench.render(burst_result, terminal_console())
            if json_file is not None:
                json_file.write_text(json.dumps(burst_result.as_json(), indent=2) + "\n")
            return
        try:
            idle_sizes = kube_bench.idle_sizes(shape) if shape is not None else None
            kube_result = kube_bench.run_kube_bench(
                grouper_factory(QUEUE_LABEL, NODE_POOL_LABEL, None),
                *(idle_sizes or (nodes, pods)),
                timeout=timeout,
                progress=lambda line: typer.echo(line, err=True),
                bind_mode=bind_mode,
                idle_seconds=kube_bench.IDLE_WINDOW_SECONDS if idle_sizes is not None else 0.0,
            )
        except (ValueError, DevClusterError) as exc:
            fail([str(exc)])
        kube_bench.render(kube_result, terminal_console())
        if json_file is not None:
            json_file.write_text(json.dumps(kube_result.as_json(), indent=2) + "\n")
        if kube_result.bound < kube_result.pods:
            raise typer.Exit(code=1)
        return
    if shape is None:
        fail(["give --shape NAME, or --kube, or --grpc"])
    try:
        if emit_scenario is not None:
            write_scenario(build_shape(shape), emit_scenario)
            typer.echo(f"wrote {emit_scenario}")
            return
        if shard_by == ShardBy.NODE_POOL:
            if same_snapshot:
                fail(["--same-snapshot: node-pool runs schedule each pool's own cluster; leave it out"])
            _bench_pools(shape, repeat, executor == ExecutorName.RAY, ray_address, json_file)
            return
        if shard_by == ShardBy.JOBS:
            split = _split_cycles(executor, shards, ray_address)
            results = (
                run_split_compare(shape, repeat, split, same_snapshot)
                if compare
                else [run_split_shape(shape, repeat, split, same_snapshot)]
            )
            render_results(shape, results, terminal_console())
            _write_results(json_file, shape, results)
            return
        if compare:
            from kai_ray.distributed.ray_executor import RayExecutor

            results = run_compare(
                shape,
                repeat,
                lambda count: RayExecutor(count, ray_address, pool_label=NODE_POOL_LABEL),
                shards,
                same_snapshot,
            )
        else:
            chosen = executor_for(executor, shards, ray_address)
            results = [run_shape(shape, repeat, chosen, shards if chosen is not None else 1, same_snapshot)]
    except ValueError as exc:
        fail([str(exc)])
    render_results(shape, results, terminal_console())
    _write_results(json_file, shape, results)


def _write_results(json_file: Path | None, shape: str, results: list[BenchResult]) -> None:
    if json_file is not None:
        document = (
            results[0].as_json()
            if len(results) == 1
            else {"shape": shape, "results": [r.as_json() for r in results]}
        )
        json_file.write_text(json.dumps(document, indent=2) + "\n")


def _split_cycles(executor: ExecutorName, parts: int, address: str | None) -> SplitCycles:
    """Split cycles over `parts` parts: Ray actors, or in turn in this process (the reference)."""
    if executor == ExecutorName.LOCAL:
        return SplitCycles(parts, LocalParts(NODE_POOL_LABEL))
    from kai_ray.split.ray_parts import RayParts

    return SplitCycles(parts, RayParts(parts, address, pool_label=NODE_POOL_LABEL))


def _bench_pools(
    shape: str, repeat: int, use_ray: bool, ray_address: str | None, json_file: Path | None
) -> None:
    """`bench --shard-by node-pool`: the shape whole, by pool in-process, and by pool in Ray."""
    from kai_ray.bench.pools import render_pool_bench, run_pool_shape

    result = run_pool_shape(shape, repeat, ray_address, use_ray)
    render_pool_bench(result, terminal_console())
    if json_file is not None:
        json_file.write_text(json.dumps(result.as_json(), indent=2) + "\n")
