"""Fleet capacity: chips online per cluster and accelerator, window by window.

CAPACITY events carry a level (chips online from now on), so capacity
chip-time is the level held over each stretch until the next event or the
as-of time. Like `JobTimeline`, it is fed in event-time order and flushed.
"""

from __future__ import annotations

from fleet_goodput.events import Event
from fleet_goodput.timeline import DUPLICATE, Rejection, in_event_order, repeated_id
from fleet_goodput.windows import split_at_windows


class CapacityTimeline:
    def __init__(self, window_us: int):
        self.window_us = window_us
        self.level = 0
        self.now_us: int | None = None
        self.seen_ids: dict[str, tuple] = {}  # event_id -> the first event that carried it
        self.duplicates = 0
        self.accepted = 0
        self.rejections: list[Rejection] = []  # event_id conflicts
        self._deltas: dict[int, int] = {}

    def feed(self, events: list[Event]) -> None:
        for event in in_event_order(events):
            reason = repeated_id(self.seen_ids, event)
            if reason == DUPLICATE:
                self.duplicates += 1
                continue
            if reason:
                self.rejections.append(Rejection(event, reason))
                continue
            if self.now_us is None:
                self.now_us = event.time_us
            self.advance_to(event.time_us)
            self.level = event.payload[0]
            self.accepted += 1

    def advance_to(self, time_us: int) -> None:
        """Attribute the level up to `time_us`; before the first CAPACITY event there is no level to attribute."""
        if self.now_us is None:
            return
        if time_us > self.now_us:
            for window_start, start_us, end_us in split_at_windows(self.now_us, time_us, self.window_us):
                self._deltas[window_start] = self._deltas.get(window_start, 0) + self.level * (end_us - start_us)
            self.now_us = time_us

    def counts(self) -> dict[tuple[str, str], int]:
        return {("scheduler", "accepted"): self.accepted, ("scheduler", "duplicate"): self.duplicates}

    def close(self, as_of_us: int) -> None:
        self.advance_to(as_of_us)

    def flush(self, provisional: bool = False) -> dict[int, int]:
        """Capacity chip-microseconds per window since the last flush (nothing is
        ever provisional in capacity: the flag is there to match JobTimeline)."""
        deltas, self._deltas = self._deltas, {}
        return deltas
