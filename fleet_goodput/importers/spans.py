"""A span of time with others cut out of it: the pieces an importer emits as its runtime spans.

A training block less the evaluations inside it (mlperf.py), a step less the custom
badput events that block it (mgm.py), an attempt's initialisation less its checkpoint
restores (logs.py).
"""

from __future__ import annotations


def subtract(start_us: int, end_us: int, holes: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """[start_us, end_us) minus the union of `holes`, as sorted non-empty pieces."""
    pieces, cursor = [], start_us
    for hole_start, hole_end in sorted(holes):
        if hole_end <= cursor or hole_start >= end_us:
            continue
        if hole_start > cursor:
            pieces.append((cursor, hole_start))
        cursor = max(cursor, hole_end)
    if cursor < end_us:
        pieces.append((cursor, end_us))
    return pieces
