"""Fleet capacity: chips online per cluster and accelerator, as stretches of one level.

CAPACITY events carry a level (chips online from now on), so capacity
chip-time is the level held over each stretch until the next event or the
as-of time. A stretch is kept and written as it is, one row from its event
to the next (`capacity_level`), never cut into windows here: a level that
holds for years costs one row, not one per window. The `capacity_window`
view cuts the stretches at window edges where a query reads them
(sql/derived/capacity_window.sql). Like `JobTimeline`, it is fed in
event-time order and flushed.
"""

from __future__ import annotations

from fleet_goodput.core.event_intake import DUPLICATE, Rejection, in_event_order, repeated_id
from fleet_goodput.core.events import Event


class CapacityTimeline:
    def __init__(self, window_us: int):
        self.window_us = window_us
        self.level = 0
        self.since_us: int | None = None  # where the current stretch starts: its CAPACITY event's time
        self.now_us: int | None = None
        self.seen_ids: dict[str, tuple] = {}  # event_id -> the first event that carried it
        self.duplicates = 0
        self.accepted = 0
        self.rejections: list[Rejection] = []  # event_id conflicts
        self._ended: dict[int, tuple[int, int]] = {}  # stretches ended since the last flush

    def feed(self, events: list[Event]) -> None:
        for event in in_event_order(events):
            reason = repeated_id(self.seen_ids, event)
            if reason == DUPLICATE:
                self.duplicates += 1
                continue
            if reason:
                self.rejections.append(Rejection(event, reason))
                continue
            self.advance_to(event.time_us)
            if self.since_us is not None and self.since_us < event.time_us:
                self._ended[self.since_us] = (event.time_us, self.level)
            self.since_us = self.now_us = event.time_us  # two levels at one instant: the later one holds
            self.level = event.payload[0]
            self.accepted += 1

    def forget_ids(self) -> None:
        """Forget every id seen (the key step does, once events are settled: a repeat of one arrives late)."""
        self.seen_ids = {}

    def advance_to(self, time_us: int) -> None:
        """Hold the level up to `time_us`; before the first CAPACITY event there is no level to hold."""
        if self.now_us is not None and time_us > self.now_us:
            self.now_us = time_us

    def counts(self) -> dict[tuple[str, str], int]:
        return {("scheduler", "accepted"): self.accepted, ("scheduler", "duplicate"): self.duplicates}

    def close(self, as_of_us: int) -> None:
        self.advance_to(as_of_us)

    def flush(self, provisional: bool = False) -> dict[int, tuple[int, int]]:
        """The stretches that ended since the last flush and the current one so far, each as
        start -> (end, chips), all in integer microseconds (nothing is ever provisional in
        capacity: the flag is there to match JobTimeline). A stretch reported again reaches
        further and replaces what was reported of it."""
        stretches, self._ended = self._ended, {}
        if self.since_us is not None and self.now_us > self.since_us:
            stretches[self.since_us] = (self.now_us, self.level)
        return stretches
