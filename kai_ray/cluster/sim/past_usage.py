"""Past queue usage stated in a simulated cluster's input, for time-based fair share (spec §7).

A scenario file may carry a top-level `usage` block (an extension of the conformance format; the
shared loader ignores it):

    usage:
      usageDBConfig:                 # optional: KAI's section; clientType defaults to embedded
        usageParams: {windowSize: 1w, halfLifePeriod: 1h}
      kValue: 1                      # optional: proportion's kValue
      queues:                        # fraction of the cluster's capacity each queue held, on average,
        team-a: {gpu: 0.6}           # over the window before the first cycle (cpu, memory, gpu)
        team-b: {gpu: 0.1}

Stating the average fraction rather than a series of samples keeps the numbers the ones KAI's
division reads (U of §7), so a worked example reads straight into a file; the simulator turns them
into a recorded history that later cycles add to and that decays as its clock moves.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from kai_ray.api.usage_db import UsageDBConfig, parse_usage_db_config
from kai_ray.model.resources import FAIRNESS_RESOURCES

USAGE_KEY = "usage"


@dataclass(frozen=True)
class PastUsage:
    """Time-based fair share settings and the stated usage per queue and resource."""

    usage_db: UsageDBConfig
    queues: dict[str, dict[str, float]]
    k_value: float | None = None

    def with_parents(self, parents: Mapping[str, str | None]) -> dict[str, dict[str, float]]:
        """The stated usage, and for each queue stated for none its children's added up.

        A parent's allocation is its children's (spec §6.1), so its usage is their sum; stating
        only the leaves is then enough for every level of the division. `parents` maps each queue
        to its parent (None at the top); a stated parent keeps what was stated.
        """
        summed = {name: dict(shares) for name, shares in self.queues.items()}
        for leaf, shares in sorted(self.queues.items()):
            parent = parents.get(leaf)
            while parent is not None and parent not in self.queues:
                totals = summed.setdefault(parent, {})
                for resource, value in shares.items():
                    totals[resource] = totals.get(resource, 0.0) + value
                parent = parents.get(parent)
        return {name: summed[name] for name in sorted(summed)}


class PastUsageError(ValueError):
    """The `usage` block is malformed; the message names the field."""


def read_past_usage(path: Path) -> PastUsage | None:
    """The `usage` block of the scenario file at `path`, or None when it has none."""
    raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    if not isinstance(raw, Mapping) or raw.get(USAGE_KEY) is None:
        return None
    return parse_past_usage(raw[USAGE_KEY], f"{path}: {USAGE_KEY}")


def read_usage_file(path: Path) -> PastUsage:
    """A file holding only the block (`kai-ray simulate --usage FILE`, for manifests)."""
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as error:
        raise PastUsageError(f"{path}: cannot read: {error}") from error
    return parse_past_usage(raw, str(path))


def parse_past_usage(raw: Any, where: str = USAGE_KEY) -> PastUsage:
    """The block as `PastUsage`; PastUsageError names the first bad field."""
    if not isinstance(raw, Mapping):
        raise PastUsageError(f"{where}: must be a mapping with 'queues', got {type(raw).__name__}")
    unknown = sorted(set(raw) - {"usageDBConfig", "kValue", "queues"})
    if unknown:
        raise PastUsageError(f"{where}: unknown key(s) {unknown} (known: usageDBConfig, kValue, queues)")
    section = dict(raw.get("usageDBConfig") or {})
    section.setdefault("clientType", "embedded")
    usage_db, errors, _ = parse_usage_db_config(section, f"{where}.usageDBConfig")
    if usage_db is None:
        raise PastUsageError("\n".join(f"{field}: {message}" for field, message in errors))
    return PastUsage(usage_db, _queues(raw.get("queues") or {}, f"{where}.queues"), _k_value(raw, where))


def _k_value(raw: Mapping[str, Any], where: str) -> float | None:
    value = raw.get("kValue")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise PastUsageError(f"{where}.kValue: must be a number, got {value!r}")
    return float(value)


def _queues(raw: Any, where: str) -> dict[str, dict[str, float]]:
    if not isinstance(raw, Mapping):
        raise PastUsageError(f"{where}: must map queue names to {{gpu: fraction, ...}}")
    queues: dict[str, dict[str, float]] = {}
    for name, shares in sorted(raw.items()):
        if not isinstance(shares, Mapping):
            raise PastUsageError(f"{where}.{name}: must map resources to fractions, e.g. {{gpu: 0.6}}")
        queues[str(name)] = {}
        for resource, value in shares.items():
            field = f"{where}.{name}.{resource}"
            if resource not in FAIRNESS_RESOURCES:
                raise PastUsageError(f"{field}: unknown resource (known: {', '.join(FAIRNESS_RESOURCES)})")
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                raise PastUsageError(f"{field}: must be a number, got {value!r}")
            if value < 0:
                raise PastUsageError(f"{field}: must not be negative, got {value!r}")
            queues[str(name)][str(resource)] = float(value)
    return queues
