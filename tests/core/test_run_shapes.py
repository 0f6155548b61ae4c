"""A feed's STEP_RUNs shaped at once (`step_runs.shapes`): what the timeline adds of a run from its
shape is what adding its stretches one by one gives, in every window.

The shapes are checked against a brute-force split of every stretch at every window edge, on runs
drawn at random (data waits of no time, idle time or none between spans, runs over many windows,
runs ending on a window edge), and the timeline is fed runs whose shapes take each path, both
ways (tests/core/test_step_runs.py's `both`: one by one, and collapsed into runs).
"""

from __future__ import annotations

import pickle
import random
from collections import defaultdict

import numpy as np
import pytest

from fleet_goodput.core import step_runs
from fleet_goodput.core.events import Event
from fleet_goodput.core.step_ledger import StepRun
from fleet_goodput.core.windows import split_at_windows
from test_step_runs import both, runs_in, spans
from test_timeline import T0, ev, sample, submit

WINDOW_US = 1_000


def random_run(rng: random.Random, start_us: int) -> tuple:
    """A STEP_RUN from `start_us`: 2-12 spans, a third of them data waits (some of no time), each
    step span 1-900 µs, idle time of 0-2,500 µs or none between spans, steps never going back."""
    times, steps, codes, step = [], [], [], 1
    now = start_us
    for _ in range(rng.randint(2, 12)):
        now += rng.choice([0, 0, rng.randint(1, 2_500)])
        if rng.random() < 0.33:
            length = rng.choice([0, rng.randint(1, 900)])
            times += [now, now + length]
            steps += [0, 0]
            codes += [2, 3]
        else:
            length, count = rng.randint(1, 900), rng.randint(1, 3)
            if step > 1 and rng.random() < 0.2:  # at times a span continues the step the one before ended at
                step -= 1
            times += [now, now + length]
            steps += [step, step + count - 1]
            codes += [0, 1]
            step += count
        now += length
    ids = tuple(f"r{start_us}-{n}" for n in range(len(times)))
    return Event._make(
        step_runs.make_run(
            np.array(times, dtype=np.int64), np.array(steps, dtype=np.int64), np.array(codes, dtype=np.int8), ids
        )
    )


