"""Events of one job at one microsecond are applied in the order their meaning gives
(fleet_goodput/core/same_instant.py, docs/metric.md section 3 "Events at one instant"): a span of no
length opens and closes at its instant, and no span is left open or closed implicitly because of
the order of two events with one time, whatever their ids or the order they arrive in.

Each case is run with the event ids ascending in the order written and descending (ids break
ties in event order), as plain events and as the decoder hands step events on (in runs), and the
figures are the hand figures written beside it."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from fleet_goodput.cli import main
from fleet_goodput.core.events import make_event
from fleet_goodput.core.figure_vector import CATEGORIES
from fleet_goodput.core.timeline import JobTimeline
from fleet_goodput.store.views import connect
from fleet_goodput.telemetry.avro_io import write_events
from test_step_runs import as_decoded, both, runs_in
from test_timeline import HOUR_US, PEAK, T0, seconds_by_category

KINDS = ("INIT", "COMPILE", "STEP", "CHECKPOINT_SAVE", "CHECKPOINT_RESTORE", "DATA_WAIT")
# The category a span of each kind's time goes to (steps: productive, the job FINISHes).
CATEGORY = {
    "INIT": "init",
    "COMPILE": "compile",
    "STEP": "productive",
    "CHECKPOINT_SAVE": "checkpoint_save",
    "CHECKPOINT_RESTORE": "checkpoint_restore",
    "DATA_WAIT": "data_wait",
}


class Story:
    """A job's events, written in time order; the ids make the same-instant order of event order
    follow the order written (`ascending`) or go against it."""

    def __init__(self, chips: int = 8):
        self.chips, self.written, self.last_step = chips, [], 0
        self.add(0, "SUBMIT", "c1", "tpu-v5e", chips, "TRAINING", None, None, None, None)
        self.add(0, "ALLOCATE", chips)

    def add(self, seconds: float, code: str, *payload) -> None:
        self.written.append((T0 + round(seconds * 1_000_000), code, payload))

    def span_edge(self, seconds: float, kind: str, edge: str, steps: int = 1) -> None:
        """KIND_START or KIND_END at `seconds`: a STEP_START at the next step, its END `steps` steps on;
        a save's or restore's END at the last step ended; a data wait without a step."""
        if kind == "STEP":
            if edge == "START":
                self.add(seconds, "STEP_START", self.last_step + 1)
            else:
                self.last_step += steps
                self.add(seconds, "STEP_END", self.last_step)
        elif kind in ("CHECKPOINT_SAVE", "CHECKPOINT_RESTORE") and edge == "END":
            self.add(seconds, f"{kind}_END", self.last_step)
        else:
            self.add(seconds, f"{kind}_{edge}", None)

    def events(self, ascending: bool) -> list:
        count = len(self.written)
        return [
            make_event(time_us, f"e{n if ascending else count - n:03d}", code, payload)
            for n, (time_us, code, payload) in enumerate(self.written)
        ]


def figures(events, as_of_s: float, chips: int = 8) -> tuple[dict, JobTimeline]:
    timeline = JobTimeline("j", HOUR_US, PEAK)
    timeline.feed(events)
    timeline.close(T0 + int(as_of_s * 1_000_000))
    return seconds_by_category(timeline.flush(), chips), timeline


def assert_hand_figures(story: Story, as_of_s: float, expected: dict) -> None:
    for ascending in (True, False):
        events = story.events(ascending)
        got, timeline = figures(events, as_of_s, story.chips)
        assert [r.reason for r in timeline.rejections] == [] and timeline.implicitly_closed_spans == 0
        assert {c: got[c] for c in CATEGORIES if got[c]} == pytest.approx(expected), ascending
        reference, decoded, _ = both(events, as_of_s)
        assert decoded == reference, ascending  # the same, fed as runs


@pytest.mark.parametrize("kind", KINDS)
def test_a_span_of_no_length_opens_and_closes_at_its_instant(kind):
    # 8 chips from 0 s; KIND_START and KIND_END at 10 s; FINISH at 30 s. Once, the END came first,
    # found nothing open and was rejected, and the span stayed open: 20 s of idle became its time.
    story = Story()
    story.span_edge(10, kind, "START")
    story.span_edge(10, kind, "END")
    story.add(30, "FINISH")
    assert_hand_figures(story, 30, {"idle": 30})


@pytest.mark.parametrize("around, nothing, again", list(itertools.product(KINDS, KINDS, (False, True))))
def test_a_span_of_no_length_at_the_instant_a_span_ends(around, nothing, again):
    # `around` from 0 to 10 s; at 10 s it ends, a span of `nothing` opens and closes, and (`again`)
    # `around` starts again, to 20 s; FINISH at 30 s. By hand: 10 s of `around`'s category and 20 s
    # idle, or (again) 20 s and 10 s idle.
    story = Story()
    story.span_edge(0, around, "START")
    story.span_edge(10, around, "END")
    story.span_edge(10, nothing, "START")
    story.span_edge(10, nothing, "END")
    if again:
        story.span_edge(10, around, "START")
        story.span_edge(20, around, "END")
    story.add(30, "FINISH")
    assert_hand_figures(story, 30, {CATEGORY[around]: 20, "idle": 10} if again else {CATEGORY[around]: 10, "idle": 20})


def test_a_save_of_no_length_preserves_the_step_ending_at_its_instant():
    # Steps 1-10 from 0 to 10 s, a save of step 10 with no duration at 10 s, then steps 11-15 to
    # 15 s and the job FAILs at 20 s. By hand: steps 1-10 preserved (10 s productive), 11-15 lost
    # (5 s), 5 s idle; the save took no time.
    story = Story()
    story.span_edge(0, "STEP", "START")
    story.span_edge(10, "STEP", "END", steps=10)
    story.span_edge(10, "CHECKPOINT_SAVE", "START")
    story.span_edge(10, "CHECKPOINT_SAVE", "END")
    story.span_edge(10, "STEP", "START")
    story.span_edge(15, "STEP", "END", steps=5)
    story.add(20, "FAIL")
    assert_hand_figures(story, 20, {"productive": 10, "lost": 5, "idle": 5})


def megatron_block() -> Story:
    """A Megatron log read with a block of steps cut to zero length (issue 35): 16 chips; steps
    1-10 from 0 to 10 s; steps 11-20 at 10 s with no time; 0.53 s idle; steps 21-30 from 10.53 s to
    20.53 s; FINISH at 20.53 s."""
    story = Story(chips=16)
    story.span_edge(0, "STEP", "START")
    story.span_edge(10, "STEP", "END", steps=10)
    story.span_edge(10, "STEP", "START")
    story.span_edge(10, "STEP", "END", steps=10)
    story.span_edge(10.53, "STEP", "START")
    story.span_edge(20.53, "STEP", "END", steps=10)
    story.add(20.53, "FINISH")
    return story


def test_a_block_of_steps_of_no_length_leaves_the_idle_time_after_it_idle():
    # By hand: productive (10 + 10) s x 16 chips = 320 chip-s; idle 0.53 s x 16 = 8.48 chip-s. Once,
    # steps 11-20 stayed open and the 8.48 chip-s of idle counted as step time.
    assert_hand_figures(megatron_block(), 20.53, {"productive": 20, "idle": 0.53})


@pytest.mark.slow  # one mpg run, a few seconds
def test_mpg_run_reads_a_block_of_steps_of_no_length_to_the_hand_figures(tmp_path: Path, capsys):
    """The Megatron block through Avro files, the decoder's step blocks and the Beam pipeline. The job
    comes without capacity: the headline gives its own factors on the demand base (issue 35, item 7),
    demand 16 chips x 20.53 s = 328.48 chip-s = 5.5 chip-min, RG 320 / 328.48 = 97.4%."""
    records = {"scheduler": [], "runtime": []}
    for event in megatron_block().events(ascending=False):
        common = {"event_id": event.event_id, "event_time": event.time_us, "job_id": "megatron"}
        if event.code in ("SUBMIT", "ALLOCATE", "FINISH"):
            records["scheduler"].append(
                {
                    **common,
                    "type": event.code,
                    "cluster": "c",
                    "accelerator": "h100",
                    "chips": 16,
                    "workload": "TRAINING" if event.code == "SUBMIT" else None,
                    "framework": None,
                    "team": None,
                    "topology": None,
                    "priority": None,
                }
            )
        else:
            records["runtime"].append({**common, "type": event.code, "step": event.payload[0], "attempt": None})
    for stream, stream_records in records.items():
        write_events(tmp_path / "in" / stream / "events.avro", stream, stream_records)
    assert main(["run", "--input", str(tmp_path / "in"), "--output", str(tmp_path / "out")]) == 0
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["streams"]["runtime"]["rejected"] == 0
    with connect(tmp_path / "out") as connection:
        productive, idle, closed = connection.execute(
            "select productive_chip_s, idle_chip_s, implicitly_closed_spans from job_goodput join jobs using (job_id)"
        ).fetchone()
    assert (productive, idle, closed) == (pytest.approx(320), pytest.approx(8.48), 0)
    printed = capsys.readouterr().out
    assert "ML Productivity Goodput of the jobs (demand base: requested chips x job lifetime" in printed
    assert "No fleet factors: no source states the chips online" in printed and "n/a = SG    n/a" not in printed
    assert (
        "MPG unknown = SG 100.0% x RG  97.4% x PG unknown   (no productive step has a profiler sample: "
        "PG coverage 0%; demand 5.5 chip-min)"
    ) in printed
    assert "Left out of the fleet figures" not in printed


def test_steps_of_no_length_inside_a_stretch_of_runs_pair_as_one_by_one():
    # Steps 1-4 from 0 to 10 s (2.5 s each); at 10 s step 5 with no length; steps 6-9 from 10 to 20 s;
    # FINISH at 20 s: 20 s productive. The decoder's runs hold the spans around 10 s; whichever
    # STEP_END at 10 s event order puts first, the instant pairs as its events one by one do.
    story = Story()
    for n in range(4):
        story.span_edge(2.5 * n, "STEP", "START")
        story.span_edge(2.5 * (n + 1), "STEP", "END")
    story.span_edge(10, "STEP", "START")
    story.span_edge(10, "STEP", "END")
    for n in range(4):
        story.span_edge(10 + 2.5 * n, "STEP", "START")
        story.span_edge(10 + 2.5 * (n + 1), "STEP", "END")
    story.add(20, "FINISH")
    assert_hand_figures(story, 20, {"productive": 20})
    assert all(runs_in(as_decoded(story.events(ascending))) for ascending in (True, False))
