"""One job's key state saved mid-run, and the figures continuing it gives: run by write.sh with the
package of the commit it names on the path (tests/data/README.md says what the job does)."""

import json
import sys
from pathlib import Path

import numpy as np

import fleet_goodput
from fleet_goodput.core import step_runs
from fleet_goodput.core.events import PROFILE, make_event
from fleet_goodput.core.figure_vector import FIGURES
from fleet_goodput.core.session import new_state
from fleet_goodput.core.timeline import JobTimeline, StepRun, StepSpan

here, old = Path(sys.argv[1]), Path(sys.argv[2])
assert Path(fleet_goodput.__file__).is_relative_to(old), "the package of the commit named, not the installed one"

T0 = 1_767_225_600_000_000  # 2026-01-01T00:00:00Z
WINDOW_US = 60_000_000
PEAK = {"tpu-v5e": 197e12}
S = 1_000_000
ids = iter(f"e{n}" for n in range(1000))


def ev(seconds, code, *payload):
    return make_event(T0 + int(seconds * S), next(ids), code, tuple(payload))


def run(first_s, count, first_step):
    """A STEP_RUN of `count` spans of 9 s a step each, 1 s apart, from `first_s`."""
    starts = T0 + (first_s + 10 * np.arange(count)) * S
    times = np.stack([starts, starts + 9 * S], axis=1).ravel().astype(np.int64)
    steps = np.repeat(first_step + np.arange(count), 2).astype(np.int64)
    codes = np.tile(step_runs.code_numbers(["STEP_START", "STEP_END"]), count)
    return step_runs.make_run(times, steps, codes, [next(ids) for _ in times])


events = [
    ev(0, "SUBMIT", "c1", "tpu-v5e", 8, "TRAINING", None, None, None, None),
    ev(0, "ALLOCATE", 8),
    ev(10, "INIT_START"),
    ev(20, "INIT_END"),
    run(30, 10, 1),  # steps 1-10
    ev(130, "CHECKPOINT_SAVE_START"),
    ev(135, "CHECKPOINT_SAVE_END", 6),  # steps 1-6 productive (ideal awaiting a sample), 7-10 unresolved
    ev(140, "STEP_START", 11),
    ev(150, "STEP_END", 11),  # a span one by one, unresolved
    ev(160, "STEP_START", 12),  # open at the frontier (170)
    ev(175, "STEP_END", 12),
    ev(180, PROFILE, 1, 9.0, 8, 1e15, "ANALYTIC"),
    run(190, 3, 13),  # steps 13-15
    ev(220, "CHECKPOINT_SAVE_START"),
    ev(225, "CHECKPOINT_SAVE_END", 14),
    ev(230, "STEP_START", 15),
    ev(240, "STEP_END", 15),
    ev(250, "STEP_START", 13),  # steps going back: an implicit restore
    ev(260, "STEP_END", 13),
    ev(270, "PREEMPT", 0),
    ev(280, "ALLOCATE", 8),
    ev(285, "CHECKPOINT_RESTORE_START"),
    ev(290, "CHECKPOINT_RESTORE_END", 14),
    ev(300, "STEP_START", 15),
    ev(310, "STEP_END", 15),
    ev(320, "FINISH"),
]

state = new_state("j", JobTimeline("j", WINDOW_US, PEAK))
state.admit(events)
state.advance(T0 + 200 * S, T0 + 170 * S)
timeline = state.timeline
assert timeline.open_step is not None and timeline._productive and not timeline.samples
assert {type(span) for span in timeline.unresolved} == {StepRun, StepSpan}
(here / "key-state.pickle").write_bytes(state.to_bytes())

advance = state.advance(T0 + 400 * S, T0 + 400 * S)
continued = {  # what the second advance reports, each window's figures by name
    "windows": {
        str(window): dict(zip((*FIGURES, "ideal"), figures)) for window, figures in sorted(advance.windows.items())
    },
    "summary": advance.summary,
    "settled_counts": {"/".join(outcome): n for outcome, n in sorted(advance.settled_counts.items())},
}
(here / "continued.json").write_text(json.dumps(continued, indent=1) + "\n")
