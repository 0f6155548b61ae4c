"""Event-time windows: fixed length, aligned to the Unix epoch."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np


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


def add_over_windows(vectors, start_us: int, end_us: int, window_us: int, figures) -> None:
    """Add chips × time of [start_us, end_us) to each (index, chips) of `figures`,
    in the vector of every window the stretch overlaps.

    `vectors` maps a window start to its vector (a defaultdict). Stretches
    between two events of a job rarely cross a window edge, so that case is
    tested first and costs one lookup, whatever the number of figures.
    """
    first = start_us - start_us % window_us
    if end_us <= first + window_us:
        vector, length = vectors[first], end_us - start_us
        for index, chips in figures:
            vector[index] += chips * length
        return
    for window, piece_start, piece_end in split_at_windows(start_us, end_us, window_us):
        vector, length = vectors[window], piece_end - piece_start
        for index, chips in figures:
            vector[index] += chips * length


def add_by_window(deltas: dict, index: int, chips: int, starts: np.ndarray, ends: np.ndarray, window_us: int) -> None:
    """Add `chips` × the time of each stretch [starts[i], ends[i]) to figure `index` of the
    windows it lies in: integers, so the sum is what adding them one by one gives."""
    first, last = int(starts[0]), int(ends[-1])
    window = first - first % window_us
    if last <= window + window_us:  # all in one window
        deltas[window][index] += chips * int((ends - starts).sum())
        return
    # A run's few dozen stretches in plain Python: cheaper than a dozen numpy calls on them.
    totals, crossing = {}, []  # the stretches inside one window, summed per window; those across an edge
    for start_us, end_us in zip(starts.tolist(), ends.tolist()):
        window = start_us - start_us % window_us
        if end_us <= window + window_us:
            totals[window] = totals.get(window, 0) + end_us - start_us
        else:
            crossing.append((start_us, end_us))
    for window, total in totals.items():
        deltas[window][index] += chips * total
    for start_us, end_us in crossing:
        add_over_windows(deltas, start_us, end_us, window_us, ((index, chips),))
