"""How `kai-ray serve` logs: one JSON object per line, and no flood when the same thing keeps failing.

A scheduler that loses its API server retries many things every second (seven
watches, every write of every cycle); logging each failure would bury the one
line that matters under hundreds of copies.  `RepeatFilter` lets the first
warning of a kind through and holds the repeats back for a while; the next line
of that kind says how many were held back.  "A kind" is the message template
(the format string before its arguments), so "cannot group pod %s" is one kind
however many pods fail, unless the caller names a finer key with
``extra={"repeat_key": ...}`` (one line per missing permission, say).
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["JsonFormatter", "RepeatFilter", "configure_logging"]

REPEAT_INTERVAL_SECONDS = 30.0
_MAX_KINDS = 1000


class JsonFormatter(logging.Formatter):
    """One JSON object per line: what log collectors in a cluster expect."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "time": self.formatTime(record),
            "level": record.levelname,
            "logger": record.name,
        }
        entry["message"] = record.getMessage()
        suppressed = getattr(record, "suppressed", 0)
        if suppressed:
            entry["suppressed"] = suppressed
        if record.exc_info:
            entry["error"] = self.formatException(record.exc_info)
        return json.dumps(entry)


@dataclass
class _Kind:
    quiet_until: float
    suppressed: int = 0


class RepeatFilter(logging.Filter):
    """At most one WARNING-or-worse line per kind per `interval` seconds; INFO and below pass."""

    def __init__(
        self, interval: float = REPEAT_INTERVAL_SECONDS, clock: Callable[[], float] = time.monotonic
    ):
        super().__init__()
        self.interval = interval
        self._clock = clock
        self._kinds: dict[tuple[str, str], _Kind] = {}
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True
        key = (record.name, str(getattr(record, "repeat_key", record.msg)))
        now = self._clock()
        with self._lock:
            kind = self._kinds.get(key)
            if kind is not None and now < kind.quiet_until:
                kind.suppressed += 1
                return False
            record.suppressed = kind.suppressed if kind is not None else 0
            self._kinds[key] = _Kind(now + self.interval)
            if len(self._kinds) > _MAX_KINDS:
                self._kinds = {k: v for k, v in self._kinds.items() if v.quiet_until > now}
        return True


def configure_logging(level: int = logging.INFO) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    handler.addFilter(RepeatFilter())
    logging.basicConfig(level=level, handlers=[handler], force=True)
    # urllib3 narrates each retry of a failing connection; the call's own failure is what we report.
    logging.getLogger("urllib3").setLevel(logging.ERROR)
