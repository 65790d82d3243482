"""Log lines of `serve`: JSON, and repeats of one kind of warning held back and counted."""

from __future__ import annotations

import json
import logging
import sys

import pytest

from kai_ray.server.logs import JsonFormatter, RepeatFilter

pytestmark = pytest.mark.unit


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def record(message: str, *args: object, level: int = logging.WARNING, **extra: object) -> logging.LogRecord:
    made = logging.LogRecord("kai", level, __file__, 1, message, args, None)
    for key, value in extra.items():
        setattr(made, key, value)
    return made


def test_one_warning_per_kind_per_interval_and_the_next_says_how_many_were_held() -> None:
    clock = Clock()
    repeats = RepeatFilter(interval=30, clock=clock)
    assert repeats.filter(record("cannot group pod %s", "a"))
    assert not any(repeats.filter(record("cannot group pod %s", f"p{i}")) for i in range(500))
    assert repeats.filter(record("something else failed"))  # another kind is not held back
    clock.now = 31
    later = record("cannot group pod %s", "z")
    assert repeats.filter(later)
    assert json.loads(JsonFormatter().format(later))["suppressed"] == 500


def test_info_lines_always_pass_and_a_repeat_key_splits_kinds() -> None:
    repeats = RepeatFilter(interval=30, clock=Clock())
    assert all(repeats.filter(record("cycle: %d", i, level=logging.INFO)) for i in range(10))
    assert repeats.filter(record("%s", "403 on pods", repeat_key="create pods 403"))
    assert repeats.filter(record("%s", "403 on events", repeat_key="create events 403"))
    assert not repeats.filter(record("%s", "403 on pods again", repeat_key="create pods 403"))


def test_a_line_is_one_json_object_with_the_traceback_inside() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        failed = logging.LogRecord("kai", logging.ERROR, __file__, 1, "cycle failed", (), sys.exc_info())
    entry = json.loads(JsonFormatter().format(failed))
    assert entry["level"] == "ERROR" and entry["message"] == "cycle failed"
    assert "ValueError: boom" in entry["error"] and "suppressed" not in entry
