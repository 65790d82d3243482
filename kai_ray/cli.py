"""The `kai-ray` command line."""

from __future__ import annotations

import enum
import sys
from pathlib import Path

import typer

from kai_ray.cluster.sim.scenario import ScenarioError, is_scenario_file, load_scenario
from kai_ray.cluster.sim.simulator import SimulatedCluster
from kai_ray.report.scenario_json import render_json

app = typer.Typer(help="kai-ray: a Ray-native, KAI-compatible GPU scheduler.", no_args_is_help=True)


class OutputFormat(enum.StrEnum):
    TABLE = "table"
    JSON = "json"


class ExecutorName(enum.StrEnum):
    LOCAL = "local"


@app.callback()
def main() -> None:
    """Schedule GPU workloads the way KAI Scheduler does."""


@app.command()
def simulate(
    path: Path = typer.Argument(..., help="A conformance scenario file, or Kubernetes manifests (file or directory)."),
    cycles: int | None = typer.Option(None, "--cycles", min=1, help="Scheduling cycles to run."),
    output: OutputFormat = typer.Option(OutputFormat.TABLE, "--output", help="table or json"),
    executor: ExecutorName = typer.Option(ExecutorName.LOCAL, "--executor", help="where node work runs"),
) -> None:
    """Schedule PATH on the embedded simulated cluster and print the result."""
    if not path.exists():
        _fail([f"{path}: no such file or directory"])
    if is_scenario_file(path):
        try:
            scenario = load_scenario(path)
        except ScenarioError as exc:
            _fail([str(exc)])
        cluster = SimulatedCluster(scenario.state, scenario.config)
        results = cluster.run(cycles or scenario.cycles)
    else:
        _fail([f"{path}: manifests are not supported yet"])
    if output == OutputFormat.JSON:
        typer.echo(render_json(results))
    else:
        typer.echo(render_json(results))


def _fail(problems: list[str]) -> None:
    for line in problems:
        typer.echo(line, err=True)
    raise typer.Exit(code=2)


if __name__ == "__main__":
    sys.exit(app())
