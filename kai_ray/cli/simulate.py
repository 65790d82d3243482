"""`kai-ray simulate`: a conformance scenario or workload manifests, scheduled on the simulated cluster."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from kai_ray.api.config import SchedulerConfig
from kai_ray.api.constants import NODE_POOL_LABEL
from kai_ray.api.manifests import read_manifest_documents
from kai_ray.api.usage_db import parse_duration
from kai_ray.cli.api import Output, OutputOption
from kai_ray.cli.app import fail
from kai_ray.cli.options import (
    ExecutorName,
    ExecutorOption,
    RayAddressOption,
    ShardBy,
    ShardByOption,
    ShardsOption,
    executor_for,
    scheduler_config,
)
from kai_ray.cluster.sim.past_usage import PastUsage, PastUsageError, read_past_usage, read_usage_file
from kai_ray.cluster.sim.scenario import ScenarioError, is_scenario_file, load_scenario
from kai_ray.cluster.sim.simulator import SimulatedCluster
from kai_ray.engine.usage import UsageRecorder
from kai_ray.model.objects import ClusterState
from kai_ray.report.scenario_json import render_json
from kai_ray.report.table import render_table, terminal_console


@dataclass(frozen=True)
class _Loaded:
    """What `simulate` runs: the cluster, its config, time-based fair share, and how many cycles."""

    state: ClusterState
    config: SchedulerConfig
    recorder: UsageRecorder | None
    step: float
    cycles: int


def _load(path: Path, cycles: int | None, config_file: Path | None, usage: _UsageOptions) -> _Loaded:
    if is_scenario_file(path):
        if config_file is not None:
            fail([f"{path}: a conformance scenario carries its own config; --config is for manifests"])
        try:
            scenario = load_scenario(path)
            inline = read_past_usage(path)
        except (ScenarioError, PastUsageError) as exc:
            fail([str(exc)])
        if inline is not None and usage.stated is not None:
            fail([f"{path}: the scenario states its usage already; --usage is for manifests"])
        config, recorder, step = _with_usage(
            scenario.state, scenario.config, inline or usage.stated, usage.step
        )
        return _Loaded(scenario.state, config, recorder, step, cycles or scenario.cycles)
    from kai_ray_operators.manifests import cluster_from_workload_documents

    if path.is_dir():
        _refuse_scenario_directory(path)
    config = scheduler_config(config_file)
    documents, read_problems = read_manifest_documents(path)
    if not documents and not read_problems:
        fail([f"{path}: no Kubernetes manifests in it (looked for *.yaml, *.yml and *.json files)"])
    state, problems = cluster_from_workload_documents(documents, read_problems)
    for notice in (p for p in problems if p.warning):
        typer.echo(f"warning: {notice}", err=True)
    errors = [str(p) for p in problems if not p.warning]
    if errors:
        fail(errors)
    config, recorder, step = _with_usage(state, config, usage.stated, usage.step)
    return _Loaded(state, config, recorder, step, cycles or 1)


def _simulate_pools(loaded: _Loaded, executor: ExecutorName, ray_address: str | None, output: Output) -> None:
    """`simulate --shard-by node-pool`: each pool's shard on its own (kai_ray.split.pool_runner)."""
    from kai_ray.model.pools import off_pool_tasks
    from kai_ray.report.pools import render_pools_json, render_pools_table
    from kai_ray.split.pool_runner import LocalPoolRunner, PoolRunner, RayPoolRunner, simulate_pools

    if loaded.recorder is not None:
        fail(["--shard-by node-pool: time-based fair share (usage) is not supported per node pool yet"])
    for off in off_pool_tasks(loaded.state, NODE_POOL_LABEL):
        typer.echo(f"warning: {off.describe()}", err=True)
    runner: PoolRunner = RayPoolRunner(ray_address) if executor == ExecutorName.RAY else LocalPoolRunner()
    per_pool = simulate_pools(loaded.state, loaded.config, loaded.cycles, runner)
    if output == Output.JSON:
        typer.echo(render_pools_json(per_pool))
    else:
        render_pools_table(per_pool, terminal_console())


