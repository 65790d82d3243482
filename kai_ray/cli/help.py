"""How `kai-ray --help` looks: command classes that drop typer's type noise.

Typer (0.2x) prints a `<bool>` type after every flag and wraps required arguments in braces on
the usage line (`simulate [OPTIONS] {path}`): both read as syntax a newcomer should type.  These
classes show a flag as just its name and an argument as its name in capitals (`PATH`, optional
ones in brackets), as most command lines do; nothing else about the help changes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import typer
from typer.core import TyperArgument, TyperCommand, TyperGroup, TyperOption

# Typer carries its own copy of click (`typer._click`), private: its types are spelled Any here.

__all__ = ["KaiRayCommand", "KaiRayGroup", "KaiRayTyper"]

_F = TypeVar("_F", bound=Callable[..., Any])


def _tidy(params: list[Any]) -> list[Any]:
    for param in params:
        if isinstance(param, TyperOption) and param.is_flag and param.metavar is None:
            # An empty metavar is what typer prints instead of "<bool>".
            param.metavar = ""
        elif isinstance(param, TyperArgument) and param.metavar is None and param.name:
            param.metavar = param.name.upper()
    return params


def _usage(command: Any, ctx: Any) -> list[str]:
    pieces = [command.options_metavar] if command.options_metavar else []
    for param in command.get_params(ctx):
        if isinstance(param, TyperArgument):
            name = param.metavar or (param.name or "").upper()
            name = name if param.required else f"[{name}]"
            pieces.append(name + ("..." if param.nargs != 1 else ""))
    return pieces


class KaiRayCommand(TyperCommand):
    """A command whose help shows `--flag` rather than `--flag <bool>`, and `PATH` not `{path}`."""

    def get_params(self, ctx: Any) -> list[Any]:
        return _tidy(super().get_params(ctx))

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        return _usage(self, ctx)


class KaiRayGroup(TyperGroup):
    """The same for a group (`kai-ray --help` itself: --install-completion and --help are flags)."""

    def get_params(self, ctx: Any) -> list[Any]:
        return _tidy(super().get_params(ctx))

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        return [*_usage(self, ctx), self.subcommand_metavar]


class KaiRayTyper(typer.Typer):
    """A `typer.Typer` whose group and commands default to the classes above, so every command
    of `kai-ray` gets the same help without each decorator having to ask for it."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("cls", KaiRayGroup)
        super().__init__(**kwargs)

    def command(self, name: str | None = None, **kwargs: Any) -> Callable[[_F], _F]:
        kwargs["cls"] = kwargs.get("cls") or KaiRayCommand
        return super().command(name, **kwargs)
