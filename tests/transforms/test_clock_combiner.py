"""The run's clock combiner (`transforms/sessionize.py::ClockFn`) on its own, without a pipeline.

Beam may split the scheduler files' latest times over any number of accumulators and merge them in
any order: the clock must come out the same. Each case is tested three ways (TFDV's combiner
tests): sequential `add_input`, partial accumulators merged in every order, and the extracted
output. Expected clocks are worked out by hand in each test from the rules of
fleet_goodput/core/asof.py: the as-of time is the latest scheduler event time, except for a
trailing group of at most 10 events of one job after more than an hour of silence; the store
keeps the 11 latest and 11 earliest distinct (time, key), latest first.
"""

from __future__ import annotations

from itertools import permutations

import pytest

from fleet_goodput.core.keys import capacity_key, observed_keys
from fleet_goodput.core.continuation import Continuation
from fleet_goodput.transforms.sessionize import ClockFn

T0 = 1_767_225_600_000_000  # 2026-01-01T00:00:00Z
S = 1_000_000  # one second in microseconds
H = 3600 * S
CAPACITY = capacity_key("c1", "tpu-v5e")


def _sequential(fn: ClockFn, parts: list[list[tuple[int, str]]]):
    accumulator = fn.create_accumulator()
    for times in parts:
        accumulator = fn.add_input(accumulator, times)
    return accumulator


def _merged(fn: ClockFn, parts: list[list[tuple[int, str]]], order: tuple[int, ...]):
    """One accumulator per part (as Beam's bundles would make), merged in `order`."""
    partial = [fn.add_input(fn.create_accumulator(), parts[index]) for index in order]
    return fn.merge_accumulators(partial)


def _every_way(fn: ClockFn, parts: list[list[tuple[int, str]]]) -> list:
    """The clock from sequential adds, from every merge order, and from a merge of merges."""
    outputs = [fn.extract_output(_sequential(fn, parts))]
    outputs += [fn.extract_output(_merged(fn, parts, order)) for order in permutations(range(len(parts)))]
    halves = [_merged(fn, parts[:1], (0,)), _merged(fn, parts[1:], tuple(range(len(parts) - 1)))]
    outputs.append(fn.extract_output(fn.merge_accumulators(halves[::-1])))
    return outputs


# (name, the files' latest times, the expected clock), each worked out by hand.
CASES = [
    pytest.param(
        [[(T0, "j1"), (T0, CAPACITY), (T0 + 100 * S, "j1")], [(T0 + 360 * S, "j1")], [(T0 + 580 * S, "j1")]],
        # The latest event, 580 s: j1's FINISH follows its PREEMPT by 220 s, far less than an hour.
        {
            "as_of_us": T0 + 580 * S,
            "kept_times": [
                (T0 + 580 * S, "j1"),
                (T0 + 360 * S, "j1"),
                (T0 + 100 * S, "j1"),
                (T0, "j1"),
                (T0, CAPACITY),
            ],
            "history_start_us": None,
        },
        id="the latest scheduler event sets the clock",
    ),
    pytest.param(
        [[(T0 + 200 * S, "a")], [(T0 + 10 * H, "z"), (T0 + 10 * H + S, "z")], [(T0 + 300 * S, "b")]],
        # z's two events come 10 h after the rest: one job after a silence of over an hour, a clock
        # ahead; the clock stays at b's 300 s. They are still kept, for the next run.
        {
            "as_of_us": T0 + 300 * S,
            "kept_times": [(T0 + 10 * H + S, "z"), (T0 + 10 * H, "z"), (T0 + 300 * S, "b"), (T0 + 200 * S, "a")],
            "history_start_us": None,
        },
        id="one job far ahead does not move the clock",
    ),
    pytest.param(
        [[(T0 + 10 * H, "z")], [(T0 + 10 * H, CAPACITY)], [(T0 + 300 * S, "b")]],
        # A capacity level is the fleet's word: with it beside z at 10 h, the group is not one job's.
        {
            "as_of_us": T0 + 10 * H,
            "kept_times": [(T0 + 10 * H, "z"), (T0 + 10 * H, CAPACITY), (T0 + 300 * S, "b")],
            "history_start_us": None,
        },
        id="a capacity level with the late job moves the clock",
    ),
    pytest.param(
        [[(T0 - 25 * 365 * 86_400 * S, "reset")], [(T0, "a"), (T0 + 60 * S, "b")]],
        # One event 25 years before the rest (a clock reset to a default date): the history starts at T0.
        # (Had a and b been one job, its two events would be a group after 25 years of silence: a clock ahead.)
        {
            "as_of_us": T0 + 60 * S,
            "kept_times": [(T0 + 60 * S, "b"), (T0, "a"), (T0 - 25 * 365 * 86_400 * S, "reset")],
            "history_start_us": T0,
        },
        id="a clock reset sets where the history starts",
    ),
]


