"""Event-time windows: fixed length, aligned to the Unix epoch."""

from __future__ import annotations

from collections.abc import Iterator


def window_start(time_us: int, window_us: int) -> int:
    return time_us - time_us % window_us


def split_at_windows(start_us: int, end_us: int, window_us: int) -> Iterator[tuple[int, int, int]]:
    """Yield (window_start, piece_start, piece_end) for [start_us, end_us) cut at window edges."""
    piece_start = start_us
    while piece_start < end_us:
        first = window_start(piece_start, window_us)
        piece_end = min(end_us, first + window_us)
        yield first, piece_start, piece_end
        piece_start = piece_end
