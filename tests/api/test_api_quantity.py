"""Kubernetes quantities and Go durations parse to the numbers the scheduler uses."""

from __future__ import annotations

import pytest

from kai_ray.api import DurationError, QuantityError, parse_duration, parse_quantity

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("4", 4.0),
        ("500m", 0.5),
        ("1.5", 1.5),
        (".5", 0.5),
        ("+2", 2.0),
        ("-1", -1.0),
        ("2Gi", 2 * 2**30),
        ("100Ki", 100 * 1024),
        ("1G", 1e9),
        ("3M", 3e6),
        ("1k", 1e3),
        ("250u", 250e-6),
        ("1E", 1e18),
        ("1e3", 1000.0),
        ("1E3", 1000.0),
        ("5e-1", 0.5),
        (" 8 ", 8.0),
        (2, 2.0),
        (0.25, 0.25),
    ],
)
def test_parses_quantities(text: str | int | float, expected: float) -> None:
    assert parse_quantity(text) == pytest.approx(expected)


@pytest.mark.parametrize("text", ["", "abc", "1.2.3", "5x", "Gi", "1e3Ki", "1 Gi", "0x10"])
def test_rejects_malformed_quantities(text: str) -> None:
    with pytest.raises(QuantityError, match="invalid quantity"):
        parse_quantity(text)


@pytest.mark.parametrize("value", [True, None, ["1"], {"value": "1"}])
def test_rejects_booleans_and_non_text_as_quantities(value: object) -> None:
    with pytest.raises(QuantityError, match="invalid quantity"):
        parse_quantity(value)  # type: ignore[arg-type]


def test_a_refused_text_is_refused_again_after_good_ones_are_remembered() -> None:
    assert [parse_quantity("2Gi"), parse_quantity("2Gi")] == [2 * 2**30, 2 * 2**30]
    for _ in range(2):
        with pytest.raises(QuantityError, match="'2Gx'"):
            parse_quantity("2Gx")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("30s", 30.0),
        ("5m", 300.0),
        ("1h30m", 5400.0),
        ("1.5h", 5400.0),
        ("1h0m0s", 3600.0),
        ("300ms", 0.3),
        ("2us", 2e-6),
        ("2µs", 2e-6),
        ("-10s", -10.0),
        ("+1m", 60.0),
        ("0", 0.0),
    ],
)
def test_parses_go_durations(text: str, expected: float) -> None:
    assert parse_duration(text) == pytest.approx(expected)


@pytest.mark.parametrize("text", ["", "5", "abc", "1d", "--5s", "5 s", "s", "-"])
def test_rejects_malformed_durations(text: str) -> None:
    with pytest.raises(DurationError, match="invalid duration"):
        parse_duration(text)