@pytest.mark.parametrize("parts, expected", CASES)
def test_the_clock_is_the_same_however_the_times_are_split_and_merged(parts, expected):
    fn = ClockFn(None, Continuation())
    for output in _every_way(fn, parts):
        assert output == expected


def test_only_the_11_latest_and_11_earliest_times_are_kept_whatever_the_merge_order():
    # 30 jobs, one event each, a second apart: job n at T0 + n s.
    times = [(T0 + n * S, f"j{n:02d}") for n in range(1, 31)]
    parts = [times[0::3], times[1::3], times[2::3]]
    kept = [(T0 + n * S, f"j{n:02d}") for n in range(30, 19, -1)] + [
        (T0 + n * S, f"j{n:02d}") for n in range(11, 0, -1)
    ]
    fn = ClockFn(None, Continuation())
    assert _sequential(fn, parts) == kept
    for order in permutations(range(3)):
        assert _merged(fn, parts, order) == kept
    for output in _every_way(fn, parts):
        assert output == {"as_of_us": T0 + 30 * S, "kept_times": kept, "history_start_us": None}


def test_a_given_as_of_time_wins_and_the_times_are_still_kept():
    fn = ClockFn(T0 + 50 * S, Continuation())
    for output in _every_way(fn, [[(T0, "a")], [(T0 + 90 * S, "b")]]):
        assert output == {
            "as_of_us": T0 + 50 * S,
            "kept_times": [(T0 + 90 * S, "b"), (T0, "a")],
            "history_start_us": None,
        }


def test_a_continued_run_starts_from_the_stores_times_and_never_goes_back():
    # The store's last run was as of 1,000 s, its kept times end at 300 s; the new files reach 200 s.
    continuation = Continuation(
        as_of_us=T0 + 1000 * S, kept_times=((T0 + 300 * S, "c"),), history_start_us=T0 - 86_400 * S
    )
    fn = ClockFn(None, continuation)
    assert fn.create_accumulator() == [(T0 + 300 * S, "c")]
    for output in _every_way(fn, [[(T0 + 100 * S, "a")], [(T0 + 200 * S, "b")]]):
        # The clock reaches 300 s, before the last run's 1,000 s: it stays at 1,000 s. The history's
        # start is the store's, whatever the times say.
        assert output == {
            "as_of_us": T0 + 1000 * S,
            "kept_times": [(T0 + 300 * S, "c"), (T0 + 200 * S, "b"), (T0 + 100 * S, "a")],
            "history_start_us": T0 - 86_400 * S,
        }


def test_stated_observation_periods_set_the_clock_to_the_earliest_clusters_end():
    c1_from, c1_to = observed_keys("c1")
    c2_from, c2_to = observed_keys("c2")
    parts = [
        [(T0, c1_from), (T0 + 2 * H, c1_to), (T0 + 3 * H, "a")],
        [(T0 + H, c1_from), (T0 + 5 * H, c1_to)],  # c1 restated: earliest start T0, latest end 5 h
        [(T0 + H, c2_from), (T0 + 4 * H, c2_to)],  # c2 observed up to 4 h: the fleet is complete up to 4 h
    ]
    fn = ClockFn(None, Continuation())
    for output in _every_way(fn, parts):
        assert output == {
            "as_of_us": T0 + 4 * H,
            "kept_times": [
                (T0 + 3 * H, "a"),
                (T0, c1_from),
                (T0 + H, c2_from),
                (T0 + 4 * H, c2_to),
                (T0 + 5 * H, c1_to),
            ],
            "history_start_us": None,
        }


def test_no_scheduler_time_gives_no_clock_or_the_stores():
    assert ClockFn(None, Continuation()).extract_output(ClockFn(None, Continuation()).create_accumulator()) == {
        "as_of_us": None,
        "kept_times": [],
        "history_start_us": None,
    }
    continued = ClockFn(None, Continuation(as_of_us=T0, kept_times=((T0, "a"),)))
    assert continued.extract_output(continued.merge_accumulators([continued.create_accumulator()])) == {
        "as_of_us": T0,
        "kept_times": [(T0, "a")],
        "history_start_us": None,
    }
