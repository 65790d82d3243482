"""KAI's `usageDBConfig` (spec §7, §19.1): where queue usage history comes from and how it counts.

The field names, defaults and refusals are KAI's, so a KAI configuration file keeps its meaning:
a one-week sliding window without decay, fetched every minute, stale after five minutes. kai-ray
adds one client type, `embedded`: the scheduler records what it allocated itself and keeps it in
the cluster, so time-based fair share works without a Prometheus. KAI's test clients (`fake`,
`fake-with-history`) and cron windows are refused by name rather than silently ignored.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

UsageClientType = Literal["embedded", "prometheus"]
WindowType = Literal["sliding", "tumbling"]

CLIENT_TYPES: tuple[str, ...] = ("embedded", "prometheus")
DEFAULT_WINDOW_SECONDS = 7 * 24 * 3600.0
DEFAULT_FETCH_INTERVAL_SECONDS = 60.0
DEFAULT_STALENESS_SECONDS = 300.0
DEFAULT_WAIT_TIMEOUT_SECONDS = 60.0
DEFAULT_QUERY_RESOLUTION_SECONDS = 60.0
DEFAULT_QUERY_TIMEOUT_SECONDS = 10.0

_UNIT_SECONDS = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
    "d": 86400.0,
    "w": 7 * 86400.0,
    "y": 365 * 86400.0,
}
_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h|d|w|y)")
_PARAM_KEYS = (
    "halfLifePeriod",
    "windowSize",
    "windowType",
    "tumblingWindowStartTime",
    "cronString",
    "fetchInterval",
    "stalenessPeriod",
    "waitTimeout",
    "extraParams",
)
_CONFIG_KEYS = ("clientType", "connectionString", "connectionStringEnvVar", "usageParams")


class UsageParams(BaseModel):
    """`usageParams` with every duration in seconds and KAI's defaults filled in."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    window_seconds: float = DEFAULT_WINDOW_SECONDS
    window_type: WindowType = "sliding"
    half_life_seconds: float | None = None
    """None: no decay (KAI also turns a zero or negative half-life into none)."""
    tumbling_start: float | None = None
    """Unix seconds the first tumbling window starts at; required for `tumbling`."""
    fetch_interval_seconds: float = DEFAULT_FETCH_INTERVAL_SECONDS
    staleness_seconds: float = DEFAULT_STALENESS_SECONDS
    wait_timeout_seconds: float = DEFAULT_WAIT_TIMEOUT_SECONDS
    query_resolution_seconds: float = DEFAULT_QUERY_RESOLUTION_SECONDS
    """`extraParams.queryResolution`: one usage sample per this many seconds."""
    query_timeout_seconds: float = DEFAULT_QUERY_TIMEOUT_SECONDS
    """`extraParams.usageQueryTimeout`: how long one Prometheus fetch may take."""
    extra_params: dict[str, str] = Field(default_factory=dict)


class UsageDBConfig(BaseModel):
    """Time-based fair share is on exactly when the scheduler configuration carries one of these."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    client_type: UsageClientType = "embedded"
    connection_string: str = ""
    connection_string_env_var: str = ""
    params: UsageParams = Field(default_factory=UsageParams)


def parse_duration(text: Any) -> float:
    """Seconds in a Go (`1h30m`, `0.5h`) or Prometheus (`1w`, `7d`) duration; ValueError otherwise."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"expected a duration such as '10m' or '1w', got {text!r}")
    body = text.strip()
    sign = -1.0 if body.startswith("-") else 1.0
    body = body.lstrip("+-")
    if body == "0":
        return 0.0
    position, total = 0, 0.0
    while position < len(body):
        match = _DURATION_PART.match(body, position)
        if match is None:
            raise ValueError(f"expected a duration such as '10m' or '1w', got {text!r}")
        total += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        position = match.end()
    return sign * total


class _Parser:
    """Collects every problem of one `usageDBConfig` section, each naming its field."""

    def __init__(self) -> None:
        self.errors: list[tuple[str, str]] = []
        self.warnings: list[tuple[str, str]] = []

    def duration(self, field: str, raw: Mapping[str, Any], key: str, default: float) -> float:
        if raw.get(key) is None:
            return default
        try:
            return parse_duration(raw[key])
        except ValueError as error:
            self.errors.append((field, str(error)))
            return default

    def unknown_keys(self, field: str, raw: Mapping[str, Any], known: tuple[str, ...]) -> None:
        for key in raw:
            if key not in known:
                self.warnings.append(
                    (f"{field}.{key}", f"unknown setting, ignored (known: {', '.join(known)})")
                )


def parse_usage_db_config(
    raw: Any, field: str = "usageDBConfig"
) -> tuple[UsageDBConfig | None, list[tuple[str, str]], list[tuple[str, str]]]:
    """The section as a `UsageDBConfig`, plus (field, message) errors and warnings.

    The config is None whenever there is an error, so a caller can never run with half of it.
    """
    parser = _Parser()
    if not isinstance(raw, Mapping):
        parser.errors.append((field, f"must be a mapping, got {type(raw).__name__}"))
        return None, parser.errors, parser.warnings
    parser.unknown_keys(field, raw, _CONFIG_KEYS)
    client_type = _client_type(parser, field, raw.get("clientType"))
    connection = str(raw.get("connectionString") or "")
    env_var = str(raw.get("connectionStringEnvVar") or "")
    if client_type == "prometheus" and bool(connection) == bool(env_var):
        which = "both are set, only one is allowed" if connection else "one is required"
        parser.errors.append(
            (f"{field}.connectionString", f"connectionString or connectionStringEnvVar: {which}")
        )
    if client_type == "embedded" and (connection or env_var):
        parser.warnings.append(
            (f"{field}.connectionString", "ignored: the embedded client keeps usage in the cluster itself")
        )
    params = _params(parser, f"{field}.usageParams", raw.get("usageParams") or {})
    if parser.errors or client_type is None or params is None:
        return None, parser.errors, parser.warnings
    config = UsageDBConfig(
        client_type=client_type,
        connection_string=connection,
        connection_string_env_var=env_var,
        params=params,
    )
    return config, parser.errors, parser.warnings


