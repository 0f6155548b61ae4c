"""Why a job's running attempts stopped, and what each stop cost (docs/metric.md, "Why jobs stopped").

An interruption is a running attempt (the job holding all its chips) cut by a
PREEMPT below its request, a FAIL or a CANCEL. For each, the job's timeline
records when, the scheduler's `reason` and the cause it names, how long the
attempt had run, the work it threw away, and how long the job took to hold
all its chips again (reallocated) and then to resume work (recovered: a
CHECKPOINT_RESTORE_END or a STEP_START once it holds them again).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MICROS = 1_000_000
# A reason's cause: its first word (`NODE_FAIL: xid 79` → NODE_FAIL, `CANCELLED by 0` → CANCELLED), with the
# one-word qualifier a scheduler puts in parentheses right after it, which names a different cause: Kueue's
# `Preempted (InClusterQueue)` and `Preempted (InCohortReclamation)` are two (docs/kubernetes.md). An
# exit code (`FAILED (exit 1:0)`) is not a qualifier: it is a detail of one cause.
_CAUSE = re.compile(r"([^\s:(]+)(?: \(([A-Z][A-Za-z]+)\))?")
CAUSE_WITHOUT_REASON = {"PREEMPT": "PREEMPTED", "FAIL": "FAILED", "CANCEL": "CANCELLED"}


def cause_of(event: str, reason: str | None) -> str:
    match = _CAUSE.match(reason or "")
    if not match:
        return CAUSE_WITHOUT_REASON[event]
    first, qualifier = match.groups()
    return f"{first.upper()} ({qualifier})" if qualifier else first.upper()


@dataclass
class Interruption:
    time_us: int
    event: str  # PREEMPT, FAIL or CANCEL
    cause: str
    reason: str | None
    run_us: int  # since the job last came to hold all its chips
    lost_chip_us: int  # step chip-time this interruption turned lost
    reallocated_us: int | None = None  # until it held all its chips again (None: not yet, or it ended)
    recovered_us: int | None = None  # until it then resumed work (None: not yet, or no runtime stream)


class InterruptionLog:
    def __init__(self):
        self.rows: list[Interruption] = []
        self.running_since: int | None = None

    def started_running(self, time_us: int) -> None:
        self.running_since = time_us
        last = self.rows[-1] if self.rows else None
        if last is not None and last.event == "PREEMPT" and last.reallocated_us is None:
            last.reallocated_us = time_us - last.time_us

    def interrupted(self, time_us: int, event: str, reason: str | None, lost_chip_us: int) -> None:
        self.rows.append(
            Interruption(time_us, event, cause_of(event, reason), reason, time_us - self.running_since, lost_chip_us)
        )
        self.running_since = None

    def resumed_work(self, time_us: int) -> None:
        last = self.rows[-1] if self.rows else None
        if last is not None and last.reallocated_us is not None and last.recovered_us is None:
            last.recovered_us = time_us - last.time_us

    def summary(self) -> list[dict]:
        """Rows of the `interruptions` column of the jobs table (seconds, chip-seconds)."""
        return [
            {
                "time": row.time_us,
                "event": row.event,
                "cause": row.cause,
                "reason": row.reason,
                "run_s": row.run_us / MICROS,
                "reallocated_s": _seconds(row.reallocated_us),
                "recovered_s": _seconds(row.recovered_us),
                "lost_chip_s": row.lost_chip_us / MICROS,
            }
            for row in self.rows
        ]


def _seconds(micros: int | None) -> float | None:
    return None if micros is None else micros / MICROS


class InterruptionsNotKept(InterruptionLog):
    """The log of a job whose saved state an earlier format wrote, without its interruptions (a store
    upgraded from state format 3: fleet_goodput/core/state_formats.py). Its attempts before the upgrade
    are not known, so the job's interruptions read as not known (null), never as a list that leaves
    some out, even for the attempts that follow."""

    def started_running(self, time_us: int) -> None:
        pass

    def interrupted(self, time_us: int, event: str, reason: str | None, lost_chip_us: int) -> None:
        pass

    def resumed_work(self, time_us: int) -> None:
        pass

    def summary(self) -> None:
        return None
