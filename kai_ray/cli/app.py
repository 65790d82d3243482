"""The `kai-ray` Typer app every command group registers on, and how a command fails on bad
input (its problems on stderr, exit status 2)."""

from __future__ import annotations

from typing import NoReturn

import typer

from kai_ray.cli.help import KaiRayTyper

app = KaiRayTyper(help="kai-ray: a Ray-native, KAI-compatible GPU scheduler.", no_args_is_help=True)


@app.callback()
def main() -> None:
    """Schedule GPU workloads the way KAI Scheduler does."""


def fail(problems: list[str]) -> NoReturn:
    for line in problems:
        typer.echo(line, err=True)
    raise typer.Exit(code=2)


def error_exit(message: str, code: int = 2) -> NoReturn:
    """The API commands' one line, `error: ...` on stderr, and their exit status (2: bad input)."""
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code=code)
