"""A key's saved state as an earlier format wrote it, brought to today's (`STATE_FORMAT`).

Format 3 (written by fleet-goodput from commit f29db97 until commits 721d98e and 5843400
made format 4) differs from format 4 in two ways:

- a job's timeline kept neither its end reason nor its interruptions. They are
  not in the state, so they stay not known: the end reason null, the
  interruptions null (`InterruptionsNotKept`), never a list that leaves some out;
- capacity was kept per window (chip-microseconds), not as stretches of one
  level. What a format-3 state still holds is the level at the frontier, and
  the chip-microseconds of the frontier's window up to it. The upgraded state
  holds that level as a stretch from the frontier; the chip-time before it is
  what the store turns into stretches (`window_as_stretches`).

Everything here is plain Python, without the store: fleet_goodput/runs/upgrade.py
reads and writes the store around it.
"""

from __future__ import annotations

from fleet_goodput.core.capacity import CapacityTimeline
from fleet_goodput.core.interruptions import InterruptionLog, InterruptionsNotKept
from fleet_goodput.core.session import KeyState
from fleet_goodput.core.timeline import JobTimeline

UPGRADABLE_FROM = 3  # the oldest saved-state format this release upgrades
# The last commit of the project that wrote each format this release no longer upgrades; a store of
# such a format is continued by that commit's fleet-goodput, or started afresh.
LAST_WRITTEN_BY = {1: "0b3751a", 2: "2a074fd"}


def upgrade_state(state: KeyState) -> dict[int, int]:
    """Bring `state` (format 3) to today's format in place. Returns, for a capacity key, its settled
    chip-microseconds per window (window start -> chip-µs up to the frontier) that the state no longer
    holds and the store must keep; for a job, nothing."""
    timeline = state.timeline
    if isinstance(timeline, JobTimeline):
        timeline.__dict__.setdefault("end_reason", None)
        if "interruption_log" not in vars(timeline):
            # A job none of whose events was applied yet (all still waiting) has no attempt before the upgrade.
            timeline.interruption_log = InterruptionLog() if timeline.now_us is None else InterruptionsNotKept()
        return {}
    if not isinstance(timeline, CapacityTimeline):
        raise TypeError(
            f"key {state.key}: a saved state of format 3 holds a job or capacity timeline, not "
            f"{type(timeline).__name__}"
        )
    unflushed = vars(timeline).pop("_deltas", {})
    if unflushed:  # every advance flushes them: a state saved with some is not one a run left
        raise ValueError(f"key {state.key}: its saved capacity holds chip-time not yet reported")
    # The current level holds from the frontier on, as far as this state can tell: the chip-time before
    # the frontier is settled, and returned.
    timeline.since_us = timeline.now_us
    timeline._ended = {}
    settled = {window: chip_us for window, chip_us in state.totals.items() if chip_us}
    state.totals, state.emitted = {}, {}
    return settled


def window_as_stretches(start_us: int, end_us: int, chip_us: int) -> list[tuple[int, int, int]]:
    """At most two stretches (start, end, chips) over [start_us, end_us) whose chip-microseconds add up
    to `chip_us` exactly: the whole-chip level of the mean, and one chip more over the remainder.

    Format 3 kept a window's capacity as one sum, so when within it the level changed is not known;
    the levels given lie between the lowest and highest level of the window, and the window's
    chip-time is the one the events gave."""
    span_us = end_us - start_us
    level, remainder_us = divmod(chip_us, span_us)
    if not remainder_us:
        return [(start_us, end_us, level)]
    return [(start_us, start_us + remainder_us, level + 1), (start_us + remainder_us, end_us, level)]
