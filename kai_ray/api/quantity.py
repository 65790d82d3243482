"""Kubernetes quantities ("500m", "2Gi", "1e3") and Go durations ("1h30m") as plain floats.

Manifests carry amounts in the API server's string forms; the scheduler works
in numbers. Parsing lives in one place so every reader agrees on "1G" (10^9)
versus "1Gi" (2^30), and errors name the offending text.
"""

from __future__ import annotations

import re
from functools import lru_cache

_SUFFIXES: dict[str, float] = {
    "": 1.0,
    "n": 1e-9,
    "u": 1e-6,
    "m": 1e-3,
    "k": 1e3,
    "M": 1e6,
    "G": 1e9,
    "T": 1e12,
    "P": 1e15,
    "E": 1e18,
    "Ki": 2.0**10,
    "Mi": 2.0**20,
    "Gi": 2.0**30,
    "Ti": 2.0**40,
    "Pi": 2.0**50,
    "Ei": 2.0**60,
}
# An exponent and a suffix are alternatives: "1E" is exa, "1E3" is a thousand.
_QUANTITY = re.compile(
    r"(?P<number>[+-]?(?:\d+\.?\d*|\.\d+))"
    r"(?:(?P<exponent>[eE][+-]?\d+)|(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]))?"
)

_DURATION_UNITS: dict[str, float] = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,  # Go accepts both micro signs, U+00B5 and U+03BC
    "μs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}
_DURATION_PART = re.compile(r"(\d+\.?\d*|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
_DURATION = re.compile(rf"(?:{_DURATION_PART.pattern})+")


class QuantityError(ValueError):
    """A string that is not a Kubernetes quantity."""


class DurationError(ValueError):
    """A string that is not a Go duration."""


def parse_quantity(value: str | int | float) -> float:
    """Return a quantity's value in base units: "500m" → 0.5, "2Gi" → 2147483648.0."""
    if isinstance(value, str):
        return _parse_text(value)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    raise QuantityError(f"invalid quantity {value!r}")


@lru_cache(maxsize=4096)
def _parse_text(value: str) -> float:
    """Remembered per text: a cluster spells its amounts in a few dozen ways ("1", "4Gi"), and
    every cycle and every submit parsed each pod's again (a refused text raises each time)."""
    match = _QUANTITY.fullmatch(value.strip())
    if match is None:
        raise QuantityError(f"invalid quantity {value!r}")
    number = float(match["number"] + (match["exponent"] or ""))
    return number * _SUFFIXES[match["suffix"] or ""]


def parse_duration(value: str) -> float:
    """Return a Go duration in seconds: "1h30m" → 5400.0, "-10s" → -10.0, "0" → 0.0."""
    text = value.strip()
    sign = -1.0 if text[:1] == "-" else 1.0
    body = text[1:] if text[:1] in ("+", "-") else text
    if body == "0":
        return 0.0
    if _DURATION.fullmatch(body) is None:
        raise DurationError(f"invalid duration {value!r} (expected e.g. '30s', '5m', '1h30m')")
    seconds = sum(float(amount) * _DURATION_UNITS[unit] for amount, unit in _DURATION_PART.findall(body))
    return sign * seconds
