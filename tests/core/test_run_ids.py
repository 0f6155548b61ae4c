"""A run's ids held in one string read as the tuple of them they stand for (fleet_goodput/core/step_runs.py)."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from fleet_goodput.core import step_runs
from fleet_goodput.core.events import Event
from fleet_goodput.core.step_runs import RunIds
from fleet_goodput.core.timeline import in_event_order

IDS = ("job-1-r0", "job-1-r1", "x", "job-1-r3", "é-5")  # one not ASCII: read by splitting


@pytest.mark.parametrize("ids", [IDS, IDS[:4]])
def test_run_ids_read_as_their_tuple(ids):
    run_ids = RunIds(" ".join(ids))
    assert len(run_ids) == len(ids) and list(run_ids) == list(ids)
    assert [run_ids[index] for index in range(-len(ids), len(ids))] == [*ids, *ids]
    assert run_ids[1:3] == ids[1:3] and run_ids[::2] == ids[::2] and run_ids[3:1] == ()
    assert run_ids.stretch(1, 4) == " ".join(ids[1:4]) and run_ids.stretch(0, len(ids)) == " ".join(ids)
    assert run_ids.joined(np.array([3, 0, 1])) == f"{ids[3]} {ids[0]} {ids[1]}"
    assert run_ids.joined(np.array([1, 2])) == f"{ids[1]} {ids[2]}"
    with pytest.raises(IndexError):
        run_ids[len(ids)]
    assert run_ids == ids and hash(run_ids) == hash(ids) and repr(run_ids) == repr(ids)
    assert run_ids != " ".join(ids)  # a run saved with its ids in a string is another value
    # Saved (pickled in a key's state) as the string of them, which every version reads.
    assert pickle.loads(pickle.dumps(run_ids)) == " ".join(ids)


def test_run_ids_sort_as_their_tuples_not_as_their_strings():
    """A tab sorts below the space that separates ids: the strings and the tuples disagree."""
    tab, plain = RunIds("a\tb"), RunIds("a c")
    assert ("a", "c") < ("a\tb",) and "a\tb" < "a c"
    assert plain < tab and sorted([tab, plain]) == [plain, tab]
    assert plain < ("a\tb",) and tab > ("a", "c")
    assert plain < "a\tb" and tab > "a c" and tab >= "a\tb" and tab <= "a\tb"  # a run saved: its ids a string


def test_a_run_made_of_a_run_s_ids_is_the_same_run():
    times = np.array([10, 20, 30, 40], dtype=np.int64)
    steps = np.array([1, 1, 2, 2], dtype=np.int64)
    codes = np.array([0, 1, 0, 1], dtype=np.int8)
    from_tuple = step_runs.make_run(times, steps, codes, IDS[:4])
    from_string = step_runs.make_run(times, steps, codes, " ".join(IDS[:4]))
    from_ids = step_runs.make_run(times, steps, codes, step_runs.ids(from_tuple))
    assert from_tuple == from_string == from_ids
    assert from_tuple[2] == "job-1-r0" and step_runs.last_key(from_tuple)[2] == "job-1-r3"
    assert [event.event_id for event in step_runs.expand(from_tuple)] == list(IDS[:4])
    # A run kept before (its ids a tuple) equals one kept now, and the two sort together.
    before = Event._make(from_tuple[:4] + (from_tuple[4][:3] + (IDS[:4],),))
    assert before == Event._make(from_tuple) and in_event_order([before, Event._make(from_string)]) == [before] * 2
