"""How a plan's binds are carried out; apart so that the CLI names it without loading the client."""

from __future__ import annotations

import enum

__all__ = ["BindMode"]


class BindMode(enum.StrEnum):
    BIND_REQUEST = "bindrequest"
    """KAI's flow: a BindRequest per pod, which the binder carries out and records."""
    DIRECT = "direct"
    """The scheduler binds through `pods/binding` itself: one write per pod, no BindRequest, and
    the binds announced per PodGroup (per queue in a burst) rather than per pod."""