class _UsageOptions:
    """`simulate`'s time-based fair share options: stated past usage and the step between cycles."""

    def __init__(self, usage_file: Path | None, step: str | None) -> None:
        try:
            self.stated = None if usage_file is None else read_usage_file(usage_file)
        except PastUsageError as exc:
            fail([str(exc)])
        try:
            self.step = None if step is None else parse_duration(step)
        except ValueError as exc:
            fail([f"--clock-step: {exc}"])
        if self.step is not None and self.step < 0:
            fail([f"--clock-step: must not be negative, got {step!r}"])


def _with_usage(
    state: ClusterState, config: SchedulerConfig, stated: PastUsage | None, step: float | None
) -> tuple[SchedulerConfig, UsageRecorder | None, float]:
    """The config with time-based fair share on when a usage block or usageDBConfig asks for it,
    its recorder, and the clock step: one query resolution unless given; without usage, none unless
    given (a scenario's clock stands still, as in KAI's harness)."""
    if stated is not None:
        update: dict[str, Any] = {"usage_db": stated.usage_db}
        if stated.k_value is not None:
            update["k_value"] = stated.k_value
        config = config.model_copy(update=update)
    if config.usage_db is None:
        return config, None, step or 0.0
    params = config.usage_db.params
    parents = {queue.name: queue.parent for queue in state.queues}
    recorder = UsageRecorder(params, stated.with_parents(parents) if stated is not None else None)
    return config, recorder, params.query_resolution_seconds if step is None else step


def _refuse_scenario_directory(path: Path) -> None:
    """A directory of conformance scenarios is not one cluster: each scenario is its own, so they
    are run one file at a time (reading them as manifests would only fail on every document)."""
    scenarios = sorted(p for p in path.rglob("*") if is_scenario_file(p))
    if not scenarios:
        return
    named = ", ".join(str(p.relative_to(path)) for p in scenarios[:3])
    more = f" and {len(scenarios) - 3} more" if len(scenarios) > 3 else ""
    fail(
        [
            f"{path}: a directory of conformance scenarios ({named}{more}); scenarios are run one file "
            f"at a time: kai-ray simulate {scenarios[0]}"
        ]
    )


def simulate(
    path: Annotated[
        Path, typer.Argument(help="A conformance scenario file, or Kubernetes manifests (file or directory).")
    ],
    cycles: Annotated[int | None, typer.Option("--cycles", min=1, help="Scheduling cycles to run.")] = None,
    output: OutputOption = Output.TABLE,
    executor: ExecutorOption = ExecutorName.LOCAL,
    shards: ShardsOption = 2,
    ray_address: RayAddressOption = None,
    shard_by: ShardByOption = ShardBy.NONE,
    config_file: Annotated[
        Path | None,
        typer.Option("--config", help="KAI's scheduler configuration (config.yaml or its ConfigMap)."),
    ] = None,
    usage_file: Annotated[
        Path | None,
        typer.Option("--usage", help="Past queue usage for time-based fair share (docs/fairshare.md)."),
    ] = None,
    clock_step: Annotated[
        str | None,
        typer.Option(
            "--clock-step",
            help="Time between cycles, e.g. 10m (default: the usage resolution, 1m; 0 without usage).",
        ),
    ] = None,
) -> None:
    """Schedule PATH on the embedded simulated cluster and print the result."""
    if not path.exists():
        fail([f"{path}: no such file or directory"])
    loaded = _load(path, cycles, config_file, _UsageOptions(usage_file, clock_step))
    if shard_by == ShardBy.NODE_POOL:
        _simulate_pools(loaded, executor, ray_address, output)
        return
    if shard_by == ShardBy.JOBS:
        fail(["--shard-by jobs: split cycles run in `kai-ray bench` only (see docs/sharding.md)"])
    chosen = executor_for(executor, shards, ray_address)
    cluster = SimulatedCluster(loaded.state, loaded.config, chosen, loaded.recorder, loaded.step)
    results = cluster.run(loaded.cycles)
    if output == Output.JSON:
        typer.echo(render_json(results))
    else:
        render_table(results, terminal_console())
