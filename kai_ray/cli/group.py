"""`kai-ray group`: one grouping conformance case through the operators' podgrouper."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from kai_ray.cli.api import Output, OutputOption
from kai_ray.cli.app import fail
from kai_ray.report.table import terminal_console


def group(
    case: Annotated[
        Path, typer.Argument(help="A grouping conformance case (conformance/grouping/FORMAT.md).")
    ],
    output: OutputOption = Output.TABLE,
) -> None:
    """Group the case's pod as KAI's podgrouper would and print its PodGroup metadata."""
    from kai_ray_operators import GroupingError
    from kai_ray_operators.conformance import CaseError, load_case, run_case
    from kai_ray_operators.table import print_grouping

    try:
        result = run_case(load_case(case))
    except CaseError as exc:
        fail([str(exc)])
    except GroupingError as exc:
        typer.echo(f"cannot group: {exc}", err=True)
        raise typer.Exit(code=1) from None
    if output == Output.JSON:
        typer.echo(json.dumps(result, indent=2, sort_keys=True))
        return
    print_grouping(result, terminal_console())