def stretch_by_stretch(run) -> list[tuple[int, int, int]] | None:
    """`RunShape.windows` of one run the long way: every data wait and every time between spans split
    at every window edge, summed per window; None where the run ends on a window edge past its first window."""
    times, _, codes, _ = step_runs.arrays(run)
    start, end = int(times[0]), int(times[-1])
    first_window = start - start % WINDOW_US
    if end >= first_window + WINDOW_US and end % WINDOW_US == 0:
        return None
    waits, between = defaultdict(int), defaultdict(int)
    for span in range(len(times) // 2):
        if codes[2 * span] == 2:
            for window, piece_start, piece_end in split_at_windows(
                int(times[2 * span]), int(times[2 * span + 1]), WINDOW_US
            ):
                waits[window] += piece_end - piece_start
        if span:
            for window, piece_start, piece_end in split_at_windows(
                int(times[2 * span - 1]), int(times[2 * span]), WINDOW_US
            ):
                between[window] += piece_end - piece_start
    return [(window, waits[window], between[window]) for window in range(first_window, end, WINDOW_US)]


@pytest.mark.parametrize("seed", range(20))
def test_shapes_give_each_window_what_its_stretches_add_one_by_one(seed):
    rng = random.Random(seed)
    runs, start_us = [], rng.randint(0, 5_000)
    for _ in range(rng.randint(1, 30)):
        runs.append(random_run(rng, start_us))
        start_us = step_runs.end_us(runs[-1]) + rng.randint(1, 3_000)
    if seed % 4 == 0:  # a run that ends exactly on a window edge, past its first window
        last = runs[-1]
        times = np.frombuffer(last[4][0], dtype=np.int64).copy()
        times[-1] += -times[-1] % WINDOW_US + WINDOW_US
        runs[-1] = Event._make(step_runs.make_run(times, *step_runs.arrays(last)[1:]))
    shaped = step_runs.shapes(runs, WINDOW_US)
    assert [shape.windows for shape in shaped] == [stretch_by_stretch(run) for run in runs]
    for run, shape in zip(runs, shaped):
        times, steps, codes, _ = step_runs.arrays(run)
        stepping = codes[0::2] == 0
        assert (shape.start_us, shape.end_us) == (times[0], times[-1])
        assert shape.starts.tolist() == times[0::2][stepping].tolist()
        assert shape.ends.tolist() == times[1::2][stepping].tolist()
        assert shape.firsts.tolist() == steps[0::2][stepping].tolist()
        assert shape.lasts.tolist() == steps[1::2][stepping].tolist()
        # The facts found for all the runs at once are those one run's columns give (a run read from
        # a key's saved state finds its own), and they survive no pickle.
        if stepping.any():
            assert (shape.facts.first_step, shape.facts.last_step) == (
                steps[0::2][stepping][0],
                steps[1::2][stepping][-1],
            )
            run = StepRun(shape.starts, shape.ends, shape.firsts, shape.lasts, None)
            assert run.facts() == shape.facts
            kept = StepRun(shape.starts, shape.ends, shape.firsts, shape.lasts, None, _facts=shape.facts)
            assert "_facts" not in pickle.loads(pickle.dumps(kept)).__dict__
        else:
            assert shape.facts is None


def test_spans_whose_steps_are_not_all_their_own():
    # Steps 1-10, then a span continuing step 10 to 20: the second counts from step 11 only.
    run = Event._make(
        step_runs.make_run(
            np.array([0, 10, 10, 20]),
            np.array([1, 10, 10, 20]),
            np.array([0, 1, 0, 1], dtype=np.int8),
            ("a", "b", "c", "d"),
        )
    )
    [shape] = step_runs.shapes([run], WINDOW_US)
    assert shape.facts == (0, 20, 1, 10, 20, 20, False)
    assert StepRun(shape.starts, shape.ends, shape.firsts, shape.lasts, None).facts() == shape.facts


def test_shapes_of_no_runs():
    assert step_runs.shapes([], WINDOW_US) == []


WINDOW_S = 60


@pytest.mark.parametrize(
    "case", ["inside one window", "across two edges", "ends on an edge", "a wait of no time on the edge it ends at"]
)
def test_a_run_s_time_by_window_is_the_same_fed_as_a_run(case):
    # Spans of 7 s with a data wait and idle time between them; where they end decides the path taken.
    first_s = {
        "inside one window": 2,
        "across two edges": 50,
        "ends on an edge": 60 - 3 * 7 - 6 - 2,
        "a wait of no time on the edge it ends at": 60 - 3 * 7 - 6 - 2,
    }[case]
    events = [
        submit(0),
        ev(0, "ALLOCATE", 8),
        *spans(first_s, 2, seconds=7),
        ev(first_s + 14, "DATA_WAIT_START", None),
        ev(first_s + 20, "DATA_WAIT_END", None),
        *spans(first_s + 22, 1 if case != "across two edges" else 12, seconds=7, first_step=21),
    ]
    if case == "a wait of no time on the edge it ends at":
        events += [ev(60, "DATA_WAIT_START", None), ev(60, "DATA_WAIT_END", None)]
    end_s = max(e.time_us for e in events) / 1e6 - T0 / 1e6
    events += [ev(end_s + 1, "CHECKPOINT_SAVE_START"), ev(end_s + 2, "CHECKPOINT_SAVE_END", 200), sample(1, 2e15)]
    reference, collapsed, decoded = both(events, end_s + 30, window_us=WINDOW_S * 1_000_000)
    assert runs_in(decoded) == 1
    [shape] = step_runs.shapes([e for e in decoded if step_runs.is_run(e)], WINDOW_S * 1_000_000)
    assert (None if shape.windows is None else len(shape.windows)) == {
        "inside one window": 1,
        "across two edges": 3,
        "ends on an edge": None,
        "a wait of no time on the edge it ends at": None,
    }[case]
    assert collapsed == reference
