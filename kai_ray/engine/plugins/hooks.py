"""Which plugins implement a hook, found once per hook and session: what `Session.hooked` is."""

from __future__ import annotations

from typing import Protocol

from kai_ray.engine.plugins.base import Plugin

__all__ = ["HasPlugins", "HookLists"]


class HasPlugins(Protocol):
    """What the lists read of a session: its plugins, in order (built after the lists are)."""

    plugins: list[Plugin]


_HOOK_POSITIONS: dict[tuple[tuple[type[Plugin], ...], str], list[int]] = {}
"""(The plugins' classes in order, a hook) → positions of the plugins whose class overrides it.
Which class overrides a hook does not change, and every session of a configuration asks it of
the same classes for each hook it reads (asking each class was about 1% of a small cycle)."""


class HookLists(dict[str, list[Plugin]]):
    """`Session.plugins_with` by hook, each list made on its first reading (after the plugins are
    built) and kept for the session: which class overrides a hook does not change."""

    def __init__(self, session: HasPlugins) -> None:
        super().__init__()
        self.session = session
        self._classes: tuple[type[Plugin], ...] | None = None

    def __missing__(self, hook: str) -> list[Plugin]:
        plugins = self.session.plugins
        if self._classes is None:
            self._classes = tuple(map(type, plugins))
        key = (self._classes, hook)
        positions = _HOOK_POSITIONS.get(key)
        if positions is None:
            default = getattr(Plugin, hook)
            positions = [i for i, cls in enumerate(self._classes) if getattr(cls, hook) is not default]
            _HOOK_POSITIONS[key] = positions
        found = [plugins[i] for i in positions]
        self[hook] = found
        return found
