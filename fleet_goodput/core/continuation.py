"""Where the store's last run left off: what the next run continues from.

A run's as-of time, its frontier (the as-of time less the allowed lateness:
what is settled), its results' version, and the scheduler's kept (time, key)
(fleet_goodput/core/asof.py). The run plan reads it from the last run's record
(fleet_goodput/runs/plan.py); the sessionizer starts new keys at its frontier
(transforms/sessionize.py); a chunked run moves it on chunk by chunk.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Continuation:
    """Where the store's last run left off (all None for a first run)."""

    as_of_us: int | None = None
    frontier_us: int | None = None
    version_us: int | None = None
    kept_times: tuple[tuple[int, str], ...] = ()  # the scheduler's kept times (asof.py)
    history_start_us: int | None = None  # a run's own: where a chunked run found the history to start (asof.py)

    def after(self, as_of_us: int, lateness_us: int, kept: list[int] | None = None) -> Continuation:
        """Where a run that reached `as_of_us` (and the scheduler's kept times `kept`) leaves off: its
        frontier never moves back, and its results' version is above the last one (two runs may
        share an as-of time)."""
        frontier_us = as_of_us - lateness_us
        if self.frontier_us is not None:
            frontier_us = max(frontier_us, self.frontier_us)
        version_us = as_of_us if self.version_us is None else max(as_of_us, self.version_us + 1)
        return Continuation(
            as_of_us,
            frontier_us,
            version_us,
            self.kept_times if kept is None else tuple(map(tuple, kept)),
            self.history_start_us,
        )
