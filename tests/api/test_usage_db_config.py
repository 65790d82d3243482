"""`usageDBConfig` in KAI's scheduler configuration: defaults, values and the errors naming the field."""

from __future__ import annotations

import pytest

from kai_ray.api.scheduler_conf import SchedulerConfigError, parse_scheduler_config
from kai_ray.api.usage_db import UsageDBConfig, parse_duration

pytestmark = pytest.mark.unit


def usage_db_of(section: str) -> UsageDBConfig | None:
    config, _ = parse_scheduler_config(f"actions: allocate\nusageDBConfig:\n{section}", "config.yaml")
    return config.usage_db


def problems_of(section: str) -> list[str]:
    with pytest.raises(SchedulerConfigError) as caught:
        parse_scheduler_config(f"actions: allocate\nusageDBConfig:\n{section}", "config.yaml")
    return caught.value.problems


def test_no_section_keeps_time_based_fair_share_off() -> None:
    config, warnings = parse_scheduler_config("actions: allocate\n", "config.yaml")
    assert config.usage_db is None
    assert warnings == []


def test_kais_defaults_fill_what_is_not_set() -> None:
    usage_db = usage_db_of("  clientType: embedded\n")
    assert usage_db is not None
    params = usage_db.params
    assert (params.window_seconds, params.window_type, params.half_life_seconds) == (
        7 * 86400,
        "sliding",
        None,
    )
    assert (params.fetch_interval_seconds, params.staleness_seconds, params.wait_timeout_seconds) == (
        60,
        300,
        60,
    )
    assert (params.query_resolution_seconds, params.query_timeout_seconds) == (60, 10)


def test_every_setting_is_read() -> None:
    usage_db = usage_db_of(
        "  clientType: prometheus\n"
        "  connectionString: http://prometheus:9090\n"
        "  usageParams:\n"
        "    windowSize: 2d\n"
        "    windowType: tumbling\n"
        "    tumblingWindowStartTime: 2025-01-01T00:00:00Z\n"
        "    halfLifePeriod: 1h30m\n"
        "    fetchInterval: 30s\n"
        "    stalenessPeriod: 2m\n"
        "    waitTimeout: 5s\n"
        "    extraParams: {queryResolution: 5m, usageQueryTimeout: 3s}\n"
    )
    assert usage_db is not None
    assert (usage_db.client_type, usage_db.connection_string) == ("prometheus", "http://prometheus:9090")
    params = usage_db.params
    assert (params.window_seconds, params.window_type, params.tumbling_start) == (
        2 * 86400,
        "tumbling",
        1735689600,
    )
    assert params.half_life_seconds == 5400
    assert (params.fetch_interval_seconds, params.staleness_seconds, params.wait_timeout_seconds) == (
        30,
        120,
        5,
    )
    assert (params.query_resolution_seconds, params.query_timeout_seconds) == (300, 3)


def test_a_non_positive_half_life_means_no_decay_as_in_kai() -> None:
    usage_db = usage_db_of("  clientType: embedded\n  usageParams: {halfLifePeriod: 0s}\n")
    assert usage_db is not None and usage_db.params.half_life_seconds is None


def test_staleness_below_the_fetch_interval_is_raised_to_it_with_a_warning() -> None:
    config, warnings = parse_scheduler_config(
        "actions: allocate\nusageDBConfig:\n"
        "  {clientType: embedded, usageParams: {fetchInterval: 2m, stalenessPeriod: 1m}}\n",
        "config.yaml",
    )
    assert config.usage_db is not None and config.usage_db.params.staleness_seconds == 120
    assert warnings == [
        "config.yaml: usageDBConfig.usageParams.stalenessPeriod: shorter than fetchInterval;"
        " fetchInterval used"
    ]


@pytest.mark.parametrize(
    ("section", "expected"),
    [
        ("  {}\n", "config.yaml: usageDBConfig.clientType: cannot be empty (known: embedded, prometheus)"),
        (
            "  clientType: influx\n",
            "config.yaml: usageDBConfig.clientType: unknown client type 'influx'"
            " (known: embedded, prometheus)",
        ),
        (
            "  clientType: fake\n",
            "config.yaml: usageDBConfig.clientType: unknown client type 'fake' (KAI's test-only client;"
            " use 'embedded') (known: embedded, prometheus)",
        ),
        (
            "  clientType: prometheus\n",
            "config.yaml: usageDBConfig.connectionString: connectionString or connectionStringEnvVar:"
            " one is required",
        ),
        (
            "  {clientType: prometheus, connectionString: 'http://p:9090', connectionStringEnvVar: PROM}\n",
            "config.yaml: usageDBConfig.connectionString: connectionString or connectionStringEnvVar:"
            " both are set, only one is allowed",
        ),
        (
            "  {clientType: embedded, usageParams: {windowSize: a week}}\n",
            "config.yaml: usageDBConfig.usageParams.windowSize: expected a duration such as '10m' or '1w',"
            " got 'a week'",
        ),
        (
            "  {clientType: embedded, usageParams: {windowSize: 0s}}\n",
            "config.yaml: usageDBConfig.usageParams.windowSize: must be positive, got '0s'",
        ),
        (
            "  {clientType: embedded, usageParams: {windowType: hopping}}\n",
            "config.yaml: usageDBConfig.usageParams.windowType: unknown window type 'hopping'"
            " (known: sliding, tumbling)",
        ),
        (
            "  {clientType: embedded, usageParams: {windowType: cron, cronString: '0 * * * *'}}\n",
            "config.yaml: usageDBConfig.usageParams.windowType: cron windows are not supported by kai-ray"
            " (use tumbling)",
        ),
        (
            "  {clientType: embedded, usageParams: {windowType: tumbling}}\n",
            "config.yaml: usageDBConfig.usageParams.tumblingWindowStartTime:"
            " required when windowType is tumbling",
        ),
        (
            "  {clientType: embedded, usageParams: {extraParams: {queryResolution: often}}}\n",
            "config.yaml: usageDBConfig.usageParams.extraParams.queryResolution: expected a duration such as"
            " '10m' or '1w', got 'often'",
        ),
        (
            "  {clientType: embedded, usageParams: {fetchInterval: 0s}}\n",
            "config.yaml: usageDBConfig.usageParams.fetchInterval: must be positive, got '0s'",
        ),
        (
            "  [embedded]\n",
            "config.yaml: usageDBConfig: input should be a valid dictionary, got ['embedded']",
        ),
    ],
)
def test_errors_name_the_field(section: str, expected: str) -> None:
    assert problems_of(section) == [expected]


def test_unknown_keys_are_warned_about_not_dropped_silently() -> None:
    _, warnings = parse_scheduler_config(
        "actions: allocate\nusageDBConfig: {clientType: embedded, usageParams: {windowSise: 1d}}\n",
        "config.yaml",
    )
    assert warnings == [
        "config.yaml: usageDBConfig.usageParams.windowSise: unknown setting, ignored (known: halfLifePeriod,"
        " windowSize, windowType, tumblingWindowStartTime, cronString, fetchInterval, stalenessPeriod,"
        " waitTimeout, extraParams)"
    ]


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("1w", 604800),
        ("7d", 604800),
        ("1h30m", 5400),
        ("0.5h", 1800),
        ("250ms", 0.25),
        ("0", 0),
        ("-1m", -60),
    ],
)
def test_durations_in_go_and_prometheus_syntax(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)