def _client_type(parser: _Parser, field: str, value: Any) -> UsageClientType | None:
    known = ", ".join(CLIENT_TYPES)
    if value is None or value == "":
        parser.errors.append((f"{field}.clientType", f"cannot be empty (known: {known})"))
        return None
    if value == "embedded":
        return "embedded"
    if value == "prometheus":
        return "prometheus"
    hint = " (KAI's test-only client; use 'embedded')" if value in ("fake", "fake-with-history") else ""
    parser.errors.append((f"{field}.clientType", f"unknown client type {value!r}{hint} (known: {known})"))
    return None


def _params(parser: _Parser, field: str, raw: Any) -> UsageParams | None:
    if not isinstance(raw, Mapping):
        parser.errors.append((field, f"must be a mapping, got {type(raw).__name__}"))
        return None
    parser.unknown_keys(field, raw, _PARAM_KEYS)
    window = parser.duration(f"{field}.windowSize", raw, "windowSize", DEFAULT_WINDOW_SECONDS)
    if window <= 0:
        parser.errors.append((f"{field}.windowSize", f"must be positive, got {raw.get('windowSize')!r}"))
    half_life = parser.duration(f"{field}.halfLifePeriod", raw, "halfLifePeriod", 0.0)
    window_type = raw.get("windowType") or "sliding"
    tumbling_start = None
    if window_type == "tumbling":
        tumbling_start = _timestamp(
            parser, f"{field}.tumblingWindowStartTime", raw.get("tumblingWindowStartTime")
        )
    elif window_type == "cron":
        parser.errors.append(
            (f"{field}.windowType", "cron windows are not supported by kai-ray (use tumbling)")
        )
    elif window_type != "sliding":
        parser.errors.append(
            (f"{field}.windowType", f"unknown window type {window_type!r} (known: sliding, tumbling)")
        )
    fetch = parser.duration(f"{field}.fetchInterval", raw, "fetchInterval", DEFAULT_FETCH_INTERVAL_SECONDS)
    staleness = parser.duration(f"{field}.stalenessPeriod", raw, "stalenessPeriod", DEFAULT_STALENESS_SECONDS)
    wait = parser.duration(f"{field}.waitTimeout", raw, "waitTimeout", DEFAULT_WAIT_TIMEOUT_SECONDS)
    for key, value in (("fetchInterval", fetch), ("waitTimeout", wait)):
        if value <= 0:
            parser.errors.append((f"{field}.{key}", f"must be positive, got {raw.get(key)!r}"))
    if 0 < staleness < fetch:
        parser.warnings.append((f"{field}.stalenessPeriod", "shorter than fetchInterval; fetchInterval used"))
        staleness = fetch
    extra = raw.get("extraParams") or {}
    if not isinstance(extra, Mapping):
        parser.errors.append((f"{field}.extraParams", f"must be a mapping, got {type(extra).__name__}"))
        extra = {}
    extras = {str(key): str(value) for key, value in extra.items()}
    resolution = parser.duration(
        f"{field}.extraParams.queryResolution", extras, "queryResolution", DEFAULT_QUERY_RESOLUTION_SECONDS
    )
    timeout = parser.duration(
        f"{field}.extraParams.usageQueryTimeout", extras, "usageQueryTimeout", DEFAULT_QUERY_TIMEOUT_SECONDS
    )
    for key, value in (("queryResolution", resolution), ("usageQueryTimeout", timeout)):
        if value <= 0:
            parser.errors.append((f"{field}.extraParams.{key}", f"must be positive, got {extras.get(key)!r}"))
    if parser.errors or window_type not in ("sliding", "tumbling"):
        return None
    return UsageParams(
        window_seconds=window,
        window_type="tumbling" if window_type == "tumbling" else "sliding",
        half_life_seconds=half_life if half_life > 0 else None,
        tumbling_start=tumbling_start,
        fetch_interval_seconds=fetch,
        staleness_seconds=staleness,
        wait_timeout_seconds=wait,
        query_resolution_seconds=resolution,
        query_timeout_seconds=timeout,
        extra_params=extras,
    )


def _timestamp(parser: _Parser, field: str, value: Any) -> float | None:
    """An RFC 3339 time (YAML may already have read it as a datetime) as Unix seconds."""
    if value is None or value == "":
        parser.errors.append((field, "required when windowType is tumbling"))
        return None
    if isinstance(value, str):
        try:
            value = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            parser.errors.append(
                (field, f"expected an RFC 3339 time such as 2025-01-01T00:00:00Z, got {value!r}")
            )
            return None
    if not isinstance(value, datetime.datetime):
        parser.errors.append((field, f"expected an RFC 3339 time, got {value!r}"))
        return None
    moment: datetime.datetime = value if value.tzinfo is not None else value.replace(tzinfo=datetime.UTC)
    return moment.timestamp()
