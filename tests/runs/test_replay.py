"""`mpg replay` keeps to its speed: each slice lands when its event time is due
on a clock running `speed` times faster, however long writing a slice takes."""

from __future__ import annotations

import fastavro
import pytest

from fleet_goodput.runs.replay import load_slices, replay
from fleet_goodput.simulator import simulate


class FakeClock:
    """Wall time that passes only when the replay sleeps or writes (see `report`)."""

    def __init__(self, write_s: float):
        self.now = 100.0
        self.write_s = write_s
        self.landed: list[float] = []

    def sleep(self, seconds: float) -> None:
        assert seconds > 0
        self.now += seconds

    def report(self, _line: str) -> None:
        self.landed.append(self.now)
        self.now += self.write_s  # writing the next slice's files costs this much wall time


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    root = tmp_path_factory.mktemp("fleet")
    simulate(root, seed=2, hours=2, jobs=10)
    return root


@pytest.mark.parametrize(
    "write_s", [0.0, 2.0, 9.0], ids=["instant writes", "slow writes", "writes slower than the schedule"]
)
def test_slices_land_on_the_event_time_schedule(fleet, tmp_path, write_s):
    speed, slice_s = 60.0, 300
    starts = sorted(load_slices(fleet, slice_s))
    clock = FakeClock(write_s)
    replay(fleet, tmp_path / "live", speed, slice_s, report=clock.report, clock=lambda: clock.now, sleep=clock.sleep)
    due = [100.0 + (start - starts[0]) / 1e6 / speed for start in starts]
    # A slice lands when it is due, or as soon as the one before it is written if that took longer.
    expected = []
    for when in due:
        expected.append(max(when, expected[-1] + write_s) if expected else when)
    assert clock.landed == pytest.approx(expected)
    if write_s < slice_s / speed:
        assert clock.landed == pytest.approx(due)


def test_every_event_is_written_once_in_its_slice(fleet, tmp_path):
    slices = load_slices(fleet, 300)
    written = replay(fleet, tmp_path / "live", 0, 300, report=lambda _: None)
    assert written == sum(len(records) for by_stream in slices.values() for records in by_stream.values())
    for n, start in enumerate(sorted(slices)):
        for stream, records in slices[start].items():
            with open(tmp_path / "live" / stream / f"replay-{n:06d}.avro", "rb") as handle:
                landed = list(fastavro.reader(handle))
            assert sorted(r["event_id"] for r in landed) == sorted(r["event_id"] for r in records)
