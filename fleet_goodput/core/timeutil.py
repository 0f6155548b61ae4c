"""Parsing and printing event times (integer microseconds since the epoch, UTC)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
ONE_MICROSECOND = timedelta(microseconds=1)


def parse_time_us(text: str) -> int:
    """An ISO-8601 time (a bare time is taken as UTC) → microseconds since the epoch."""
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as exc:
        raise ValueError(f"not an ISO-8601 time: {text!r} (example: 2026-01-01T12:00:00Z)") from exc
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return (moment - EPOCH) // ONE_MICROSECOND


def format_time_us(time_us: int | None) -> str | None:
    if time_us is None:
        return None
    return datetime.fromtimestamp(time_us / 1_000_000, tz=timezone.utc).isoformat().replace("+00:00", "Z")


def micros_of(value: int | datetime) -> int:
    """Microseconds since the epoch of a time fastavro decoded (a datetime) or one already in microseconds."""
    return value if isinstance(value, int) else (value - EPOCH) // ONE_MICROSECOND
