"""Parsing and printing event times (integer microseconds since the epoch, UTC)."""

from __future__ import annotations

from datetime import datetime, timezone

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def parse_time_us(text: str) -> int:
    """An ISO-8601 time (a bare time is taken as UTC) → microseconds since the epoch."""
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as exc:
        raise ValueError(f"not an ISO-8601 time: {text!r} (example: 2026-01-01T12:00:00Z)") from exc
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    delta = moment - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def format_time_us(time_us: int | None) -> str | None:
    if time_us is None:
        return None
    return datetime.fromtimestamp(time_us / 1_000_000, tz=timezone.utc).isoformat().replace("+00:00", "Z")


def to_micros(value: int | datetime) -> int:
    """An Avro `timestamp-micros` as fastavro gives it (a UTC datetime, or an int) → integer microseconds."""
    if isinstance(value, int):
        return value
    delta = value - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
